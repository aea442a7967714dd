"""The kiln cache directory as a whole: what is where, how big, and cleaning it (``kiln cache``).

::

    <cache dir>/                         KILN_CACHE_DIR, default ~/.cache/kiln (mode 0700)
      artifacts-v2/ab/<key>/             compiled kernels (the artifact store): counted in the
                                         KILN_CACHE_MAX_MB cap, evicted least recently used first
      artifacts-v1/ ...                  older store formats: never read; `clear` removes them
      bundle-records/<hash>.json         which tuned variant used which artifact (`kiln bundle save`)
      programs/<hash>.json               each program's record (triton_kiln.program; small, bounded:
                                         kept by `clear`, its next run compiles what it lists again)
      tuning.sqlite3 (-wal, -shm)        the tuning database (unless KILN_TUNING_DB puts it
                                         elsewhere): tuning results, not counted in the cap and
                                         never removed by kiln (a re-tune costs minutes)
      native/, triton-key-v2.json        kiln's C launcher build and Triton's key (small, rebuilt)
      node/                              the node's lock files (docs/NODE.md; empty files, small)

Everything here stays inside the cache directory and follows no symbolic link inside it (see
:mod:`triton_kiln.artifacts.usage`): a link is removed as a link, never what it points to. Nothing here
creates the cache directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from triton_kiln.artifacts import usage
from triton_kiln.artifacts.artifact import STORE_DIR
from triton_kiln.bundle.index import RECORDS_DIR
from triton_kiln.errors import KilnError

_STORE_PATTERN = re.compile(r"artifacts-v\d+")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class CacheSizeError(KilnError, ValueError):
    """A size given to ``kiln cache prune --max-size`` cannot be read."""


MAX_SIZE = 1 << 60
"""The largest size :func:`parse_size` accepts (1 EiB): more than any disk, so a larger one is a typo."""


def parse_size(text: str) -> int:
    """Bytes in ``text``: a number of bytes, or with a unit K, M, G, T (powers of 1024; ``500M``,
    ``2G``, ``1.5GiB``, ``4096``). The number is read exactly (never through a float), so a size
    that is not a whole number of bytes (``0.4B``, ``1.3K``) or is over :data:`MAX_SIZE` is refused,
    never rounded to another size."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise CacheSizeError(
            f"{text!r} is not a size: give bytes (4096) or a number with K, M, G or T (500M, 2G; powers "
            f"of 1024)"
        )
    shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:37] + "..."
    size = Fraction(match.group(1)) * _UNITS[match.group(2).lower()]
    if size > MAX_SIZE:
        raise CacheSizeError(f"{shown} is more than 1 EiB (2**60 bytes): give a size a disk can hold")
    if size.denominator != 1:
        raise CacheSizeError(
            f"{shown} is {float(size):g} bytes, not a whole number of bytes: give a size of whole "
            f"bytes, as in 4096B, 500K or 1.5G"
        )
    return int(size)


def human(size: int) -> str:
    """``size`` bytes for people: ``512 B``, ``1.5 KiB``, ``45.6 MiB``, ``10.0 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _stores(root: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [root / name for name in names if _STORE_PATTERN.fullmatch(name)]


def _records(root: Path) -> list[Path]:
    directory = root / RECORDS_DIR
    if os.path.islink(directory) or not directory.is_dir():
        return []
    return sorted(directory.iterdir())


@dataclass(frozen=True)
class CacheInfo:
    """What a cache directory holds (``kiln cache info``)."""

    root: Path
    exists: bool
    entries: int
    size: int
    """Bytes of the current artifact store (what the cap counts)."""
    temporary: int
    """Bytes in entries being written or left by killed writers."""
    old_formats: int
    """Bytes of older store formats (never read)."""
    records: int
    records_size: int
    tuning_db: Path
    tuning_db_size: int | None
    """Bytes of the tuning database with its -wal/-shm files; ``None``: no database there."""
    other: int
    """Bytes of everything else in the directory (kiln's launcher build, Triton's key)."""


def info(root: Path, tuning_db: Path) -> CacheInfo:
    """What ``root`` holds; ``tuning_db`` is the tuning database's path (wherever it is)."""
    exists = root.is_dir()
    current = usage.scan(root / STORE_DIR)
    old = sum(usage.tree_size(store) for store in _stores(root) if store.name != STORE_DIR)
    records = _records(root)
    db_files = [
        tuning_db,
        tuning_db.with_name(tuning_db.name + "-wal"),
        tuning_db.with_name(tuning_db.name + "-shm"),
    ]
    db_size = sum(usage.tree_size(path) for path in db_files) if os.path.lexists(tuning_db) else None
    known = {*(_stores(root)), root / RECORDS_DIR, *db_files}
    other = 0
    if exists:
        other = sum(usage.tree_size(child) for child in root.iterdir() if child not in known)
    return CacheInfo(
        root=root,
        exists=exists,
        entries=len(current.entries),
        size=current.size,
        temporary=sum(entry.size for entry in current.temporary),
        old_formats=old,
        records=len(records),
        records_size=sum(usage.tree_size(path) for path in records),
        tuning_db=tuning_db,
        tuning_db_size=db_size,
        other=other,
    )


@dataclass(frozen=True)
class Cleared:
    """What :func:`clear` removed."""

    entries: int
    records: int
    freed: int


def clear(root: Path) -> Cleared:
    """Remove every compiled kernel (all store formats) and the bundle records of ``root``.

    Entries being written by a running process (fresh ``.tmp-*`` directories) are left alone;
    the tuning database, kiln's launcher build and Triton's key are kept.
    """
    entries = records = freed = 0
    for store in _stores(root):
        if os.path.islink(store) or not store.is_dir():
            freed += usage.tree_size(store)
            usage.remove(store)  # a link is unlinked, never followed
            continue
        found = usage.scan(store)
        for entry in found.entries:
            usage.remove(entry.path)
            freed += entry.size
        entries += len(found.entries)
        freed += usage.remove_stale_temporary(found)
        for shard in store.iterdir():
            with contextlib.suppress(OSError):
                shard.rmdir()  # empty shards only; one being written into stays
        if store.name != STORE_DIR:
            with contextlib.suppress(OSError):
                store.rmdir()
    for path in _records(root):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            continue  # kiln makes no directories there
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a file or a link, never what a link points to
        records += path.suffix == ".json"
        freed += st.st_size
    return Cleared(entries, records, freed)


def prune(root: Path, max_bytes: int) -> usage.Evicted:
    """Evict least recently used entries of the current store until it holds at most ``max_bytes``
    (leftovers of killed writers go too; entries being written are left alone)."""
    store = root / STORE_DIR
    usage.remove_stale_temporary(usage.scan(store))
    return usage.evict(store, max_bytes)

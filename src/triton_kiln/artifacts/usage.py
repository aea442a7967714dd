"""The artifact store as a whole: its entries, their sizes and last use, and LRU eviction.

Used by :class:`~triton_kiln.artifacts.store.ArtifactStore` (the ``KILN_CACHE_MAX_MB`` cap, applied as
the store grows) and by ``kiln cache info | clear | prune``::

    <store root>/ab/<key>/      an entry: size = the sum of its regular files' sizes (triton/ too),
                                last use = the directory's mtime (set when written, and touched
                                by every read of the store: ArtifactStore.get / put)
    <store root>/ab/.tmp-*      an entry being written (or a killed writer's leftover): never
                                evicted; removed only once older than an hour

Nothing here follows a symbolic link: the tree is walked with ``lstat`` semantics (a symlink
counts as its own few bytes and is removed as a link, never what it points to), and an entry is
removed by renaming it aside inside its shard (one atomic step: a reader sees the whole entry
or none) and then deleting the renamed directory with ``shutil.rmtree``, which does not follow
links either. A reader that loses an entry this way gets a miss (the store treats a vanished
entry as one) and recompiles.

Automatic eviction keeps every entry used in the last :data:`GRACE_S` seconds (another process
may be reading it), so the cap is exceeded by at most what was used that recently; ``kiln cache
prune`` and ``clear`` are explicit and spare only entries being written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

GRACE_S = 60.0
"""Automatic eviction never removes an entry used (read or written) this recently."""
STALE_TMP_S = 3600.0
"""A ``.tmp-*`` directory older than this is a killed writer's leftover (see store.py)."""
LOW_WATER = 0.9
"""Automatic eviction goes down to this fraction of the cap, so the next writes don't evict again."""


@dataclass(frozen=True)
class Entry:
    """One entry of the store (or a stray file or link where an entry's directory should be)."""

    path: Path
    size: int
    last_used: float


@dataclass(frozen=True)
class Usage:
    """What the store holds."""

    entries: list[Entry]
    """Every entry, least recently used first."""
    temporary: list[Entry]
    """``.tmp-*`` directories: entries being written, or leftovers of killed writers."""

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.entries)


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (``path`` itself if a file or link); no link is
    followed and a file that vanishes meanwhile counts as 0."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) else 0
    total = 0
    with contextlib.suppress(OSError), os.scandir(path) as children:
        for child in children:
            total += tree_size(Path(child.path))
    return total


def _children(directory: Path) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as children:
            yield from children
    except (FileNotFoundError, NotADirectoryError):
        return


def _entry(child: os.DirEntry[str]) -> Entry | None:
    try:
        st = child.stat(follow_symlinks=False)
    except OSError:
        return None
    return Entry(Path(child.path), tree_size(Path(child.path)), st.st_mtime)


def holds_entry(store_root: Path) -> bool:
    """Whether the store at ``store_root`` holds anything in a shard (an entry, or one being
    written): it stops at the first, a listing or two, where :func:`scan` stats every file. An
    unreadable store holds nothing this can see."""
    try:
        for shard in _children(store_root):
            if shard.is_dir(follow_symlinks=False) and next(_children(Path(shard.path)), None) is not None:
                return True
    except OSError:
        return False
    return False


def scan(store_root: Path) -> Usage:
    """Every entry under ``store_root`` (``<cache dir>/artifacts-v2``), least recently used first.

    A ``store_root`` that is a symlink is not walked (kiln never made one); see :func:`is_link`.
    """
    entries: list[Entry] = []
    temporary: list[Entry] = []
    if os.path.islink(store_root):
        return Usage(entries, temporary)
    for shard in _children(store_root):
        if not shard.is_dir(follow_symlinks=False):
            found = _entry(shard)  # a stray file or link at the shard level: removable junk
            if found is not None:
                entries.append(found)
            continue
        for child in _children(Path(shard.path)):
            found = _entry(child)
            if found is None:
                continue
            (temporary if child.name.startswith(".tmp-") else entries).append(found)
    entries.sort(key=lambda entry: entry.last_used)
    return Usage(entries, temporary)


def remove(path: Path) -> None:
    """Remove one entry: renamed aside in its own directory first (readers see all of it or
    nothing), then deleted; a link or file is unlinked, never followed."""
    aside = path.with_name(f".tmp-discard-{path.name[:16]}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # removed meanwhile (by another process's eviction)
    except OSError:
        aside = path
    if os.path.islink(aside) or not os.path.isdir(aside):
        with contextlib.suppress(OSError):
            os.unlink(aside)
        return
    shutil.rmtree(aside, ignore_errors=True)


@dataclass(frozen=True)
class Evicted:
    """What an eviction did."""

    removed: int
    freed: int
    left: int
    """Bytes the store holds afterwards."""


def evict(store_root: Path, max_bytes: int, *, grace_s: float = 0.0, keep: Iterable[Path] = ()) -> Evicted:
    """Remove least recently used entries until the store holds at most ``max_bytes``, sparing
    those used in the last ``grace_s`` seconds and those in ``keep``."""
    usage = scan(store_root)
    spared = {Path(path) for path in keep}
    total = usage.size
    removed = freed = 0
    now = time.time()
    for entry in usage.entries:
        if total <= max_bytes:
            break
        if entry.path in spared or now - entry.last_used < grace_s:
            continue
        remove(entry.path)
        total -= entry.size
        freed += entry.size
        removed += 1
    return Evicted(removed, freed, total)


def remove_stale_temporary(usage: Usage) -> int:
    """Remove the ``.tmp-*`` leftovers older than :data:`STALE_TMP_S`; returns bytes freed."""
    freed = 0
    now = time.time()
    for entry in usage.temporary:
        if now - entry.last_used > STALE_TMP_S:
            remove(entry.path)
            freed += entry.size
    return freed

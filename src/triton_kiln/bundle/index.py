"""The kiln cache's index of tuned variants, which ``kiln bundle save`` turns into a bundle.

Each time a ``triton_kiln.autotune``'d kernel launches a variant for the first time in a process, it
writes ``<cache_dir>/bundle-records/<hash>.json`` (atomically): the kernel's parameter record
and the variant's :class:`~triton_kiln.bundle.format.EntryRecord`, whose binary stays in the artifact
store under its key. :func:`collect_recorded` gathers them back, newest record per variant,
with their binaries from the store; records whose binary is gone are skipped with a warning.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.bundle.format import BundleError, EntryRecord, KernelRecord, ParamRecord
from triton_kiln.errors import KilnError

RECORDS_DIR = "bundle-records"


def record_path(cache_dir: Path, kernel: KernelRecord, entry: EntryRecord) -> Path:
    identity = json.dumps(
        [kernel.kernel_hash, entry.artifact_key, entry.key_values, entry.args.to_json()], sort_keys=True
    )
    return cache_dir / RECORDS_DIR / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def write_record(cache_dir: Path, kernel: KernelRecord, entry: EntryRecord) -> Path:
    from triton_kiln.files import atomic_write

    path = record_path(cache_dir, kernel, entry)
    data = {
        "kernel": {
            "name": kernel.name,
            "kernel_hash": kernel.kernel_hash,
            "params": [p.to_json() for p in kernel.params],
        },
        "entry": entry.to_json(),
    }
    atomic_write(path, json.dumps(data, allow_nan=False).encode())
    return path


def collect_recorded(
    cache_dir: Path, kernel_name: str | None = None
) -> tuple[list[KernelRecord], dict[str, CompiledArtifact]]:
    """Every recorded variant (of ``kernel_name`` only, if given) and its binary."""
    from triton_kiln.artifacts.store import ArtifactStore

    directory = cache_dir / RECORDS_DIR
    files = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime) if directory.is_dir() else []
    if not files:  # checked before the store is opened, which would create the cache directory
        raise BundleError(_nothing_recorded(cache_dir))
    store = ArtifactStore(cache_dir)
    kernels: dict[tuple[str, str], KernelRecord] = {}
    binaries: dict[str, CompiledArtifact] = {}
    seen: dict[tuple[str, str], dict[str, int]] = {}
    for file in files:
        try:
            data = json.loads(file.read_text())
            where = str(file)
            meta = data["kernel"]
            params = [ParamRecord.from_json(p, where) for p in meta["params"]]
            entry = EntryRecord.from_json(data["entry"], where)
        except (OSError, ValueError, KeyError, TypeError, KilnError) as exc:
            warnings.warn(f"skipping the unreadable record {file}: {exc}", RuntimeWarning, stacklevel=2)
            continue
        if kernel_name is not None and meta["name"] != kernel_name:
            continue
        artifact = store.get(entry.artifact_key)
        if artifact is None:
            warnings.warn(
                f"skipping a variant of {meta['name']}: its binary {entry.artifact_key[:16]} is no longer in "
                f"the kiln cache {cache_dir}; run the kernel again to bring it back",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        ident = (str(meta["name"]), str(meta["kernel_hash"]))
        record = kernels.setdefault(ident, KernelRecord(ident[0], ident[1], params))
        # One entry per (key values, argument kinds): the newest record wins (files are by mtime).
        variant = json.dumps([entry.key_values, entry.args.to_json()], sort_keys=True)
        slots = seen.setdefault(ident, {})
        if variant in slots:
            record.entries[slots[variant]] = entry
        else:
            slots[variant] = len(record.entries)
            record.entries.append(entry)
        binaries[entry.artifact_key] = artifact
    if not kernels:
        what = f"of {kernel_name!r} " if kernel_name else ""
        raise BundleError(
            f"no tuned variants {what}are recorded in the kiln cache {cache_dir}; run your kiln.autotune'd "
            f"kernels with real inputs first (with the same KILN_CACHE_DIR)."
        )
    return list(kernels.values()), binaries


def _nothing_recorded(cache_dir: Path) -> str:
    """Why there is nothing to bundle, in ``kiln cache info``'s words: the cache may hold compiled
    kernels (``kiln compile``, a demo, Triton's own calls), but a bundle takes tuned variants only."""
    from triton_kiln.artifacts import usage
    from triton_kiln.artifacts.artifact import STORE_DIR

    compiled = len(usage.scan(cache_dir / STORE_DIR).entries)  # as cache info counts
    held = (
        f"the cache holds {compiled} compiled kernel{'s' if compiled != 1 else ''}, but a bundle takes "
        f"tuned variants only (the config tuning chose for each key)"
        if compiled
        else "the cache holds no compiled kernels either"
    )
    return (
        f"no tuned variants recorded in {cache_dir} ({RECORDS_DIR}/ is empty; {held}). A variant is "
        f"recorded when a triton_kiln.autotune'd kernel runs with real inputs on a GPU, or by `kiln "
        f"tune`: tune with the same KILN_CACHE_DIR first, or pass --cache-dir the cache that holds "
        f"them."
    )

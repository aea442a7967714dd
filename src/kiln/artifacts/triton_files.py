"""Triton's on-disk layout of a compiled kernel, and Triton's ``CompiledKernel`` built from it.

Triton loads a kernel from files: ``<name>.json`` (its metadata) and ``<name>.<ext>`` (the
binary), listed in a "metadata group" ``{"<name>.json": path, "<name>.cubin": path}``. This
module writes an artifact in that layout and hands it to Triton, so the parent (or the GPU
sandbox, which gets the paths) launches without calling ``triton.compile``.

Where the files go (:func:`triton_dir`)::

    disk cache on:   <cache>/artifacts-v1/ab/<key>/triton/<name>.json, <name>.cubin
                     (the entry is stored and checked once per process, then remembered)
    disk cache off:  <one temp dir per process>/<key[:32]>/...  (removed at exit)

The store-level API the pool and the autotuner use: :func:`triton_dir`, :func:`triton_files`
(the metadata group) and :func:`load_kernel` (Triton's ``CompiledKernel``). Each remembers the
directory per artifact key, so a repeated call neither re-validates the stored entry nor makes
a new temporary directory.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln import triton_compat
from kiln.artifacts.artifact import CompiledArtifact
from kiln.artifacts.store import ArtifactStore
from kiln.files import atomic_write

if TYPE_CHECKING:
    from kiln.compile.request import CompileRequest

_lock = threading.Lock()
_dirs: dict[tuple[Path | None, str], Path] = {}  # (store root or None, artifact key) -> directory
_temp_root: Path | None = None


def write_triton_group(artifact: CompiledArtifact, directory: Path) -> dict[str, str]:
    """Write the artifact as Triton's cache does (``<name>.json`` + ``<name>.<ext>``)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = artifact.name[:150]
    meta_path = directory / f"{base}.json"
    bin_path = directory / f"{base}.{artifact.binary_ext}"
    if not bin_path.exists():
        atomic_write(bin_path, artifact.binary)
    if not meta_path.exists():
        atomic_write(meta_path, json.dumps(artifact.metadata).encode())
    return {meta_path.name: str(meta_path), bin_path.name: str(bin_path)}


def to_triton_kernel(artifact: CompiledArtifact, request: CompileRequest, directory: Path) -> Any:
    """Triton's ``CompiledKernel`` for this artifact, loaded without compiling.

    ``directory`` receives the binary and metadata (Triton reads them from files). The kernel
    binary is loaded onto the GPU lazily, on first launch, as Triton always does.
    """
    return triton_kernel_from_source(artifact, request.ast_source(request.kernel), directory)


def triton_kernel_from_source(artifact: CompiledArtifact, src: Any, directory: Path) -> Any:
    """Triton's ``CompiledKernel`` from the artifact's files in ``directory`` and a source record
    (an ``ASTSource``, or any object with the ``fn.arg_names``, ``signature`` and ``constants``
    Triton's launcher reads)."""
    group = write_triton_group(artifact, directory)
    return triton_compat.compiled_kernel_from_files(src, group, artifact.metadata.get("hash", artifact.key))


def triton_dir(store: ArtifactStore | None, artifact: CompiledArtifact) -> Path:
    """The directory that holds (or will hold) ``artifact`` in Triton's layout.

    With a store: ``<entry>/triton`` of the artifact's entry, which is stored (or checked) on
    the first call in this process only. Without one: a directory under this process's
    temporary root, removed at exit.
    """
    root = store.root if store is not None else None
    slot = (root, artifact.key)
    with _lock:
        known = _dirs.get(slot)
    if known is not None:
        return known
    directory = store.put(artifact) / "triton" if store is not None else _temporary_root() / artifact.key[:32]
    with _lock:
        return _dirs.setdefault(slot, directory)


def triton_files(store: ArtifactStore | None, artifact: CompiledArtifact) -> dict[str, str]:
    """The artifact laid out as Triton's cache does (``{"<name>.json": path, ...}``)."""
    return write_triton_group(artifact, triton_dir(store, artifact))


def load_kernel(store: ArtifactStore | None, request: CompileRequest, artifact: CompiledArtifact) -> Any:
    """Triton's launchable ``CompiledKernel`` for ``artifact`` (compiled from ``request``)."""
    return to_triton_kernel(artifact, request, triton_dir(store, artifact))


def _temporary_root() -> Path:
    global _temp_root
    with _lock:
        if _temp_root is None:
            _temp_root = Path(tempfile.mkdtemp(prefix="kiln-kernels-"))
            atexit.register(shutil.rmtree, _temp_root, True)
        return _temp_root

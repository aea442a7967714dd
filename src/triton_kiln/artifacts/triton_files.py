"""Triton's on-disk layout of a compiled kernel, and Triton's ``CompiledKernel`` built from it.

Triton loads a kernel from files: ``<name>.json`` (its metadata) and ``<name>.<ext>`` (the
binary), listed in a "metadata group" ``{"<name>.json": path, "<name>.cubin": path}``. This
module writes an artifact in that layout and hands it to Triton, so the parent (or the GPU
sandbox, which gets the paths) launches without calling ``triton.compile``.

Where the files go (:func:`triton_dir`)::

    disk cache on:   <cache>/artifacts-v2/ab/<key>/triton/<name>.json, <name>.cubin
                     (the entry is stored and checked once per process, then remembered)
    disk cache off:  <one temp dir per process>/<key[:32]>/...  (removed at exit)

The directory is trusted only after a check, on every call: it must be a real directory (not a
symlink) whose two files are regular, unlinked elsewhere and byte-equal to the artifact's binary
and metadata (read through :mod:`triton_kiln.artifacts.confined`). Anything else is rebuilt, never
written into: the files are created ``O_EXCL | O_NOFOLLOW`` in a fresh hidden directory beside
it, which is then renamed into place (a planted symlink is unlinked first, not followed).

The store-level API the pool and the autotuner use: :func:`triton_dir`, :func:`triton_files`
(the metadata group) and :func:`load_kernel` (Triton's ``CompiledKernel``). Each remembers the
directory per artifact key, so a repeated call neither re-validates the stored entry nor makes
a new temporary directory.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_kiln import triton_compat
from triton_kiln.artifacts import confined
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.errors import ArtifactError

if TYPE_CHECKING:
    from triton_kiln.artifacts.store import ArtifactStore
    from triton_kiln.compile.request import CompileRequest

_lock = threading.Lock()
_dirs: dict[tuple[Path | None, str], Path] = {}  # (store root or None, artifact key) -> directory
_temp_root: Path | None = None


def write_triton_group(artifact: CompiledArtifact, directory: Path) -> dict[str, str]:
    """``directory`` holding the artifact as Triton's cache does (``<name>.json`` + ``<name>.<ext>``),
    checked or rebuilt (see the module docstring); returns the metadata group."""
    metadata = json.dumps(artifact.metadata).encode()  # as Triton's cache writes it (and kiln's store)
    files = {artifact.metadata_file_name: metadata, artifact.binary_file_name: artifact.binary}
    directory.parent.mkdir(parents=True, exist_ok=True)
    parent_fd = confined.open_dir(directory.parent)
    try:
        for _ in range(_REBUILD_TRIES):
            if _holds(parent_fd, directory.name, files):
                break
            _rebuild(parent_fd, directory, files)
        else:
            raise ArtifactError(
                f"kiln could not lay out kernel {artifact.name} in {directory}: it kept changing while "
                f"kiln wrote it. Is another program writing there?"
            )
    finally:
        os.close(parent_fd)
    return {name: str(directory / name) for name in files}


_REBUILD_TRIES = 5
_STALE_TMP_S = 3600.0


def _holds(parent_fd: int, name: str, files: dict[str, bytes]) -> bool:
    """Whether ``name`` in ``parent_fd`` is a real directory holding exactly ``files``' bytes."""
    if confined.file_kind(parent_fd, name) != "dir":
        return False
    try:
        fd = confined.open_dir(name, parent_fd)
    except (OSError, ArtifactError):
        return False
    try:
        return all(confined.read_file(fd, n, size=len(data)) == data for n, data in files.items())
    except (OSError, ArtifactError):
        return False
    finally:
        os.close(fd)


def _rebuild(parent_fd: int, directory: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into a fresh hidden directory and rename it to ``directory``."""
    _clean_stale(parent_fd, directory.parent)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    tmp = f".{directory.name}-tmp-{stamp}"
    os.mkdir(tmp, 0o700, dir_fd=parent_fd)
    try:
        fd = confined.open_dir(tmp, parent_fd)
        try:
            for name, data in files.items():
                confined.write_new_file(fd, name, data)
        finally:
            os.close(fd)
        kind = confined.file_kind(parent_fd, directory.name)
        if kind is not None:  # damaged, incomplete or planted: move it aside, never write into it
            aside = f".{directory.name}-bad-{stamp}"
            try:
                os.rename(directory.name, aside, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            except FileNotFoundError:
                pass  # another process moved it first
            else:
                _remove(parent_fd, directory.parent, aside)
        with contextlib.suppress(OSError):  # another process put its copy there first: the caller checks it
            os.rename(tmp, directory.name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    finally:
        if confined.file_kind(parent_fd, tmp) is not None:
            _remove(parent_fd, directory.parent, tmp)


def _remove(parent_fd: int, parent: Path, name: str) -> None:
    """Delete ``name`` in ``parent``: a directory tree (symlinks inside are unlinked, not followed),
    or a symlink or file itself."""
    if confined.file_kind(parent_fd, name) == "dir":
        shutil.rmtree(parent / name, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent_fd)


def _clean_stale(parent_fd: int, parent: Path) -> None:
    """Remove hidden directories of rebuilds killed over an hour ago."""
    now = time.time()
    try:
        names = [e.name for e in os.scandir(parent_fd) if e.name.startswith(".") and "-tmp-" in e.name]
    except OSError:
        return
    for name in names:
        try:
            age = now - os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mtime
        except OSError:
            continue
        if age > _STALE_TMP_S:
            _remove(parent_fd, parent, name)


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

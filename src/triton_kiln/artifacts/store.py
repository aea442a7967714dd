"""Compiled artifacts on disk: a directory per key holding the binary and JSON metadata.

Layout (``root`` is ``Settings.cache_dir``)::

    root/artifacts-v2/ab/abcdef.../          one directory per compile key
        artifact.json                        kiln's record and the entry's manifest
        <name>.json                          Triton's metadata, verbatim (launch fields)
        <name>.cubin                         the binary
        <name>.ptx, <name>.ttgir, ...        text IRs, for inspection
        triton/<name>.json, <name>.cubin     the copy handed to Triton (triton_files.py), made lazily

``artifact.json`` lists every file the entry serves with its sha256 and size (``"files"``), the
metadata and the text IRs included. A read opens the entry and each file through directory
descriptors (:mod:`kiln.artifacts.confined`): names are single components (no absolute paths,
no ``..``), files are opened ``O_NOFOLLOW | O_NONBLOCK`` and must be regular, singly linked and
of the recorded size, and every file is hashed before it is used. ``triton/``, if present, must
be a real directory whose files equal the verified bytes. An entry failing any check (bad JSON,
wrong checksum, a symlink, a FIFO, a path out of the entry, a missing file, an older format) is
skipped with a :class:`CacheWarning` and treated as a miss: the caller recompiles, and the next
write replaces the entry. Entries of format 1 (``artifacts-v1``, no per-file hashes) are never
read.

What the manifest guards against: damage and tampering with the files it lists. It is not a
signature: whoever can rewrite ``artifact.json`` consistently can serve what they like, which is
why the cache directory itself must be private (:func:`check_cache_dir`).

Writes are atomic: an entry is assembled in a temporary directory beside its final place,
fsynced, and renamed into place in one step, so a reader never sees half an entry and a
killed writer leaves only a temporary directory (cleaned on the next write). Nothing is
unpickled.

Size cap (``max_bytes``, from ``KILN_CACHE_MAX_MB``; :mod:`kiln.artifacts.usage`): every read
touches its entry's directory (its mtime is the entry's last use), and a write that takes the
store past the cap evicts the least recently used entries down to 90% of it. The store's size
is measured by one scan at the first write of the process and at most every five minutes after,
and counted up by each write in between. An entry that vanishes while it is read (evicted or
cleared by another process) is a plain miss, without a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from triton_kiln.artifacts import confined, usage
from triton_kiln.artifacts.artifact import ARTIFACT_FORMAT, CompiledArtifact
from triton_kiln.errors import ArtifactError, CacheDirError

log = logging.getLogger("kiln.cache")


class CacheWarning(UserWarning):
    """A cache entry was unreadable and has been ignored."""


_RECORD = "artifact.json"
_TRITON_DIR = "triton"
_MAX_RECORD_BYTES = 1 << 20
_STALE_TMP_S = usage.STALE_TMP_S
_READ_ERRORS = (OSError, ValueError, KeyError, TypeError, ArtifactError)
_RESCAN_S = 300.0


class ArtifactStore:
    """A directory of compiled artifacts keyed by compile key."""

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        check_cache_dir(Path(root))
        self.root = Path(root) / f"artifacts-v{ARTIFACT_FORMAT}"
        self.max_bytes = max_bytes
        """The size cap (``None``: none); see the module docstring."""
        self._size_lock = threading.Lock()
        self._size: int | None = None  # bytes the store holds, as last measured plus writes since
        self._measured_at = 0.0

    def path_for(self, key: str) -> Path:
        if len(key) < 8 or not all(c in "0123456789abcdef" for c in key):
            raise ArtifactError(f"{key!r} is not a kiln compile key (a sha256 hex digest).")
        return self.root / key[:2] / key

    def __contains__(self, key: str) -> bool:
        return os.path.lexists(self.path_for(key) / _RECORD)

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: str, *, quiet: bool = False) -> CompiledArtifact | None:
        """The stored artifact for ``key``, or ``None`` (missing or corrupt, with a warning unless
        ``quiet``: a second look at an entry the caller was already warned about)."""
        entry = self.path_for(key)
        if not os.path.lexists(entry / _RECORD):
            return None
        try:
            return self._read(entry, key)
        except _READ_ERRORS as exc:
            if isinstance(exc, FileNotFoundError) and not os.path.lexists(entry):
                return None  # evicted or cleared meanwhile (by another process): a plain miss
            if quiet:
                return None
            warnings.warn(
                f"kiln cache entry {entry} is unreadable ({type(exc).__name__}: {exc}); it is ignored "
                f"and will be recompiled. Delete the directory if this repeats.",
                CacheWarning,
                stacklevel=2,
            )
            return None

    def _read(self, entry: Path, key: str) -> CompiledArtifact:
        root_fd = confined.open_dir(self.root)
        try:
            shard_fd = confined.open_dir(key[:2], root_fd)
        finally:
            os.close(root_fd)
        try:
            entry_fd = confined.open_dir(key, shard_fd)
        finally:
            os.close(shard_fd)
        try:
            artifact = _read_entry(entry_fd, key)
            with contextlib.suppress(OSError):
                os.utime(entry_fd)  # its last use, for the size cap's LRU order
            return artifact
        finally:
            os.close(entry_fd)

    # -- writing ----------------------------------------------------------------------------

    def put(self, artifact: CompiledArtifact) -> Path:
        """Store ``artifact`` (atomically); returns its directory. Existing entries are kept."""
        final = self.path_for(artifact.key)
        if os.path.lexists(final):
            if self._valid(final, artifact.key):
                return final
            self._discard(final)  # a corrupt entry (get() warned about it): replace it
        final.parent.mkdir(parents=True, exist_ok=True)
        self._clean_stale(final.parent)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{artifact.key[:16]}-"))
        try:
            self._write_entry(tmp, artifact)
            try:
                os.rename(tmp, final)
            except OSError:
                if self._valid(final, artifact.key):
                    shutil.rmtree(tmp, ignore_errors=True)  # another writer won the race: keep theirs
                    return final
                self._discard(final)  # a broken entry: replace it
                os.rename(tmp, final)
            _fsync_dir(final.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._grew(final)
        return final

    def _grew(self, written: Path) -> None:
        """Apply the size cap after ``written`` was added (see the module docstring)."""
        if self.max_bytes is None:
            return
        with self._size_lock:
            now = time.monotonic()
            if self._size is None or now - self._measured_at > _RESCAN_S:
                self._size, self._measured_at = usage.scan(self.root).size, now
            else:
                self._size += usage.tree_size(written)
            if self._size <= self.max_bytes:
                return
            result = usage.evict(
                self.root, int(self.max_bytes * usage.LOW_WATER), grace_s=usage.GRACE_S, keep=[written]
            )
            self._size, self._measured_at = result.left, time.monotonic()
        if result.left > self.max_bytes:
            log.info(
                "kiln: the artifact cache %s holds %d MiB, over its cap of %d MiB (KILN_CACHE_MAX_MB): "
                "what is left was used in the last %d s",
                self.root,
                result.left >> 20,
                self.max_bytes >> 20,
                usage.GRACE_S,
            )

    @staticmethod
    def _write_entry(directory: Path, artifact: CompiledArtifact) -> None:
        """Write the entry's files (binary first) and then its record into a fresh ``directory``."""
        files: dict[str, bytes] = {
            artifact.binary_file_name: artifact.binary,
            artifact.metadata_file_name: artifact.metadata_json(),
        }
        asm_files = {ext: artifact.asm_file_name(ext) for ext in artifact.asm}
        for ext, name in asm_files.items():
            files[name] = artifact.asm[ext].encode()
        if _RECORD in files or len(files) != 2 + len(asm_files):
            raise ArtifactError(f"artifact {artifact.key[:12]} ({artifact.name}) has clashing file names")
        record = {
            "format": ARTIFACT_FORMAT,
            "key": artifact.key,
            "name": artifact.name,
            "binary_ext": artifact.binary_ext,
            "binary_file": artifact.binary_file_name,
            "binary_sha256": artifact.binary_sha256,
            "metadata_file": artifact.metadata_file_name,
            "asm": asm_files,
            "files": {
                name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                for name, data in files.items()
            },
            "compile_s": artifact.compile_s,
            "stored_at": time.time(),
        }
        files[_RECORD] = json.dumps(record, indent=1).encode()
        fd = confined.open_dir(directory)
        try:
            for name, data in files.items():
                confined.write_new_file(fd, name, data)
        finally:
            os.close(fd)

    def _valid(self, entry: Path, key: str) -> bool:
        try:
            self._read(entry, key)
        except _READ_ERRORS:
            return False
        return True

    @staticmethod
    def _discard(entry: Path) -> None:
        """Remove an entry atomically from readers' view (rename aside first, then delete)."""
        usage.remove(entry)

    @staticmethod
    def _clean_stale(directory: Path) -> None:
        now = time.time()
        for child in directory.glob(".tmp-*"):
            try:
                if now - child.lstat().st_mtime > _STALE_TMP_S:
                    if child.is_symlink() or not child.is_dir():
                        child.unlink()
                    else:
                        shutil.rmtree(child, ignore_errors=True)
            except OSError:
                pass


def _read_entry(entry_fd: int, key: str) -> CompiledArtifact:
    """The artifact in the entry open as ``entry_fd``, every served file verified (see the docstring)."""
    record = json.loads(confined.read_file(entry_fd, _RECORD, max_size=_MAX_RECORD_BYTES))
    if not isinstance(record, dict):
        raise ArtifactError(f"{_RECORD} holds {type(record).__name__}, not a record")
    if record.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"format {record.get('format')!r}, expected {ARTIFACT_FORMAT}")
    if record["key"] != key:
        raise ArtifactError(f"entry holds key {str(record['key'])[:12]}..., not {key[:12]}...")
    manifest = _manifest(record)
    binary = _served(entry_fd, manifest, record["binary_file"])
    metadata_bytes = _served(entry_fd, manifest, record["metadata_file"])
    asm_names = record.get("asm", {})
    if not isinstance(asm_names, dict):
        raise ArtifactError("the record's 'asm' is not a mapping")
    metadata = json.loads(metadata_bytes)
    if not isinstance(metadata, dict):
        raise ArtifactError(f"{record['metadata_file']} holds {type(metadata).__name__}, not metadata")
    artifact = CompiledArtifact(
        key=key,
        name=record["name"],
        binary=binary,
        binary_ext=record["binary_ext"],
        metadata=metadata,
        asm={str(ext): _served(entry_fd, manifest, name).decode() for ext, name in asm_names.items()},
        compile_s=float(record["compile_s"]),
    )
    if artifact.binary_sha256 != record["binary_sha256"]:
        raise ArtifactError("binary checksum mismatch")
    _check_triton_copy(entry_fd, {record["binary_file"]: binary, record["metadata_file"]: metadata_bytes})
    return artifact


def _manifest(record: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """``{file name: (sha256, size)}`` from the record, every name checked to stay in the entry."""
    files = record.get("files")
    if not isinstance(files, dict):
        raise ArtifactError(f"{_RECORD} lists no per-file checksums (an older or damaged entry)")
    manifest: dict[str, tuple[str, int]] = {}
    for name, item in files.items():
        confined.check_name(name)
        if not isinstance(item, dict):
            raise ArtifactError(f"the manifest's record of {name!r} is not a mapping")
        digest, size = item["sha256"], item["size"]
        if not isinstance(digest, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ArtifactError(f"the manifest's record of {name!r} has a malformed sha256 or size")
        manifest[name] = (digest, size)
    return manifest


def _served(entry_fd: int, manifest: dict[str, tuple[str, int]], name: object) -> bytes:
    """The verified bytes of ``name``: listed in the manifest, a regular file, matching its sha256."""
    name = confined.check_name(name)
    if name == _RECORD or name not in manifest:
        raise ArtifactError(f"{name} is not listed in the entry's manifest")
    digest, size = manifest[name]
    try:
        data = confined.read_file(entry_fd, name, max_size=size)  # never more than kiln wrote
    except confined.FileTooLargeError as exc:
        found = exc.size
    else:
        found = len(data)
        if found == size and hashlib.sha256(data).hexdigest() == digest:
            return data
    raise ArtifactError(
        f"{name}: checksum mismatch ({found} bytes, kiln wrote {size}; the file changed after kiln wrote it)"
    )


def _check_triton_copy(entry_fd: int, expected: dict[str, bytes]) -> None:
    """``triton/`` (if made) is a real directory whose files (if present) equal the verified bytes."""
    kind = confined.file_kind(entry_fd, _TRITON_DIR)
    if kind is None:
        return
    if kind != "dir":
        raise ArtifactError(f"{_TRITON_DIR}/ is a {kind}, not the directory kiln made")
    triton_fd = confined.open_dir(_TRITON_DIR, entry_fd)
    try:
        for name, data in expected.items():
            if confined.file_kind(triton_fd, name) is None:
                continue  # laid out lazily (triton_files.py) or removed: rebuilt when asked for
            if confined.read_file(triton_fd, name, size=len(data)) != data:
                raise ArtifactError(f"{_TRITON_DIR}/{name} differs from the verified entry")
    finally:
        os.close(triton_fd)


def check_cache_dir(root: Path) -> None:
    """Create ``root`` private (0700) if missing; refuse one another user owns or others can write.

    Code runs from what the cache holds (binaries handed to the GPU), so a directory someone
    else can write to is someone else's code.
    """
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(root)
    except OSError as exc:
        raise CacheDirError(
            f"kiln cannot create its cache directory {root} ({exc.strerror}); set KILN_CACHE_DIR "
            f"to a directory you own"
        ) from exc
    if st.st_uid != os.geteuid():
        raise CacheDirError(
            f"kiln's cache directory {root} belongs to user id {st.st_uid}, not to you "
            f"({os.geteuid()}); kiln runs what the cache holds, so it will not use it. Set "
            f"KILN_CACHE_DIR to a directory you own (or use_disk_cache=False)."
        )
    if st.st_mode & 0o022:
        raise CacheDirError(
            f"kiln's cache directory {root} is writable by others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"kiln runs what the cache holds, so it will not use it. Run `chmod go-w {root}` or set "
            f"KILN_CACHE_DIR to a private directory."
        )


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

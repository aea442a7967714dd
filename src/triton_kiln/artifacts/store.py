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
descriptors (:mod:`triton_kiln.artifacts.confined`): names are single components (no absolute paths,
no ``..``), files are opened ``O_NOFOLLOW | O_NONBLOCK`` and must be regular, singly linked and
of the recorded size, and every file is hashed before it is used. ``triton/``, if present, must
be a real directory whose files equal the verified bytes. An entry failing any check (bad JSON,
wrong checksum, a symlink, a FIFO, a path out of the entry, a missing file, an older format) is
skipped with a :class:`CacheWarning` and treated as a miss: the caller recompiles, and the next
write replaces the entry. Entries of format 1 (``artifacts-v1``, no per-file hashes) are never
read.

A remote cache (``remote``, :class:`RemoteEntries`; :mod:`triton_kiln.remote` when ``KILN_REMOTE_CACHE``
is set) sits behind the store: a local miss asks it, and what it returns is staged in a temporary
directory and read by the same reader (:func:`triton_kiln.artifacts.store_entry.read_entry`) before it is
renamed into place (:meth:`ArtifactStore.adopt`); one that fails is a miss with a :class:`CacheWarning`.
Each entry :meth:`ArtifactStore.put` writes is read back verified and then published to it.

What the manifest guards against: damage and tampering with the files it lists. It is not a
signature: whoever can rewrite ``artifact.json`` consistently can serve what they like, which is
why the cache directory itself must be private (:func:`check_cache_dir`).

Writes are atomic: an entry is assembled in a temporary directory beside its final place,
fsynced, and renamed into place in one step, so a reader never sees half an entry and a
killed writer leaves only a temporary directory (cleaned on the next write). Nothing is
unpickled.

Size cap (``max_bytes``, from ``KILN_CACHE_MAX_MB``; :mod:`triton_kiln.artifacts.usage`): every read
touches its entry's directory (its mtime is the entry's last use), and a write that takes the
store past the cap evicts the least recently used entries down to 90% of it. The store's size
is measured by one scan at the first write of the process and at most every five minutes after,
and counted up by each write in between. An entry that vanishes while it is read (evicted or
cleared by another process) is a plain miss, without a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from triton_kiln.artifacts import confined, store_entry, usage
from triton_kiln.artifacts.artifact import ARTIFACT_FORMAT, STORE_DIR, CompiledArtifact
from triton_kiln.artifacts.record import RECORD, parse_record
from triton_kiln.errors import ArtifactError, CacheDirError

log = logging.getLogger("kiln.cache")


class CacheWarning(UserWarning):
    """A cache entry was unreadable and has been ignored."""


class CacheWriteWarning(CacheWarning):
    """The cache directory cannot be written: compiles go on, their binaries are not kept."""


class RemoteEntries(Protocol):
    """A cache of entries shared by machines (:class:`triton_kiln.remote.RemoteArtifacts`), each entry as
    ``{file name: bytes}``: the files of its directory here. Neither method raises when the remote
    is unreachable or slow (it says so once and answers a miss)."""

    where: str
    """The remote, for messages (a URL without its password)."""

    def fetch(self, key: str) -> Mapping[str, bytes] | None: ...

    def publish(self, key: str, files: Mapping[str, bytes]) -> None: ...


_RECORD = RECORD
_STALE_TMP_S = usage.STALE_TMP_S
_READ_ERRORS = store_entry.READ_ERRORS
_RESCAN_S = 300.0


class ArtifactStore:
    """A directory of compiled artifacts keyed by compile key."""

    def __init__(self, root: Path, max_bytes: int | None = None, remote: RemoteEntries | None = None) -> None:
        check_cache_dir(Path(root))
        self.root = Path(root) / STORE_DIR
        self.max_bytes = max_bytes
        """The size cap (``None``: none); see the module docstring."""
        self._size_lock = threading.Lock()
        self._size: int | None = None  # bytes the store holds, as last measured plus writes since
        self._measured_at = 0.0
        self.remote = remote
        """Read through on a miss, written after each put (``None``: none); see :meth:`adopt`."""
        self._write_warned = threading.Event()  # put_or_warn warned once already

    def path_for(self, key: str) -> Path:
        if len(key) < 8 or not all(c in "0123456789abcdef" for c in key):
            raise ArtifactError(f"{key!r} is not a kiln compile key (a sha256 hex digest).")
        return self.root / key[:2] / key

    def __contains__(self, key: str) -> bool:
        return os.path.lexists(self.path_for(key) / _RECORD)

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: str, *, quiet: bool = False) -> CompiledArtifact | None:
        """The stored artifact for ``key`` (else the remote's, verified and stored here), or ``None``
        (missing, or corrupt with a warning unless ``quiet``: a second look at an entry the caller
        was already warned about)."""
        entry = self.path_for(key)
        if not os.path.lexists(entry / _RECORD):
            return self._fetch(key)
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
            return self._fetch(key)

    def _fetch(self, key: str) -> CompiledArtifact | None:
        """``key``'s entry from the remote cache, verified and made a local entry; ``None`` if none."""
        files = self.remote.fetch(key) if self.remote is not None else None
        if files is None:
            return None
        try:
            return self.adopt(key, files)
        except _READ_ERRORS as exc:
            where = self.remote.where if self.remote is not None else "?"
            warnings.warn(
                f"kiln remote cache entry {key[:16]}... from {where} failed verification "
                f"({type(exc).__name__}: {exc}); it was not loaded and will be compiled here",
                CacheWarning,
                stacklevel=3,
            )
            return None

    def adopt(self, key: str, files: Mapping[str, bytes]) -> CompiledArtifact:
        """Make ``files`` (an entry's directory, fetched from a remote cache) the entry of ``key``.

        The files are written into a temporary directory beside the entry's place and read
        back by :func:`~triton_kiln.artifacts.store_entry.read_entry`, the reader of every local entry; only
        an entry that passes is renamed into place. A file its manifest does not list, a bad
        name, a checksum or size mismatch raise (:data:`~triton_kiln.artifacts.store_entry.READ_ERRORS`)
        and leave nothing behind.
        """
        final = self.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{key[:16]}-"))
        try:
            if len(files.get(_RECORD, b"")) > store_entry.MAX_RECORD_BYTES:
                raise ArtifactError(f"{_RECORD} is over {store_entry.MAX_RECORD_BYTES} bytes")
            record = parse_record(files.get(_RECORD, b""), ARTIFACT_FORMAT)
            unlisted = set(files) - set(store_entry.manifest(record)) - {_RECORD}
            if unlisted:
                raise ArtifactError(f"the entry holds files its manifest does not list: {sorted(unlisted)}")
            fd = confined.open_dir(tmp)
            try:
                for name, data in files.items():
                    confined.write_new_file(fd, name, data)
                artifact = store_entry.read_entry(fd, key)
            finally:
                os.close(fd)
            self._install(tmp, final, key)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._grew(final)
        return artifact

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
            artifact = store_entry.read_entry(entry_fd, key)
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
            files = self._write_entry(tmp, artifact)
            if not self._install(tmp, final, artifact.key):
                return final  # another writer won the race: theirs is kept (and was published)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._grew(final)
        if self.remote is not None and self._valid(final, artifact.key):
            self.remote.publish(artifact.key, files)  # what was written, once it reads back verified
        return final

    def put_or_warn(self, artifact: CompiledArtifact) -> Path | None:
        """:meth:`put`, for a pool whose caller has the artifact already: a failed write is
        ``None`` and, the first time for this store, a :class:`CacheWriteWarning` naming the
        directory and the system's reason (later ones are logged on ``kiln.cache`` at INFO)."""
        try:
            return self.put(artifact)
        except OSError as exc:
            message = (
                f"kiln could not write compiled kernels to its cache {self.root.parent} "
                f"({type(exc).__name__}: {exc.strerror or exc}); this process's callers get them, "
                f"but they are not kept, so the next process compiles them again. Make the directory "
                f"writable, or set KILN_CACHE_DIR (--cache-dir) to one you can write (KILN_DISK_CACHE=0: "
                f"memory only)."
            )
        if self._write_warned.is_set():
            log.info("%s", message)
            return None
        self._write_warned.set()
        try:
            warnings.warn(message, CacheWriteWarning, stacklevel=2)
        except Warning:  # warnings made errors (-W error): not raised in the pool's thread
            log.warning("%s", message)
        return None

    def _install(self, tmp: Path, final: Path, key: str) -> bool:
        """Rename entry ``tmp`` into place; ``False`` (``tmp`` removed) if a valid one is there."""
        try:
            os.rename(tmp, final)
        except OSError:
            if self._valid(final, key):
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            self._discard(final)  # a broken entry: replace it
            os.rename(tmp, final)
        _fsync_dir(final.parent)
        return True

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
    def _write_entry(directory: Path, artifact: CompiledArtifact) -> dict[str, bytes]:
        """Write the entry's files (binary first) and then its record into a fresh ``directory``;
        returns them (``{file name: bytes}``)."""
        files = store_entry.entry_files(artifact)
        fd = confined.open_dir(directory)
        try:
            for name, data in files.items():
                confined.write_new_file(fd, name, data)
        finally:
            os.close(fd)
        return files

    def upload(self, key: str) -> bool:
        """Publish the local entry of ``key`` to the remote (one compiled before the remote was
        configured, or while it was away); ``False`` without a remote or a valid local entry."""
        entry = self.path_for(key)
        if self.remote is None or not os.path.lexists(entry / _RECORD):
            return False
        try:
            artifact = self._read(entry, key)
        except _READ_ERRORS:
            return False
        self.remote.publish(key, store_entry.entry_files(artifact))
        return True

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

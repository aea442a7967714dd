"""Compiled artifacts on disk: a directory per key holding the binary and JSON metadata.

Layout (``root`` is ``Settings.cache_dir``)::

    root/artifacts-v1/ab/abcdef.../          one directory per compile key
        artifact.json                        kiln's record: format, key, name, sha256, files
        <name>.json                          Triton's metadata, verbatim (launch fields)
        <name>.cubin                         the binary
        <name>.ptx, <name>.ttgir, ...        text IRs, for inspection

Writes are atomic: an entry is assembled in a temporary directory beside its final place,
fsynced, and renamed into place in one step, so a reader never sees half an entry and a
killed writer leaves only a temporary directory (cleaned on the next write). Nothing is
unpickled: a corrupt or tampered entry (bad JSON, wrong checksum, missing file) is skipped
with a :class:`CacheWarning` and treated as a miss.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path

from kiln.artifacts.artifact import ARTIFACT_FORMAT, CompiledArtifact
from kiln.errors import ArtifactError, CacheDirError


class CacheWarning(UserWarning):
    """A cache entry was unreadable and has been ignored."""


_RECORD = "artifact.json"
_STALE_TMP_S = 3600.0


class ArtifactStore:
    """A directory of compiled artifacts keyed by compile key."""

    def __init__(self, root: Path) -> None:
        check_cache_dir(Path(root))
        self.root = Path(root) / f"artifacts-v{ARTIFACT_FORMAT}"

    def path_for(self, key: str) -> Path:
        if len(key) < 8 or not all(c in "0123456789abcdef" for c in key):
            raise ArtifactError(f"{key!r} is not a kiln compile key (a sha256 hex digest).")
        return self.root / key[:2] / key

    def __contains__(self, key: str) -> bool:
        return (self.path_for(key) / _RECORD).is_file()

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: str) -> CompiledArtifact | None:
        """The stored artifact for ``key``, or ``None`` (missing or corrupt, with a warning)."""
        entry = self.path_for(key)
        record_path = entry / _RECORD
        if not record_path.is_file():
            return None
        try:
            return self._read(entry, key)
        except (OSError, ValueError, KeyError, TypeError, ArtifactError) as exc:
            warnings.warn(
                f"kiln cache entry {entry} is unreadable ({type(exc).__name__}: {exc}); it is ignored "
                f"and will be recompiled. Delete the directory if this repeats.",
                CacheWarning,
                stacklevel=2,
            )
            return None

    def _read(self, entry: Path, key: str) -> CompiledArtifact:
        record = json.loads((entry / _RECORD).read_text())
        if record.get("format") != ARTIFACT_FORMAT:
            raise ArtifactError(f"format {record.get('format')!r}, expected {ARTIFACT_FORMAT}")
        if record["key"] != key:
            raise ArtifactError(f"entry holds key {record['key'][:12]}..., not {key[:12]}...")
        binary = (entry / record["binary_file"]).read_bytes()
        artifact = CompiledArtifact(
            key=key,
            name=record["name"],
            binary=binary,
            binary_ext=record["binary_ext"],
            metadata=json.loads((entry / record["metadata_file"]).read_text()),
            asm={ext: (entry / name).read_text() for ext, name in record.get("asm", {}).items()},
            compile_s=float(record["compile_s"]),
        )
        if artifact.binary_sha256 != record["binary_sha256"]:
            raise ArtifactError("binary checksum mismatch")
        return artifact

    # -- writing ----------------------------------------------------------------------------

    def put(self, artifact: CompiledArtifact) -> Path:
        """Store ``artifact`` (atomically); returns its directory. Existing entries are kept."""
        final = self.path_for(artifact.key)
        if (final / _RECORD).is_file():
            if self._valid(final, artifact.key):
                return final
            self._discard(final)  # a corrupt entry (get() warned about it): replace it
        final.parent.mkdir(parents=True, exist_ok=True)
        self._clean_stale(final.parent)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{artifact.key[:16]}-"))
        try:
            base = artifact.name[:150]
            files: dict[str, bytes] = {
                f"{base}.{artifact.binary_ext}": artifact.binary,
                f"{base}.json": json.dumps(artifact.metadata).encode(),
            }
            asm_files = {ext: f"{base}.{ext}" for ext in artifact.asm}
            for ext, name in asm_files.items():
                files[name] = artifact.asm[ext].encode()
            record = {
                "format": ARTIFACT_FORMAT,
                "key": artifact.key,
                "name": artifact.name,
                "binary_ext": artifact.binary_ext,
                "binary_file": f"{base}.{artifact.binary_ext}",
                "binary_sha256": artifact.binary_sha256,
                "metadata_file": f"{base}.json",
                "asm": asm_files,
                "compile_s": artifact.compile_s,
                "stored_at": time.time(),
            }
            files[_RECORD] = json.dumps(record, indent=1).encode()
            for name, data in files.items():
                with open(tmp / name, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            try:
                os.rename(tmp, final)
            except OSError:
                if (final / _RECORD).is_file() and self._valid(final, artifact.key):
                    shutil.rmtree(tmp, ignore_errors=True)  # another writer won the race: keep theirs
                    return final
                self._discard(final)  # a broken entry: replace it
                os.rename(tmp, final)
            _fsync_dir(final.parent)
            return final
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _valid(self, entry: Path, key: str) -> bool:
        try:
            self._read(entry, key)
        except (OSError, ValueError, KeyError, TypeError, ArtifactError):
            return False
        return True

    @staticmethod
    def _discard(entry: Path) -> None:
        """Remove an entry atomically from readers' view (rename aside first, then delete)."""
        aside = entry.with_name(f".tmp-discard-{entry.name[:16]}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(entry, aside)
        except OSError:
            aside = entry
        shutil.rmtree(aside, ignore_errors=True)

    @staticmethod
    def _clean_stale(directory: Path) -> None:
        now = time.time()
        for child in directory.glob(".tmp-*"):
            try:
                if now - child.stat().st_mtime > _STALE_TMP_S:
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

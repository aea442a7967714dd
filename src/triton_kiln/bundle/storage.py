"""A bundle's files, read safely: a directory or one .tar / .tar.gz archive, lazily, size-capped.

Bundles are untrusted input, so this is the only module that opens their files::

    open_storage(path) -> DirectoryStorage | ArchiveStorage
      .manifest()            manifest.json's bytes (size checked before a byte is read)
      .sha256(name)          a binary's sha256, streamed in 1 MiB chunks (load time)
      .read(name)            a binary's bytes (launch time; the caller re-checks its sha256)

Only ``manifest.json`` and ``binaries/<name>`` are ever read, and only as regular files that
are part of the bundle: a symlink (member or directory), a hard link, a device, an absolute
path or one with ``..`` is refused before anything is opened through it, so nothing outside the
bundle is read, and nothing is ever written. Archives are streamed, never extracted or read
whole: each member's size is checked from its header against :data:`MAX_MANIFEST_BYTES` /
:data:`MAX_BINARY_BYTES` before its data is decompressed, and the whole archive may expand to
at most :data:`MAX_EXPANSION` times its size (beyond a first 64 MiB) and :data:`MAX_ARCHIVE_BYTES`
in all, so a gzip bomb costs neither memory nor much time.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import stat
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

from triton_kiln.bundle.errors import BundleError, BundleMemberError, BundleTooLargeError
from triton_kiln.bundle.schema import BINARY_PATH

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 32 << 20
"""manifest.json's largest size (32 MiB; kiln writes a few KiB per tuned variant)."""
MAX_BINARY_BYTES = 64 << 20
"""A binary's largest size (64 MiB; Triton's cubins are KiBs to a few MiB)."""
MAX_ARCHIVE_BYTES = 1 << 30
"""An archive's largest size once decompressed (1 GiB, headers included)."""
MAX_EXPANSION = 100
"""An archive may expand to at most this many times its size on disk (beyond the first 64 MiB):
kiln's archives expand 3-10x; a gzip bomb 1000x."""
MAX_MEMBERS = 10_000
"""The most members an archive may hold."""
_CHUNK = 1 << 20
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def is_archive(path: Path) -> bool:
    return path.name.endswith(_ARCHIVE_SUFFIXES)


def _limit(name: str) -> int:
    return MAX_MANIFEST_BYTES if name == MANIFEST else MAX_BINARY_BYTES


def _too_large(where: Path, name: str, size: int | None = None) -> BundleTooLargeError:
    said = f" ({size:,} bytes)" if size is not None else ""
    return BundleTooLargeError(
        f"{where}: {name}{said} is larger than kiln accepts ({_limit(name):,} bytes); a bundle kiln "
        f"wrote never is: the file is damaged or not a kiln bundle"
    )


def _expected(name: str) -> bool:
    return name == MANIFEST or (BINARY_PATH.fullmatch(name) is not None and ".." not in name)


def _consume(read: Callable[[int], bytes], where: Path, name: str, *, keep: bool) -> tuple[bytes, str]:
    """Read a member in chunks up to its limit; returns (its bytes if ``keep``, its sha256)."""
    digest = hashlib.sha256()
    parts: list[bytes] = []
    total = 0
    while chunk := read(_CHUNK):
        total += len(chunk)
        if total > _limit(name):
            raise _too_large(where, name)
        digest.update(chunk)
        if keep:
            parts.append(chunk)
    return b"".join(parts), digest.hexdigest()


class DirectoryStorage:
    """A bundle that is a directory. Every open is relative to the bundle's directory fd, with
    ``O_NOFOLLOW`` at every step, so neither a symlink nor a renamed directory leads outside."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _open(self, name: str) -> int:
        *dirs, leaf = name.split("/")
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in dirs:
                sub = self._open_at(dir_fd, part, os.O_DIRECTORY, f"{part}/")
                os.close(dir_fd)
                dir_fd = sub
            fd = self._open_at(dir_fd, leaf, os.O_NONBLOCK, name)
        finally:
            os.close(dir_fd)
        info = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = "is not a regular file"
        elif info.st_nlink > 1:
            problem = (
                f"is a hard link ({info.st_nlink} names for one file); copy the bundle with cp -r, not cp -l"
            )
        elif info.st_size > _limit(name):
            os.close(fd)
            raise _too_large(self.path, name, info.st_size)
        if problem is not None:
            os.close(fd)
            raise BundleMemberError(
                f"{self.path}: {name} {problem}; kiln reads only regular files of a bundle"
            )
        return fd

    def _open_at(self, dir_fd: int, part: str, flags: int, shown: str) -> int:
        try:
            return os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=dir_fd)
        except FileNotFoundError:
            raise BundleMemberError(f"{self.path}: {shown} is missing from the bundle") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise BundleMemberError(
                    f"{self.path}: {shown} is a symlink or not a directory; kiln follows no links in a bundle"
                ) from None
            raise BundleMemberError(f"{self.path}: {shown} cannot be read ({exc.strerror})") from None

    def _consume(self, name: str, *, keep: bool) -> tuple[bytes, str]:
        fd = self._open(name)
        with os.fdopen(fd, "rb") as handle:
            return _consume(handle.read, self.path, name, keep=keep)

    def manifest(self) -> bytes:
        return self._consume(MANIFEST, keep=True)[0]

    def sha256(self, name: str) -> str:
        return self._consume(name, keep=False)[1]

    def read(self, name: str) -> bytes:
        return self._consume(name, keep=True)[0]


def expansion_limit(path: Path) -> int:
    """How many bytes the archive at ``path`` may expand to."""
    return min(MAX_ARCHIVE_BYTES, max(64 << 20, MAX_EXPANSION * path.stat().st_size))


class _Capped:
    """A read-only stream that refuses to yield more than ``limit`` bytes (decompressed)."""

    def __init__(self, inner: IO[bytes], limit: int, where: Path) -> None:
        self.inner = inner
        self.limit = limit
        self.left = limit
        self.where = where

    def read(self, size: int = -1) -> bytes:
        want = self.left + 1 if size < 0 else min(size, self.left + 1)
        data = self.inner.read(want)
        self.left -= len(data)
        if self.left < 0:
            raise BundleTooLargeError(
                f"{self.where}: the archive expands to more than {self.limit:,} bytes (at most "
                f"{MAX_EXPANSION}x its size, beyond the first 64 MiB, and {MAX_ARCHIVE_BYTES:,} bytes in "
                f"all); a bundle kiln wrote never does: the file is damaged or not a kiln bundle"
            )
        return data


class ArchiveStorage:
    """A bundle in one .tar / .tar.gz archive, streamed member by member, never extracted.

    Opening it makes one pass: every member is checked, the manifest is kept (it is small) and
    every binary is hashed and dropped. :meth:`read` streams the archive again up to the binary
    it wants, so a loaded bundle holds no binary it has not launched.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._manifest: bytes | None = None
        self._digests: dict[str, str] = {}
        self._scan(None)
        if self._manifest is None:
            raise BundleMemberError(f"{path}: the archive has no {MANIFEST}; it is not a kiln bundle")

    def _scan(self, want: str | None) -> bytes | None:
        try:
            with open(self.path, "rb") as raw:
                gzipped = raw.read(2) == b"\x1f\x8b"
                raw.seek(0)
                inner: IO[bytes] = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if gzipped else raw
                capped = cast(IO[bytes], _Capped(inner, expansion_limit(self.path), self.path))
                with tarfile.open(fileobj=capped, mode="r|") as tar:
                    seen: set[str] = set()
                    for member in tar:
                        name = self._check(member, seen)
                        if name is None:
                            continue
                        handle = tar.extractfile(member)
                        if handle is None:  # pragma: no cover - _check let only regular files through
                            raise BundleMemberError(f"{self.path}: {name} cannot be read")
                        if want is not None:
                            if name == want:
                                return _consume(handle.read, self.path, name, keep=True)[0]
                        elif name == MANIFEST:
                            self._manifest = _consume(handle.read, self.path, name, keep=True)[0]
                        else:
                            self._digests[name] = _consume(handle.read, self.path, name, keep=False)[1]
        except BundleError:
            raise
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise BundleError(f"{self.path} is not a readable bundle archive: {exc}") from None
        return None

    def _check(self, member: tarfile.TarInfo, seen: set[str]) -> str | None:
        """The member's name if it is a file to read; ``None`` for the binaries/ directory."""
        if len(seen) >= MAX_MEMBERS:
            raise BundleTooLargeError(f"{self.path}: the archive has more than {MAX_MEMBERS:,} members")
        name = member.name.removeprefix("./")
        shown = repr(name if len(name) <= 100 else name[:100] + "...")
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
            raise BundleMemberError(
                f"{self.path}: the member {shown} is not a plain path inside the bundle (absolute, "
                f"empty or with '..'); kiln refuses the archive"
            )
        if member.issym() or member.islnk():
            kind = "a symbolic link" if member.issym() else "a hard link"
            raise BundleMemberError(
                f"{self.path}: the member {shown} is {kind}; bundles hold regular files only"
            )
        if name in seen:
            raise BundleMemberError(f"{self.path}: the member {shown} appears twice in the archive")
        seen.add(name)
        if member.isdir() and name == "binaries":
            return None
        if not member.isfile() or member.issparse():
            raise BundleMemberError(f"{self.path}: the member {shown} is not a regular file")
        if not _expected(name):
            raise BundleMemberError(
                f"{self.path}: unexpected member {shown}; a kiln bundle holds {MANIFEST} and "
                f"binaries/<name> only"
            )
        if member.size > _limit(name):
            raise _too_large(self.path, name, member.size)
        return name

    def manifest(self) -> bytes:
        assert self._manifest is not None
        return self._manifest

    def sha256(self, name: str) -> str:
        if name not in self._digests:
            raise BundleMemberError(f"{self.path}: {name} is missing from the archive")
        return self._digests[name]

    def read(self, name: str) -> bytes:
        data = self._scan(name)
        if data is None:
            raise BundleMemberError(f"{self.path}: {name} is missing from the archive")
        return data


def open_storage(path: Path) -> DirectoryStorage | ArchiveStorage:
    """The bundle at ``path``: a directory, or an archive named .tar / .tar.gz / .tgz."""
    if path.is_dir():
        return DirectoryStorage(path)
    if not path.exists():
        raise BundleError(f"no bundle at {path}")
    if not path.is_file() or not is_archive(path):
        raise BundleError(f"{path} is a file but not a .tar, .tar.gz or .tgz bundle archive")
    return ArchiveStorage(path)

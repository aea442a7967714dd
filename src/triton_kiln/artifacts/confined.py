"""Reading and writing files confined to one directory: plain names, regular files, no links.

The artifact store and Triton's layout of an artifact read back only files kiln wrote. Every
access here goes through a directory file descriptor and a single path component, so nothing
outside that directory is named, opened or written:

* a name must be one plain component (no ``/``, not ``.``/``..``, not empty, no NUL), so an
  absolute path or ``../x`` from a tampered record is refused before any system call;
* files are opened with ``O_NOFOLLOW`` (a planted symlink fails to open, it is never followed)
  and ``O_NONBLOCK`` (a FIFO put in a file's place cannot block the reader), then checked with
  ``fstat``: a regular file with one link (a hard link to a file elsewhere is refused), of the
  size kiln recorded;
* new files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` in a directory kiln just made.

Refusals raise :class:`~triton_kiln.errors.ArtifactError` saying what was found; a missing file
raises ``FileNotFoundError`` as it is.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from triton_kiln.errors import ArtifactError

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FileTooLargeError(ArtifactError):
    """A file is larger than its reader accepts (it was not read)."""

    def __init__(self, name: str, size: int, max_size: int) -> None:
        super().__init__(f"{name} holds {size} bytes, more than the {max_size} kiln accepts")
        self.size = size


def check_name(name: object, what: str = "file name") -> str:
    """``name`` if it is one plain path component; :class:`ArtifactError` otherwise."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\0" in name
        or os.path.basename(name) != name
    ):
        raise ArtifactError(
            f"{what} {name!r} is not a plain file name inside the entry (absolute paths, '..' and "
            f"sub-directories are refused)"
        )
    return name


def open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    """A descriptor of directory ``name`` (relative to ``dir_fd`` if given), never through a symlink."""
    if dir_fd is not None:
        check_name(str(name), "directory name")
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ArtifactError(
                f"{name} is not a directory (a symlink or a file stands in its place)"
            ) from exc
        raise


def read_file(dir_fd: int, name: str, *, size: int | None = None, max_size: int | None = None) -> bytes:
    """The bytes of regular file ``name`` in ``dir_fd`` (see the module docstring for the checks)."""
    check_name(name)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ArtifactError(f"{name} is a symbolic link; kiln reads only regular files it wrote") from exc
        raise
    try:
        st = os.fstat(fd)
        _check_regular(name, st)
        if size is not None and st.st_size != size:
            raise ArtifactError(f"{name} holds {st.st_size} bytes, the record says {size}")
        if max_size is not None and st.st_size > max_size:
            raise FileTooLargeError(name, st.st_size, max_size)
        chunks: list[bytes] = []
        left = st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left or os.read(fd, 1):
            raise ArtifactError(f"{name} changed size while it was read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_kind(dir_fd: int, name: str) -> str | None:
    """``"file"``, ``"dir"``, ``"symlink"``, ``"other"``, or ``None`` if ``name`` does not exist."""
    check_name(name)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def write_new_file(dir_fd: int, name: str, data: bytes) -> None:
    """Create ``name`` in ``dir_fd`` (it must not exist; never through a symlink), write, fsync."""
    check_name(name)
    fd = os.open(name, _WRITE_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_regular(name: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise ArtifactError(f"{name} is {kind}; kiln reads only regular files it wrote")
    if st.st_nlink != 1:
        raise ArtifactError(
            f"{name} has {st.st_nlink} hard links; kiln writes each file once, so a linked file is not "
            f"its own"
        )

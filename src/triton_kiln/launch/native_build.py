"""kiln's launcher built here, on first use: the fallback when no prebuilt one is usable.

(:mod:`triton_kiln.launch.native` decides which one a process loads.)

Compiled with the system C compiler on first use, the way
   Triton builds its own launcher, into ``<KILN_CACHE_DIR>/native/_kiln_launch-<hash>.so``; the
   hash covers the C source, the Python version and the platform, so a changed source or
   interpreter rebuilds it.

A build here lives in a cache directory, not in the package, so it is loaded only from what
kiln built: ``native/`` is private (0700, this user's, not a symlink; refused otherwise with the
way out), the sha256 of each build is recorded next to it (``<name>.sha256``, written
atomically), and the file is opened, hashed and loaded through the same fd
(``/proc/self/fd/N``), so a planted or edited ``.so`` is rebuilt (with a
:class:`NativeHelperWarning`) and never loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from triton_kiln.errors import KilnError
from triton_kiln.files import atomic_write

_SOURCE = Path(__file__).with_name("_kiln_launch.c")
_MODULE_NAME = "_kiln_launch"


class NativeBuildError(KilnError):
    """kiln's C launcher could not be built or imported; launches go through Triton's launcher."""


class NativeHelperWarning(UserWarning):
    """A launcher file kiln did not build (or that changed since) was found and not loaded."""


def _compiler() -> str:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    raise NativeBuildError(
        "no C compiler found (tried $CC, cc, gcc, clang); install one (e.g. the distribution's gcc "
        "package) so kiln can build its launcher, or accept Triton's slower launcher."
    )


def _target_path(cache_dir: Path) -> Path:
    source = _SOURCE.read_bytes()
    digest = hashlib.sha256(
        source + sys.version.encode() + sysconfig.get_platform().encode() + (sys.abiflags or "").encode()
    ).hexdigest()[:16]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return cache_dir / "native" / f"{_MODULE_NAME}-{digest}{suffix}"


def helper_path(cache_dir: Path) -> Path:
    """Where the helper for this source and interpreter lives (``<cache>/native/...so``)."""
    return _target_path(cache_dir)


def _record_name(target: Path) -> str:
    return f"{target.name}.sha256"


def _open_private_dir(directory: Path) -> int:
    """Create ``directory`` (0700) if needed and open it, refusing one others could write into.

    The directory must be a real directory (not a symlink), owned by this user, and writable by
    nobody else; one of ours that others may only read is tightened to 0700. The returned fd is
    what every later file operation is relative to, so a directory swapped after the check
    cannot redirect them.
    """
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if directory.is_symlink():
            raise NativeBuildError(
                f"kiln's launcher directory {directory} is a symlink; kiln loads native code only from "
                f"a private directory it owns. Remove it (rm {directory}) and kiln will recreate it."
            ) from None
        raise NativeBuildError(f"cannot create kiln's launcher directory {directory}: {exc}") from None
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.geteuid():
        problem = f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    elif info.st_mode & 0o022:
        problem = f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is not None:
        os.close(fd)
        raise NativeBuildError(
            f"kiln's launcher directory {directory} {problem}, so a file planted there could run in this "
            f"process; kiln refuses to load native code from it. Remove it (rm -r {directory}) or point "
            f"KILN_CACHE_DIR at a directory of your own; kiln recreates it with mode 0700."
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _read_private(dir_fd: int, name: str) -> tuple[int, bytes] | None:
    """Open ``name`` in the private directory (no symlinks, a regular file of ours) and read it.

    Returns the open fd (the caller loads from it, so what was hashed is what runs) and its
    bytes, or ``None`` when there is no such usable file.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        os.close(fd)
        return None
    with os.fdopen(os.dup(fd), "rb") as handle:
        data = handle.read()
    return fd, data


def _recorded_sha256(dir_fd: int, target: Path) -> str | None:
    found = _read_private(dir_fd, _record_name(target))
    if found is None:
        return None
    fd, data = found
    os.close(fd)
    text = data.decode("ascii", "replace").strip()
    return text if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else None


def _verified_fd(dir_fd: int, target: Path) -> int | None:
    """An open fd of the helper if its sha256 is the one kiln recorded when it built it."""
    recorded = _recorded_sha256(dir_fd, target)
    found = _read_private(dir_fd, target.name)
    if found is None:
        with contextlib.suppress(OSError):
            os.stat(target.name, dir_fd=dir_fd, follow_symlinks=False)
            warnings.warn(
                f"kiln: not loading {target}: it is not a regular file of this user's that only this "
                f"user may write; rebuilding kiln's launcher.",
                NativeHelperWarning,
                stacklevel=4,
            )
        return None
    fd, data = found
    if recorded is not None and hashlib.sha256(data).hexdigest() == recorded:
        return fd
    os.close(fd)
    if recorded is None:
        reason = "kiln has no record of building it"
    else:
        reason = "its sha256 differs from the one kiln recorded when it built it"
    warnings.warn(
        f"kiln: not loading {target}: {reason}; rebuilding kiln's launcher.",
        NativeHelperWarning,
        stacklevel=4,
    )
    return None


def _compile_into(dir_fd: int, target: Path) -> None:
    """Compile the helper into the private directory and record its sha256 (both atomic)."""
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        raise NativeBuildError(
            f"Python's C headers are missing ({include}/Python.h); install the python3-dev package "
            f"of this interpreter so kiln can build its launcher."
        )
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    command = [
        _compiler(),
        "-O2",
        "-shared",
        "-fPIC",
        "-std=c11",
        f"-I{include}",
        f'-DLAUNCHER_SOURCE_SHA256="{_source_sha256()}"',
        str(_SOURCE),
        "-o",
        tmp,
        "-ldl",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise NativeBuildError(
                f"building kiln's launcher failed ({' '.join(command)}, exit {result.returncode}):\n"
                f"{result.stderr.strip()[-2000:]}"
            )
        os.chmod(tmp, 0o700)
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        atomic_write(target.with_name(_record_name(target)), digest.encode() + b"\n")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(cache_dir: Path) -> Path:
    """Compile the helper into ``<cache_dir>/native`` unless a verified build is there already.

    The directory is private (0700, this user's; see :func:`_open_private_dir`). A helper whose
    sha256 differs from the one recorded when kiln built it is rebuilt, never used.
    """
    target = _target_path(cache_dir)
    fd = _open_verified(target)
    os.close(fd)
    return target


def _open_verified(target: Path) -> int:
    """An fd of the verified helper (built first if missing or not the one kiln built)."""
    dir_fd = _open_private_dir(target.parent)
    try:
        with _build_lock(dir_fd):
            fd = _verified_fd(dir_fd, target)
            if fd is not None:
                return fd
            _compile_into(dir_fd, target)
            fd = _verified_fd(dir_fd, target)
            if fd is None:
                raise NativeBuildError(
                    f"kiln's launcher at {target} did not match its recorded sha256 right after it was "
                    f"built; another process may be writing into {target.parent}."
                )
            return fd
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def _build_lock(dir_fd: int) -> Iterator[None]:
    """One builder at a time per directory (processes sharing a cache), via ``flock``."""
    fd = os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load_extension(path: str, shown: Path | str) -> ModuleType:
    """Import the launcher module from the file at ``path`` (``shown`` names it in the error)."""
    loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, path)
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
    if spec is None:
        raise NativeBuildError(f"could not import kiln's launcher from {shown}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _load_built(target: Path) -> ModuleType:
    """Build (unless a verified build is there) and import the helper at ``target``."""
    fd = _open_verified(target)
    try:
        # Load through the fd that was hashed: what runs is what was checked.
        path = f"/proc/self/fd/{fd}"
        module = load_extension(path, shown=target)
        module.__file__ = str(target)
    finally:
        os.close(fd)
    return module


def _source_sha256() -> str | None:
    try:
        return hashlib.sha256(_SOURCE.read_bytes()).hexdigest()
    except OSError:
        return None

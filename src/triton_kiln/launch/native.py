"""Import kiln's C launcher (``_kiln_launch.c``): the one built with the package, else build it here.

Where it comes from, in order:

1. **Prebuilt**: the module ``triton_kiln.launch._kiln_launch`` that the package build compiled
   (``setup.py``; a wheel carries it). It is part of the installed package, trusted like any
   other file of it (its ``.py`` files run in this process too), so it is imported as it is, by
   the package's own import system (only the package's directory is searched). It is not used
   when it is missing (a source tree, an install built where no compiler was found), cannot be
   imported (built for another Python; a broken file), or was built from another version of
   ``_kiln_launch.c`` than the one next to it (it records the sha256 of its source in
   ``SOURCE_SHA256``: an editable install whose C source was edited since). The reason is
   logged (``kiln.launch``; a WARNING when one is there for this Python and this source but
   does not import, INFO otherwise: the cases of source trees) and kept (:func:`fallback_reason`).
2. **Built here** (the fallback): compiled with the system C compiler on first use, the way
   Triton builds its own launcher, into ``<KILN_CACHE_DIR>/native/_kiln_launch-<hash>.so``; the
   hash covers the C source, the Python version and the platform, so a changed source or
   interpreter rebuilds it.

A build here lives in a cache directory, not in the package, so it is loaded only from what
kiln built: ``native/`` is private (0700, this user's, not a symlink; refused otherwise with the
way out), the sha256 of each build is recorded next to it (``<name>.sha256``, written
atomically), and the file is opened, hashed and loaded through the same fd
(``/proc/self/fd/N``), so a planted or edited ``.so`` is rebuilt (with a
:class:`NativeHelperWarning`) and never loaded.
Neither build needs CUDA headers or CUDA libraries (the driver is opened at run time), so the
key function the module provides (``call_key``) also works on machines without a GPU.

:func:`native` returns the module, or raises :class:`NativeBuildError` saying why there is none
(no prebuilt module and: no compiler, no Python headers, the compiler's own error); callers fall
back to Triton's launcher and log that reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from triton_kiln.errors import KilnError
from triton_kiln.files import atomic_write

_SOURCE = Path(__file__).with_name("_kiln_launch.c")
_MODULE_NAME = "_kiln_launch"
PREBUILT_MODULE = f"triton_kiln.launch.{_MODULE_NAME}"
"""The prebuilt launcher's import name (built by ``setup.py``)."""

log = logging.getLogger("kiln.launch")
_lock = threading.Lock()
_module: ModuleType | None = None
_failure: NativeBuildError | None = None
_fallback_reason: str | None = None


class NativeBuildError(KilnError):
    """kiln's C launcher could not be built or imported; launches go through Triton's launcher."""


class NativeHelperWarning(UserWarning):
    """A launcher file kiln did not build (or that changed since) was found and not loaded."""


class _NoPrebuilt(Exception):
    """Why the prebuilt launcher is not used; ``broken``: one is there for this Python and this
    source but does not import (logged as a warning; the other cases are expected in source trees)."""

    def __init__(self, reason: str, broken: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.broken = broken


def _source_sha256() -> str | None:
    try:
        return hashlib.sha256(_SOURCE.read_bytes()).hexdigest()
    except OSError:
        return None


def _prebuilt() -> ModuleType:
    """The launcher built with the package, if it is there, imports, and matches the C source.

    Raises :class:`_NoPrebuilt` saying why not.
    """
    spec = importlib.util.find_spec(PREBUILT_MODULE)
    if spec is None or spec.origin is None:
        others = sorted(
            p.name for p in _SOURCE.parent.glob(f"{_MODULE_NAME}*") if p.name.endswith((".so", ".pyd"))
        )
        if others:
            raise _NoPrebuilt(
                f"the prebuilt launcher here ({', '.join(others)}) is not for this Python, which loads "
                f"{_MODULE_NAME}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
            )
        raise _NoPrebuilt(
            "this install of kiln has no prebuilt launcher (a source tree, or an install built "
            "where the launcher could not be compiled)"
        )
    origin = spec.origin
    if not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        raise _NoPrebuilt(f"{origin} is not an extension module", broken=True)
    try:
        module = importlib.import_module(PREBUILT_MODULE)
    except (ImportError, OSError, SystemError) as exc:
        reason = f"the prebuilt launcher {origin} could not be imported: {exc}"
        raise _NoPrebuilt(reason, broken=True) from None
    built_from = getattr(module, "SOURCE_SHA256", "")
    expected = _source_sha256()
    if expected is not None and built_from != expected:
        del sys.modules[PREBUILT_MODULE]  # never handed out; the process keeps it loaded, unused
        with contextlib.suppress(AttributeError):
            delattr(sys.modules[PREBUILT_MODULE.rpartition(".")[0]], _MODULE_NAME)
        raise _NoPrebuilt(
            f"the prebuilt launcher {origin} was built from another _kiln_launch.c (sha256 "
            f"{built_from[:16] or 'not recorded'}; the source next to it has {expected[:16]}): an "
            f"editable install whose C source changed since; reinstall it to rebuild the launcher"
        )
    return module


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
        f'-DKILN_SOURCE_SHA256="{_source_sha256()}"',
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


def native(cache_dir: Path | None = None) -> ModuleType:
    """The imported helper module: the prebuilt one, else one built here on first use.

    ``cache_dir`` (default: the settings' ``cache_dir``) is where a build here goes.
    Raises :class:`NativeBuildError`.
    """
    global _module, _failure, _fallback_reason
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        if _failure is not None:
            raise _failure
        try:
            _module = _prebuilt()
            return _module
        except _NoPrebuilt as exc:
            _fallback_reason = exc.reason
            log.log(
                logging.WARNING if exc.broken else logging.INFO,
                "kiln: %s; kiln uses a launcher built here with the system C compiler",
                exc.reason,
            )
        if cache_dir is None:
            from triton_kiln import settings

            cache_dir = settings.current().cache_dir
        try:
            module = _load_built(_target_path(cache_dir))
        except NativeBuildError as exc:
            _failure = NativeBuildError(f"{exc} (kiln builds its own launcher because {_fallback_reason})")
            raise _failure from None
        except (OSError, ImportError, subprocess.SubprocessError) as exc:
            _failure = NativeBuildError(
                f"kiln's launcher could not be built or imported: {exc} (kiln builds its own launcher "
                f"because {_fallback_reason})"
            )
            raise _failure from exc
        _module = module
        return module


def _load_built(target: Path) -> ModuleType:
    """Build (unless a verified build is there) and import the helper at ``target``."""
    fd = _open_verified(target)
    try:
        # Load through the fd that was hashed: what runs is what was checked.
        path = f"/proc/self/fd/{fd}"
        loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, path)
        spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
        if spec is None:
            raise NativeBuildError(f"could not import kiln's launcher from {target}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        module.__file__ = str(target)
    finally:
        os.close(fd)
    return module


def fallback_reason() -> str | None:
    """Why this process built its launcher instead of using the prebuilt one (``None``: it uses
    the prebuilt one, or has loaded none yet)."""
    return _fallback_reason


def loaded_path() -> str | None:
    """Where this process loaded the helper from (``None``: not loaded yet); builds nothing.

    A process kiln spawns (the native benchmark sandbox) loads the same file instead of
    building its own copy, whatever its cache directory."""
    module = _module
    return None if module is None else getattr(module, "__file__", None)


def load_path(path: str) -> ModuleType:
    """Import the helper from a file another kiln process loaded (see :func:`loaded_path`):
    the prebuilt module by its import name, a build here from its path."""
    global _module
    with _lock:
        if _module is None:
            spec = importlib.util.find_spec(PREBUILT_MODULE)
            origin = None if spec is None else spec.origin
            if origin is not None and os.path.exists(origin) and os.path.samefile(origin, path):
                _module = importlib.import_module(PREBUILT_MODULE)
                return _module
            loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, path)
            spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
            if spec is None:
                raise NativeBuildError(f"could not import kiln's launcher from {path}")
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            _module = module
        return _module

"""Build and import kiln's C launcher (``_kiln_launch.c``), once per machine and Python.

The helper is compiled with the system C compiler on first use, the way Triton builds its own
launcher, into ``<KILN_CACHE_DIR>/native/_kiln_launch-<hash>.so``; the hash covers the C
source, the Python version and the platform, so a changed source or interpreter rebuilds it.
It needs neither CUDA headers nor CUDA libraries to build (the driver is opened at run time),
so the key function it provides (``call_key``) also works on machines without a GPU.

:func:`native` returns the module, or raises :class:`NativeBuildError` saying why it could
not be built (no compiler, no Python headers, the compiler's own error); callers fall back to
Triton's launcher and log that reason.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType

from kiln.errors import KilnError

_SOURCE = Path(__file__).with_name("_kiln_launch.c")
_MODULE_NAME = "_kiln_launch"
_lock = threading.Lock()
_module: ModuleType | None = None
_failure: NativeBuildError | None = None


class NativeBuildError(KilnError):
    """kiln's C launcher could not be built or imported; launches go through Triton's launcher."""


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


def build(cache_dir: Path) -> Path:
    """Compile the helper into ``cache_dir`` (atomically) unless it is there already."""
    target = _target_path(cache_dir)
    if target.exists():
        return target
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        raise NativeBuildError(
            f"Python's C headers are missing ({include}/Python.h); install the python3-dev package "
            f"of this interpreter so kiln can build its launcher."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    command = [
        _compiler(),
        "-O2",
        "-shared",
        "-fPIC",
        "-std=c11",
        f"-I{include}",
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
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def native(cache_dir: Path | None = None) -> ModuleType:
    """The imported helper module (built on first use). Raises :class:`NativeBuildError`."""
    global _module, _failure
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        if _failure is not None:
            raise _failure
        if cache_dir is None:
            from kiln import settings

            cache_dir = settings.current().cache_dir
        try:
            path = build(cache_dir)
            loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, str(path))
            spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
            if spec is None:
                raise NativeBuildError(f"could not import kiln's launcher from {path}")
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except NativeBuildError as exc:
            _failure = exc
            raise
        except (OSError, ImportError, subprocess.SubprocessError) as exc:
            _failure = NativeBuildError(f"kiln's launcher could not be built or imported: {exc}")
            raise _failure from exc
        _module = module
        return module


def loaded_path() -> str | None:
    """Where this process loaded the helper from (``None``: not loaded yet); builds nothing.

    A process kiln spawns (the native benchmark sandbox) loads the same file instead of
    building its own copy, whatever its cache directory."""
    module = _module
    return None if module is None else getattr(module, "__file__", None)


def load_path(path: str) -> ModuleType:
    """Import the helper from a file another kiln process built (see :func:`loaded_path`)."""
    global _module
    with _lock:
        if _module is None:
            loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, path)
            spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
            if spec is None:
                raise NativeBuildError(f"could not import kiln's launcher from {path}")
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            _module = module
        return _module

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
2. **Built here** (the fallback; :mod:`triton_kiln.launch.native_build`): compiled with the system
   C compiler on first use into a private directory of kiln's cache and loaded only when its
   sha256 is the one kiln recorded.

Neither build needs CUDA headers or CUDA libraries (the driver is opened at run time), so the
key function the module provides (``call_key``) also works on machines without a GPU.

:func:`native` returns the module, or raises :class:`NativeBuildError` saying why there is none
(no prebuilt module and: no compiler, no Python headers, the compiler's own error); callers fall
back to Triton's launcher and log that reason.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

from triton_kiln.launch.native_build import (
    _MODULE_NAME,
    _SOURCE,
    NativeBuildError,
    NativeHelperWarning,
    _load_built,
    _source_sha256,
    _target_path,
    build,
    helper_path,
    load_extension,
)

__all__ = [
    "PREBUILT_MODULE",
    "NativeBuildError",
    "NativeHelperWarning",
    "build",
    "fallback_reason",
    "helper_path",
    "load_path",
    "loaded_path",
    "native",
]

PREBUILT_MODULE = f"triton_kiln.launch.{_MODULE_NAME}"
"""The prebuilt launcher's import name (built by ``setup.py``)."""

log = logging.getLogger("kiln.launch")
_lock = threading.Lock()
_module: ModuleType | None = None
_failure: NativeBuildError | None = None
_fallback_reason: str | None = None


class _NoPrebuilt(Exception):
    """Why the prebuilt launcher is not used; ``broken``: one is there for this Python and this
    source but does not import (logged as a warning; the other cases are expected in source trees)."""

    def __init__(self, reason: str, broken: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.broken = broken


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
            _module = load_extension(path, shown=path)
        return _module

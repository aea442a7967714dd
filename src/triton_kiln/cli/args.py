"""The command line's arguments that name things outside kiln, checked before any work, each a
one-line ``Error:`` (``kiln compile``; ``kiln tune`` shares :func:`resolve`).

``MODULE:NAME`` and ``path/to/file.py:NAME``: the user's module is imported in the CLI process
by its module name, and so are a kernel's module and the ``--preload`` modules in the compile
workers (a request names its kernel by module and name). A ``.py`` path therefore puts its folder
first on ``sys.path`` and imports the file's stem; when that name is taken by another module (the
standard library's ``copy``, an installed package, one imported already) the import gives that
module, and the error says the file is shadowed. Whatever an import raises is one line: an
``ImportError``, any other exception (a ``SyntaxError``, ``RuntimeError("boom")`` at import) and
``SystemExit`` (a module that calls ``sys.exit()`` at import), with the file and line in the
user's code where it was raised. ``KeyboardInterrupt`` goes through.

``--preload`` modules are imported here first (an unknown or failing one would otherwise only be
skipped by the workers); ``--json PATH``'s folder is made, and must be writable; ``--workers`` and
``--timeout`` are range-checked as flags (the settings layer would name ``KILN_WORKERS``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import math
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import click

_THIS_FILE = str(Path(__file__).resolve())
_IMPORTLIB_FILE = str(Path(importlib.__file__).resolve())


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """Where the standard library and installed packages are: not the user's code."""
    paths = sysconfig.get_paths()
    keys = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(str(Path(paths[key]).resolve()) + os.sep for key in keys if paths.get(key))


def resolve(spec: str) -> Any:
    """The object ``MODULE:NAME`` (or ``path/to/file.py:NAME``) names; the current directory is importable."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not MODULE:NAME", param_hint="MODULE:KERNEL")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    path = None
    if module_name.endswith(".py"):
        path_text, path = module_name, _module_file(module_name)
        if sys.path[0] != str(path.parent):
            sys.path.insert(0, str(path.parent))
        module_name = path.stem
    obj: Any = import_module(module_name)
    if path is not None:
        _check_not_shadowed(path_text, path, obj)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.ClickException(f"{module_name!r} has no {attr!r}") from None
    return obj


def import_module(name: str) -> ModuleType:
    """``importlib.import_module(name)``; what it raises (but ``KeyboardInterrupt``) is one line."""
    try:
        return importlib.import_module(name)
    except KeyboardInterrupt:
        raise
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name and f"{name}.".startswith(f"{exc.name}."):
            raise click.ClickException(_not_found(name, exc.name)) from None
        raise click.ClickException(f"cannot import {name!r}: {_message(exc)}{_where(exc)}") from None
    except BaseException as exc:  # any exception of the module's own code, and sys.exit()
        raise click.ClickException(
            f"importing {name!r} raised {type(exc).__name__}{': ' if str(exc) else ''}{_message(exc)}"
            f"{_where(exc)}; `python -c 'import {name}'` in its folder shows the whole traceback"
        ) from None


def _not_found(name: str, missing: str) -> str:
    """The user's module itself (not something it imports) is not importable from here."""
    file = name.replace(".", "/") + ".py"
    return (
        f"cannot import {name!r}: no module {missing!r} is importable from {Path.cwd()} (the current "
        f"directory) or sys.path; give the kernel's file instead, as path/to/{file}:NAME, or run kiln "
        f"in the folder that holds {missing.replace('.', '/')}"
    )


def check_preloads(modules: Sequence[str]) -> None:
    """Each ``--preload`` module is one this process can import (imported here, as the compile
    workers will): an unknown or failing one is refused before anything starts."""
    for name in dict.fromkeys(modules):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package that is not there, or a relative name
            found = False
        except Exception:  # a parent package that fails at import: reported by the import below
            found = True
        if not found:
            raise click.UsageError(
                f"--preload {name}: no module of that name can be imported here; compile workers "
                f"import it by name, so give a module on sys.path (the current directory is on it)"
            )
        try:
            import_module(name)
        except click.ClickException as exc:
            raise click.UsageError(f"--preload {name}: {exc.message}") from None


def _module_file(text: str) -> Path:
    """The file a ``path/to/file.py`` spec names; it must exist and its stem be a module name."""
    path = Path(text)
    if not path.is_file():
        what = "is not a file" if path.exists() else "no such file"
        raise click.ClickException(
            f"{text}: {what} (from {Path.cwd()}); give the kernel's file as path/to/file.py:NAME, "
            f"or its module as MODULE:NAME"
        )
    if not path.stem.isidentifier():
        suggested = re.sub(r"\W", "_", path.stem)
        raise click.ClickException(
            f"{text}: kiln imports a file by its module name (so do the compile workers), and "
            f"{path.stem!r} is not one; rename it to {suggested}.py, say"
        )
    return path.resolve()


def _check_not_shadowed(text: str, path: Path, module: ModuleType) -> None:
    """``import <stem>`` gave the file ``text`` names, not another module of that name."""
    file = getattr(module, "__file__", None)
    if file is not None and Path(file).resolve() == path:
        return
    where = f"at {file}" if file else "built in"
    raise click.ClickException(
        f"{text} is shadowed by the module {module.__name__!r} ({where}): kiln imports a file by its "
        f"module name (so do the compile workers), and that name is taken first by the standard "
        f"library, an installed package or a module imported already; rename {path.name}, or give "
        f"the kernel as MODULE:NAME of a package it is in"
    )


def _message(exc: BaseException) -> str:
    """The exception's message on one line."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _where(exc: BaseException) -> str:
    """`` (file.py:12)``: where in the user's code the import raised (the innermost frame outside
    the standard library and installed packages; else the imported module's own frame)."""
    if isinstance(exc, SyntaxError):
        return ""  # its message names the file and line already
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<")
        and str(Path(f.filename).resolve()) not in (_THIS_FILE, _IMPORTLIB_FILE)
    ]
    if not frames:
        return ""  # raised by the import machinery itself: no line of anyone's code to show
    ours = [f for f in frames if not str(Path(f.filename).resolve()).startswith(_library_dirs())]
    frame = ours[-1] if ours else frames[0]
    return f" ({Path(frame.filename).name}:{frame.lineno})"


def check_json_path(value: str) -> None:
    """``kiln compile --json PATH`` checked before any work: its folder made now (missing folders are
    made, as ``report --json`` makes them), and writable; the summary is written there at the end."""
    path = Path(value)
    what = f"cannot write --json {value}"
    if path.is_dir():
        raise click.UsageError(f"{what}: it is a directory; give a file name in it")
    for folder in (path.parent, *path.parent.parents):
        if folder.exists() and not folder.is_dir():
            raise click.UsageError(f"{what}: {folder} is not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(f"{what}: its folder {path.parent} cannot be made ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise click.UsageError(f"{what}: the folder {path.parent} is not writable")


def check_workers(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``--workers`` in range, said of the flag (not of ``KILN_WORKERS``, which it overrides)."""
    from triton_kiln.settings import MAX_WORKERS, max_workers

    if value is not None and not 1 <= value <= max_workers():
        raise click.UsageError(
            f"--workers {value}: expected 1 to {max_workers()} on this machine (4 per CPU core, at "
            f"least 8, at most {MAX_WORKERS}: a compile keeps a core busy, so more workers only add "
            f"memory and fork time)"
        )
    return value


def check_timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """``--timeout`` in range, said of the flag (not of ``KILN_JOB_TIMEOUT_S``)."""
    if value is not None and not (math.isfinite(value) and value >= 0.001):
        raise click.UsageError(f"--timeout {value:g}: expected a finite number of seconds, at least 0.001")
    return value


def a_kind(obj: Any) -> str:
    """What ``obj`` is, for an error: "a Python function", "an int", "a JITFunction"."""
    kind = "Python function" if inspect.isfunction(obj) else type(obj).__name__
    return f"{'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}"

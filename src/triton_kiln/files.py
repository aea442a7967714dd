"""Files kiln writes: atomically (temporary file, fsync, rename: the one way kiln puts a file on
disk), to an output path checked first (:func:`check_writable`: an error names the user's path
and option, never a temporary file), under a name made safe (:func:`safe_name`: a name taken from
data, such as a kernel's, is never a path).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from triton_kiln.errors import KilnError


class OutputPathError(KilnError):
    """kiln cannot write where it was asked to (the message names the path as it was given)."""


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same directory, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _shown(path: Path) -> str:
    return f"the current directory ({Path.cwd()})" if str(path) == "." else str(path)


def _problem(path: Path, *, directory: bool) -> str | None:
    """Why kiln cannot write ``path`` (a file, or with ``directory`` a directory to write files
    into), judged from the nearest part of it that exists; ``None``: no reason known."""
    probe = path if directory else path.parent
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "a file, not a directory" if probe.is_file() else "not a directory"
        return f"{_shown(probe)} is {what}"
    if os.access(probe, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(probe).f_flag & os.ST_RDONLY:
            return f"the directory {_shown(probe)} is on a read-only file system"
    return f"the directory {_shown(probe)} is not writable"


def check_writable(path: Path, what: str, *, directory: bool = False) -> None:
    """Refuse, before any work, an output ``path`` kiln could not write: under a file, or in a
    directory the user cannot write (missing directories on the way are made later). ``what``
    names it as the user gave it (``--html page.html``, ``the bundle out.tgz``); ``directory``:
    ``path`` is a directory that files are written into."""
    problem = _problem(path, directory=directory)
    if problem is not None:
        raise OutputPathError(f"cannot write {what}: {problem}")


def write_error(what: str, path: Path, exc: OSError, *, directory: bool = False) -> OutputPathError:
    """The :class:`OutputPathError` for ``exc``, met while writing ``path``: why, named by the
    user's path (not the temporary file's) where it can be told, else the system's reason."""
    problem = _problem(path, directory=directory) or exc.strerror or str(exc)
    return OutputPathError(f"cannot write {what}: {problem}")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, *, fallback: str, max_length: int = 100) -> str:
    """``name`` as a file name that is never a path: only ASCII letters, digits, ``.``, ``_`` and
    ``-`` (any run of other characters, ``/`` included, becomes one ``_``), no leading ``.``,
    ``_`` or ``-`` (no hidden file, no ``..``, nothing read as an option), at most ``max_length``
    characters; ``fallback`` if nothing is left."""
    return _UNSAFE.sub("_", name).lstrip("._-")[:max_length] or fallback

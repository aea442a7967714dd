"""The pool's temporary folder in ``TMPDIR``: made with its owner in its name, removed by the
pool's shutdown, and swept by a later pool when its owner died without removing it.

::

    <TMPDIR>/kiln-pool-<pid>-<start ms>-<random>/     one per started pool (0700)
        worker-<n>-<random>/                          each worker's private TMPDIR

``<pid>`` and ``<start ms>`` (the process's start time, milliseconds since the epoch) name the
process that made the folder: a folder whose process is gone, or whose pid now belongs to a
process started at another time (a reused pid), has no owner left to remove it, and the next
pool to start (in any process of the same user) removes it. A folder of another user, or one
whose name does not say its owner, is left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import psutil

log = logging.getLogger("kiln.pool")

PREFIX = "kiln-pool-"
_OWNED = re.compile(rf"{PREFIX}(\d+)-(\d+)-.+")
_START_SLACK_MS = 1000  # the start time as two reads of it may differ (clock ticks, rounding)


def _start_ms(process: psutil.Process) -> int:
    return round(float(process.create_time()) * 1000)


def make() -> str:
    """A new folder for this process's pool, its owner (this process) in its name."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{_start_ms(psutil.Process())}-")


def owner_alive(pid: int, start_ms: int) -> bool:
    """Whether the process that made a folder (``pid``, started at ``start_ms``) still runs."""
    if not psutil.pid_exists(pid):
        return False
    try:
        return abs(_start_ms(psutil.Process(pid)) - start_ms) <= _START_SLACK_MS
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # another user's process, say: not known to be gone
        return True


def sweep(directory: str | None = None) -> list[Path]:
    """Remove this user's pool folders in ``directory`` (default: ``TMPDIR``) whose owner is gone;
    returns the folders removed. Never raises: a sweep is housekeeping, not the pool's work."""
    root = Path(directory or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        names = [name for name in os.listdir(root) if name.startswith(PREFIX)]
    except OSError:
        return removed
    for name in names:
        match = _OWNED.fullmatch(name)
        if match is None:
            continue
        path = root / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue  # a link or a file is not kiln's folder; another user's is theirs
        if owner_alive(int(match.group(1)), int(match.group(2))):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
        if not os.path.lexists(path):
            removed.append(path)
    if removed:
        log.debug("kiln: removed %d pool folder(s) of processes that are gone", len(removed))
    return removed

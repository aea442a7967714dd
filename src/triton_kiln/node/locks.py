"""Node-wide locks in the cache directory: ``flock``'d files whose holder's death frees them.

Layout (``root`` is ``Settings.cache_dir``)::

    root/node/compile/ab/<key>.lock      held while one process of the node compiles <key>
    root/node/compile/ab/<key>.failed    that process's compile of <key> failed (JSON, see below)
    root/node/slots/<i>.lock             held while some process's worker runs a compile (i < slots)
    root/node/tune/<identity>.lock       held while one process tunes a (kernel, key, device)

Why ``flock``: the kernel drops the lock when the last descriptor of the open file goes, so a
holder killed with SIGKILL frees it at once and a waiter takes over on its next poll; nothing
is ever left "taken" by a dead process, and there is no time-out to guess. Two opens of the same
file conflict even inside one process (two pools sharing a cache directory).

* **No leftovers.** A holder removes its file (while it still holds the lock) before letting go;
  a taker checks, once it holds the lock, that the path still names the file it locked (else the
  file was removed under it and it tries again), so a removed lock can never be held twice.
* **Forks do not inherit locks.** A child forked while the lock is held (a data loader's worker)
  would keep it alive past its parent's death; :func:`os.register_at_fork` closes every held lock's
  descriptor in the child (the parent keeps its lock).
* **Local file systems only** (flock over NFS is not reliable): the cache directory of a node.

Nothing here blocks: :meth:`FileLock.try_acquire` answers at once; waiting is the callers' poll
(:mod:`triton_kiln.pool.node_jobs`, :mod:`triton_kiln.autotuner.node_tuning`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

NODE_DIR = "node"

_held: weakref.WeakSet[FileLock] = weakref.WeakSet()
_held_lock = threading.Lock()


def node_dir(cache_dir: Path) -> Path:
    """Where a node's locks live under ``cache_dir``."""
    return Path(cache_dir) / NODE_DIR


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


class FileLock:
    """One lock file: :meth:`try_acquire` (never blocks), :meth:`release`; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if no other holder has it (``True``); ``False`` at once otherwise."""
        if self.fd is not None:
            return True
        for _ in range(3):  # the file may be removed under us by a holder letting go: try again
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except FileNotFoundError:
                _private_dir(self.path.parent)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False  # another open file holds it
            try:
                same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)  # locked a file its holder removed meanwhile
                continue
            self.fd = fd
            with _held_lock:
                _held.add(self)
            return True
        return False

    def release(self, *, remove: bool = True) -> None:
        """Let go (idempotent); with ``remove``, the file goes first, so no lock file is left behind."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        with _held_lock:
            _held.discard(self)
        if remove:
            with contextlib.suppress(OSError):
                if os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    os.unlink(self.path)
        os.close(fd)

    def _forget_in_child(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # the parent's descriptor keeps the parent's lock

    def __repr__(self) -> str:
        return f"FileLock({str(self.path)!r}, {'held' if self.held else 'free'})"


def _after_fork_in_child() -> None:
    for lock in list(_held):
        lock._forget_in_child()
    _held.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Slots:
    """``count`` node-wide compile slots: a process runs a compile only while it holds one.

    Every process of the node that uses the same cache directory and count draws from the same
    files, so their compiles together keep about ``count`` cores busy. A holder that dies frees
    its slot (flock). Processes with different counts share the lower slots.
    """

    def __init__(self, cache_dir: Path, count: int) -> None:
        if count < 1:
            raise ValueError(f"a node needs at least one compile slot, got {count}")
        self.directory = node_dir(cache_dir) / "slots"
        self.count = count
        self._next = os.getpid() % count  # processes start at different slots: fewer collisions

    def try_take(self) -> FileLock | None:
        """A free slot, held (``None``: every slot is taken now)."""
        for i in range(self.count):
            index = (self._next + i) % self.count
            lock = FileLock(self.directory / f"{index}.lock")
            if lock.try_acquire():
                self._next = (index + 1) % self.count
                return lock
        return None

    @staticmethod
    def give_back(slot: FileLock) -> None:
        slot.release(remove=False)  # slot files stay: there is a fixed set of them


def write_marker(path: Path, record: dict[str, Any]) -> None:
    """Write a small JSON record atomically (a temporary file renamed into place)."""
    _private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def marker_since(path: Path, since: float) -> dict[str, Any] | None:
    """The JSON record at ``path`` if it was written at or after ``since`` (Unix time), else ``None``."""
    try:
        if os.stat(path, follow_symlinks=False).st_mtime < since:
            return None
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def remove_file(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def now() -> float:
    return time.time()

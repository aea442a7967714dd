"""A kiln compile job seen through the ``multiprocessing.Process`` interface Helion waits on.

Helion's ``PrecompileFuture`` wraps one process per config: it starts it, waits on its
``sentinel`` (with ``multiprocessing.connection.wait``), reads ``exitcode`` when it is no longer
alive, and kills it (``os.killpg`` on its ``pid``, else ``kill()``/``terminate()``) on timeout,
on failure and on Ctrl-C. :class:`KilnCompileProcess` gives a kiln pool future that interface,
so Helion's own waiting, timeout, classification and clean-up code runs unchanged::

    Helion's wait loop (caller thread)             kiln manager thread
      start()        -> no-op: the job was submitted when the future was made
      sentinel       -> an eventfd               <- written once when the future completes
      is_alive()     -> future not done (and not abandoned)
      exitcode       -> on_done(future), once, in the caller's thread: writes Helion's result
                        file, places the artifact in Triton's cache; 0 = compiled
      kill()/terminate() -> abandon: a queued job is cancelled (it never starts); a running
                        compile is left to finish (or to hit kiln's timeout) in its worker,
                        and its result is ignored

``pid`` is ``None``: nothing here is a process of Helion's to signal; kiln's workers, their
process groups and timeouts stay kiln's (see :mod:`triton_kiln.pool.pool`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any


class KilnCompileProcess:
    """A process-like handle on one kiln compile future (see the module docstring)."""

    pid: int | None = None
    daemon: bool = True

    def __init__(self, future: Future[Any], on_done: Callable[[Future[Any]], int], name: str) -> None:
        self.name = name
        self._future = future
        self._on_done = on_done
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._exitcode: int | None = None
        self._abandoned = False
        future.add_done_callback(self._signal)

    def __repr__(self) -> str:
        state = "abandoned" if self._abandoned else "done" if self._future.done() else "compiling"
        return f"<KilnCompileProcess {self.name} {state}>"

    # -- what PrecompileFuture calls ---------------------------------------------------------

    def start(self) -> None:
        """Nothing to start: the job is in kiln's queue since the future was created."""

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable when the compile has finished."""
        with self._lock:
            if self._fd is None:
                self._fd = os.eventfd(0, os.EFD_CLOEXEC)
                if self._future.done() or self._abandoned:
                    os.eventfd_write(self._fd, 1)
            return self._fd

    def is_alive(self) -> bool:
        return not self._abandoned and not self._future.done()

    @property
    def exitcode(self) -> int | None:
        if self.is_alive():
            return None
        with self._lock:
            if self._exitcode is None:
                self._exitcode = -int(signal.SIGKILL) if self._abandoned else self._on_done(self._future)
                self._close_fd()
            return self._exitcode

    def join(self, timeout: float | None = None) -> None:
        if self.is_alive():
            wait_futures([self._future], timeout=timeout)

    def terminate(self) -> None:
        self._abandon()

    def kill(self) -> None:
        self._abandon()

    def close(self) -> None:
        with self._lock:
            self._close_fd()

    # -- internals ---------------------------------------------------------------------------

    def _abandon(self) -> None:
        if self._future.done():
            return
        self._future.cancel()  # succeeds only while the job is still queued
        with self._lock:
            self._abandoned = True
            if self._fd is not None:
                os.eventfd_write(self._fd, 1)

    def _signal(self, _future: Future[Any]) -> None:
        # Runs on kiln's manager thread (or at once if the future was already done).
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.eventfd_write(self._fd, 1)

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        fd = self._fd
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

"""A spawned sandbox process and its framed socket, as the client sees them.

:class:`WorkerProcess` spawns ``python -c "from <module> import main; main()"`` (a fresh
interpreter, never a fork) from one long-lived thread, so that the child's parent-death signal,
which follows the *thread* that created it, fires only when the caller's process ends. It sends
and receives :mod:`triton_kiln.framing` frames with deadlines and reports how the process ended.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from triton_kiln.errors import describe_exit, likely_cause
from triton_kiln.framing import FrameReader, encode
from triton_kiln.procs import spawn_kiln_process

_STDERR_TAIL = 15
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-sandbox-spawner")


class Died(Exception):
    """The process ended (or its socket closed) while the client waited; args[0]: a reason or ''."""


class TimedOut(Exception):
    """No reply within the deadline (the process may still be running)."""


def receive(
    chan: socket.socket, reader: FrameReader, frames: list[bytes], timeout: float, alive: Callable[[], bool]
) -> Any:
    """The next pickled message on ``chan`` (``frames``: those already read, oldest first);
    :class:`TimedOut` after ``timeout`` s, :class:`Died` when the socket closes or ``alive()``
    turns false while nothing arrives."""
    deadline = time.monotonic() + timeout
    while True:
        if frames:
            return pickle.loads(frames.pop(0))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimedOut()
        ready, _, _ = select.select([chan], [], [], min(remaining, 0.5))
        if not ready:
            if not alive():
                raise Died("")
            continue
        try:
            data = chan.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            raise Died("")
        frames.extend(reader.feed(data))


class WorkerProcess:
    """One running sandbox process (not restartable: make a new one)."""

    def __init__(self, module: str, fd_variable: str, parent_variable: str, init: dict[str, Any]) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        self.spawned_at = time.time()
        self.started = time.monotonic()
        try:
            self.proc: subprocess.Popen[bytes] = _SPAWNER.submit(
                spawn_kiln_process,
                module,
                child_end.fileno(),
                dict(os.environ),
                fd_variable,
                parent_variable,
                self.stderr,
                self.stderr,
            ).result()
        finally:
            child_end.close()
        self.chan = parent_end
        self._reader = FrameReader()
        self._frames: list[bytes] = []
        self.chan.sendall(encode(init))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: Any) -> None:
        try:
            self.chan.sendall(encode(message))
        except OSError as exc:
            raise Died(f"the sandbox's channel broke ({exc})") from None

    def receive(self, timeout: float) -> Any:
        """The next message; :class:`TimedOut` after ``timeout`` s, :class:`Died` if it ended."""
        return receive(self.chan, self._reader, self._frames, timeout, self.alive)

    def wait(self, timeout: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout=timeout)
        return None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.wait(10)
        self.close()

    def close(self, wait_s: float = 0.0) -> None:
        """Close the channel (the process exits on EOF); kill it if it has not after ``wait_s``."""
        with contextlib.suppress(OSError):
            self.chan.close()
        if wait_s and self.alive() and self.wait(wait_s) is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.wait(10)
        with contextlib.suppress(OSError):
            self.stderr.close()

    def stderr_tail(self) -> tuple[str, ...]:
        try:
            self.stderr.seek(0)
            lines = self.stderr.read().decode(errors="replace").splitlines()
        except (OSError, ValueError):
            return ()
        return tuple(line for line in lines if line.strip())[-_STDERR_TAIL:]

    def death_reason(self, died: Died, sticky_exit: int) -> tuple[str, tuple[str, ...]]:
        """Why the process ended, for a ``bench_crashed`` outcome, and its last stderr lines."""
        returncode = self.wait(10)
        tail = self.stderr_tail()
        reason = (
            died.args[0]
            if died.args and died.args[0]
            else f"the sandbox died with {describe_exit(returncode)}"
        )
        cause = likely_cause(returncode)
        if cause:
            reason += f" ({cause})"
        if returncode == sticky_exit:
            reason = "the sandbox hit a sticky CUDA error"
        if tail:
            reason += "; it printed: " + " | ".join(tail[-3:])
        return reason, tail

"""The parent's view of its child processes: one handle for the zygote, one per worker.

Handles own file descriptors and buffers only; every decision (what to send, when to kill,
how a death maps to an error) belongs to the manager thread (:mod:`triton_kiln.pool.manager`, with
:mod:`triton_kiln.pool.supervisor` for the zygote), the only thread that touches them.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from triton_kiln import child_env, procs
from triton_kiln.framing import FrameReader
from triton_kiln.pool.protocol import ToZygote, ZygoteInit, pack
from triton_kiln.pool.zygote import ENV_FD, ENV_PARENT

if TYPE_CHECKING:
    from triton_kiln.pool.jobs import Job

ENV_POOL_ID = child_env.POOL_ID  # marks every process of a pool (leak checks find them by it)


class LineTail:
    """The last ``n`` lines written to a pipe, fed incrementally."""

    def __init__(self, n: int) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=n)
        self._partial = b""

    def feed(self, data: bytes) -> None:
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.lines.append(line)

    def clear(self) -> None:
        """Forget what was fed so far (a new job starts: its errors quote only its own output)."""
        self.lines.clear()
        self._partial = b""

    def snapshot(self) -> tuple[str, ...]:
        tail = list(self.lines)
        if self._partial.strip():
            tail.append(self._partial.decode(errors="replace").rstrip())
        return tuple(tail[-(self.lines.maxlen or len(tail)) :])


@dataclass
class WorkerHandle:
    wid: int
    chan: socket.socket
    err_fd: int
    tail: LineTail
    reader: FrameReader = field(default_factory=FrameReader)
    pid: int | None = None
    ready: bool = False
    job: Job | None = None
    deadline: float | None = None
    kill_reason: str | None = None
    chan_open: bool = True
    err_open: bool = True
    returncode: int | None = None
    exited: bool = False
    exited_at: float = 0.0
    ps: Any = None  # psutil.Process, created lazily for the memory limit
    peak_rss: int = 0
    replaces_since: float | None = None  # when the worker this one replaces died (for stats)

    def group_rss(self) -> int | None:
        """Resident memory of the worker and its children (ptxas), in bytes."""
        import psutil

        try:
            if self.ps is None or self.ps.pid != self.pid:
                self.ps = psutil.Process(self.pid)
            total = int(self.ps.memory_info().rss)
            for child in self.ps.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += int(child.memory_info().rss)
            return total
        except psutil.Error:
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.chan.close()
        if self.err_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.err_fd)
            self.err_fd = -1


class ZygoteHandle:
    """A running (or starting) zygote process and its control socket."""

    def __init__(self, pool_id: str, stderr_lines: int) -> None:
        self.pool_id = pool_id
        self.ctl, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, **procs.SINGLE_THREAD_ENV, ENV_POOL_ID: pool_id}
        self.proc = procs.spawn_kiln_process(
            "triton_kiln.pool.zygote",
            child.fileno(),
            env,
            ENV_FD,
            ENV_PARENT,
            subprocess.PIPE,
            subprocess.STDOUT,
        )
        child.close()
        assert self.proc.stdout is not None
        self.out_fd = self.proc.stdout.fileno()
        os.set_blocking(self.out_fd, False)
        self.ctl.setblocking(False)
        self.tail = LineTail(stderr_lines)
        self.started_at = time.monotonic()
        self.ready = False
        self.info: dict[str, Any] = {}
        self.preloaded: set[str] = set()
        self.preloading: set[str] = set()
        self.dead = False
        self.timed_out = False

    def send(self, message: ToZygote, fds: list[int] | None = None) -> None:
        data = pack(message)
        self.ctl.setblocking(True)
        try:
            if fds:
                socket.send_fds(self.ctl, [data], fds)
            else:
                self.ctl.send(data)
        finally:
            self.ctl.setblocking(False)

    def send_init(self, init: ZygoteInit) -> None:
        self.ctl.setblocking(True)
        try:
            self.ctl.send(pack(init))
        finally:
            self.ctl.setblocking(False)

    def read_output(self) -> bool:
        """Drain the zygote's stdout/stderr into the tail; ``False`` at EOF."""
        while True:
            try:
                data = os.read(self.out_fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self.tail.feed(data)

    def kill(self) -> None:
        """Kill the zygote (its workers follow through their parent-death signal) and reap it."""
        self.dead = True
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.ctl.close()
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()

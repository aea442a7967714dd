"""A real ``redis-server`` for tests: on 127.0.0.1, a free port, a temporary directory, no persistence.

Debian's package (``apt-get install redis-server``; .ci/run installs it). :class:`RedisServer`
starts one, waits for its PING, and stops, pauses (SIGSTOP: the port accepts, nothing answers)
or restarts it on the same port. Tests count leftover ``redis-server`` processes with
:func:`server_processes`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_processes(directory: Path) -> list[psutil.Process]:
    """Live ``redis-server`` processes started in ``directory`` (by :class:`RedisServer`)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            ours = proc.info["name"] == "redis-server" and Path(proc.cwd()) == directory
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert REDIS_SERVER is not None, "redis-server is not installed"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--daemonize", "no",
             "--protected-mode", "yes", "--loglevel", "warning"],
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.ping():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} on port {self.port}")
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within 10 s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def client(self) -> object:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=0)

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)  # a paused server must run to exit on SIGTERM
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@contextlib.contextmanager
def running_server(directory: Path) -> Iterator[RedisServer]:
    """A started server; afterwards stopped, with no ``redis-server`` process left in ``directory``
    (and kiln's once-per-process warning about a failing remote re-armed for the next test)."""
    from triton_kiln.remote.health import forget_warnings

    forget_warnings()
    server = RedisServer(directory).start()
    try:
        yield server
    finally:
        server.stop()
        left = server_processes(directory)
        assert not left, f"redis-server processes left: {[p.pid for p in left]}"

"""The plumbing kiln's child processes share: how they are born and how they frame messages.

* :func:`spawn_kiln_process` starts a *fresh* interpreter (never a fork of the caller, which may
  hold threads and a CUDA context) that inherits exactly one socket, its channel;
  :func:`set_parent_death_signal` makes such a child die with its parent.
* On a stream socket each message is an 8-byte big-endian length and that many bytes of
  pickle: :func:`encode` writes one, :func:`recv_frame` reads one (blocking), and
  :class:`FrameReader` decodes them incrementally from a non-blocking socket.

Only kiln's own processes sit on either end and they run the same code, so pickle is safe here;
nothing read from *disk* is ever unpickled. Used by the benchmark sandbox (:mod:`kiln.sandbox`),
which must not depend on the compile pool.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

_HEADER = struct.Struct(">Q")
_PR_SET_PDEATHSIG = 1


def encode(message: Any) -> bytes:
    """One frame: the length of the pickled message, then the pickle."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def recv_frame(sock: socket.socket) -> Any:
    """Blocking read of one frame; raises ``EOFError`` when the peer closed the socket."""
    (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return pickle.loads(_recv_exact(sock, length))


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class FrameReader:
    """Incremental decoder for a non-blocking stream socket."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the payloads of every frame now complete."""
        self._buffer += data
        frames: list[bytes] = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append(bytes(self._buffer[_HEADER.size : end]))
            del self._buffer[:end]
        return frames


def set_parent_death_signal(expected_parent: int, sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` when our parent dies; exit now if it already has.

    Linux only. The signal follows the *thread* that created us, so kiln always creates
    processes from a thread that lives as long as the process it creates.
    """
    if not sys.platform.startswith("linux"):  # pragma: no cover - kiln runs on Linux
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(errno)}")
    if os.getppid() != expected_parent:
        os._exit(0)  # the parent died before the signal was armed


def spawn_kiln_process(
    entry_module: str,
    channel_fd: int,
    env: dict[str, str],
    fd_variable: str,
    parent_variable: str,
    stdout: Any,
    stderr: Any,
) -> subprocess.Popen[bytes]:
    """Start ``python -c "from <entry_module> import main; main()"``: a fresh interpreter.

    The child finds kiln on its path, inherits ``channel_fd`` only, and learns both through
    ``env``: the fd in ``fd_variable``, this process's pid in ``parent_variable`` (for its
    parent-death check).
    """
    env = dict(env)
    env[fd_variable] = str(channel_fd)
    env[parent_variable] = str(os.getpid())
    kiln_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (kiln_root, env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", f"from {entry_module} import main; main()"],
        pass_fds=[channel_fd],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        close_fds=True,
    )

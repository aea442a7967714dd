"""Messages between kiln's processes, and how they are framed on the wire.

Two kinds of channel exist (see :mod:`kiln.pool` for the whole picture):

* parent <-> zygote: an ``AF_UNIX``/``SOCK_SEQPACKET`` socket. Each packet is one pickled
  tuple; ``fork`` packets carry the new worker's file descriptors (``SCM_RIGHTS``).
* parent <-> worker: an ``AF_UNIX``/``SOCK_STREAM`` socket per worker. Each message is an
  8-byte big-endian length followed by that many bytes of pickle. Messages can be large (a
  cubin plus its IRs), so the parent reads them incrementally with :class:`FrameReader`.

Only kiln's own processes sit on either end, and they run the same code, so pickle is safe
here; nothing read from *disk* is ever unpickled.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct(">Q")
MAX_FRAME = 1 << 32

# parent -> zygote
Z_PRELOAD = "preload"  # (Z_PRELOAD, [module, ...])
Z_FORK = "fork"  # (Z_FORK, worker_id)  + fds [channel, stderr]
Z_KILL = "kill"  # (Z_KILL, pid)
Z_EXIT = "exit"  # (Z_EXIT,)
# zygote -> parent
Z_READY = "ready"  # (Z_READY, info dict)
Z_PRELOADED = "preloaded"  # (Z_PRELOADED, {module: error-or-None})
Z_FORKED = "forked"  # (Z_FORKED, worker_id, pid)
Z_FORK_FAILED = "fork_failed"  # (Z_FORK_FAILED, worker_id, reason)
Z_EXITED = "exited"  # (Z_EXITED, pid, returncode)  returncode < 0: killed by signal -returncode

# parent -> worker
W_JOB = "job"  # (W_JOB, job_id, request_bytes)
# worker -> parent
W_HELLO = "hello"  # (W_HELLO, pid)
W_OK = "ok"  # (W_OK, job_id, artifact, seconds)
W_ERR = "err"  # (W_ERR, job_id, exception-or-None, type name, message, traceback text, seconds)


def encode(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def send_frame(sock: socket.socket, message: Any) -> None:
    sock.sendall(encode(message))


def recv_frame(sock: socket.socket) -> Any:
    """Blocking read of one frame; raises ``EOFError`` when the peer closed the socket."""
    header = _recv_exact(sock, _HEADER.size)
    (length,) = _HEADER.unpack(header)
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

    @property
    def pending(self) -> int:
        return len(self._buffer)

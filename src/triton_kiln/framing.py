"""Length-prefixed pickle frames on a stream socket: how kiln's processes exchange messages.

Each frame is an 8-byte big-endian length followed by that many bytes of pickle. Messages can
be large (a cubin plus its IRs), so a non-blocking reader decodes them incrementally with
:class:`FrameReader`; a blocking one calls :func:`recv_frame`. Used by the compile pool's
workers and by the benchmark sandbox, which share nothing else.

Only kiln's own processes sit on either end, and they run the same code, so pickle is safe
here; nothing read from *disk* is ever unpickled.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct(">Q")


def encode(message: Any) -> bytes:
    """One frame holding ``message``."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


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

"""RESP2, the Redis protocol, as kiln speaks it: commands encoded, replies read under bounds.

kiln sends a handful of commands (``AUTH``, ``SELECT``, ``GET``, ``SET``, ``HGETALL``, ``HSET``,
``DEL``, ``EXPIRE``, ``MULTI``/``EXEC``), so it reads their replies itself rather than through a
general client that reads every reply whole, with a time-out per socket read. A
:class:`ReplyReader` reads one request's replies from one socket with:

* one **deadline** for the whole request: each ``recv`` waits at most until it, so a server that
  sends a byte at a time still ends the request at the deadline (:class:`ServerFault`);
* a **byte budget**: a bulk string's declared length is checked against what is left of the
  budget before a byte of it is read, so an oversized entry costs its header, not its size
  (:class:`EntryRefused`; the rest of the reply is never read and the connection is closed);
* bounds on line length, array length and nesting (kiln's replies nest at most two deep).

Anything that is not RESP2 is a :class:`ServerFault`: the server, not one of its entries, is
broken. The reader never raises anything else.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import TypeAlias

MAX_LINE = 64 << 10
"""Longest header or simple reply line read (error messages included)."""
MAX_ELEMENTS = 4096
"""Most elements in one array reply (an artifact entry's hash holds about ten fields)."""
MAX_DEPTH = 2
"""Deepest nesting of arrays (``EXEC``'s array of replies)."""
_CHUNK = 64 << 10


class ServerFault(Exception):
    """The server did not answer as Redis does: unreachable, too slow, closed, or not RESP2."""


class EntryRefused(Exception):
    """The server answered, but with nothing kiln may use at this key (too large, wrong type)."""


@dataclass(frozen=True)
class Status:
    """A simple-string reply (``+OK``, ``+QUEUED``)."""

    text: str


@dataclass(frozen=True)
class Error:
    """An error reply (``-WRONGTYPE ...``, ``-NOAUTH ...``)."""

    message: str


Reply: TypeAlias = bytes | int | Status | Error | list["Reply"] | None


def encode(*args: bytes | str | int) -> bytes:
    """One command as a RESP2 array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts += [b"$%d\r\n" % len(data), data, b"\r\n"]
    return b"".join(parts)


class ReplyReader:
    """Replies of one request from ``sock``, read by ``deadline`` (``time.monotonic()``)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buf = bytearray()

    def read(self, budget: int) -> Reply:
        """The next reply; its bulk strings together at most ``budget`` bytes."""
        reply, _ = self._reply(budget, 0)
        return reply

    def _reply(self, budget: int, depth: int) -> tuple[Reply, int]:
        line = self._line()
        kind, rest = line[:1], bytes(line[1:])
        if kind == b"+":
            return Status(rest.decode("utf-8", "replace")), budget
        if kind == b"-":
            return Error(rest.decode("utf-8", "replace")), budget
        if kind == b":":
            return _integer(rest), budget
        if kind == b"$":
            size = _integer(rest)
            if size == -1:
                return None, budget
            if size < 0:
                raise ServerFault(f"a bulk string of length {size}")
            if size > budget:
                raise EntryRefused(
                    f"it declares {size} bytes, over the {budget} KILN_REMOTE_MAX_ENTRY_MB leaves; not read"
                )
            data = self._exactly(size + 2)
            if data[-2:] != b"\r\n":
                raise ServerFault("a bulk string not ended by CRLF")
            return bytes(data[:-2]), budget - size
        if kind == b"*":
            count = _integer(rest)
            if count == -1:
                return None, budget
            if not 0 <= count <= MAX_ELEMENTS or depth >= MAX_DEPTH:
                raise ServerFault(f"an array of {count} elements at depth {depth + 1}")
            items: list[Reply] = []
            for _ in range(count):
                item, budget = self._reply(budget, depth + 1)
                items.append(item)
            return items, budget
        raise ServerFault(f"a reply starting with {bytes(line[:16])!r}, which is not RESP2")

    # -- bytes from the socket, by the deadline ----------------------------------------------

    def _line(self) -> bytearray:
        start = 0
        while True:
            end = self._buf.find(b"\r\n", start)
            if end >= 0:
                line = self._buf[:end]
                del self._buf[: end + 2]
                return line
            if len(self._buf) > MAX_LINE:
                raise ServerFault(f"a reply line longer than {MAX_LINE} bytes")
            start = max(0, len(self._buf) - 1)
            self._buf += self._recv(_CHUNK)

    def _exactly(self, size: int) -> bytearray:
        if len(self._buf) >= size:
            data = self._buf[:size]
            del self._buf[:size]
            return data
        data = bytearray(size)
        have = len(self._buf)
        data[:have] = self._buf
        self._buf = bytearray()
        view = memoryview(data)
        while have < size:
            self._wait()
            try:
                got = self._sock.recv_into(view[have:], min(size - have, 1 << 20))
            except TimeoutError as exc:
                raise ServerFault("no complete reply within the time-out (KILN_REMOTE_TIMEOUT_S)") from exc
            except OSError as exc:
                raise ServerFault(f"{type(exc).__name__}: {exc}") from exc
            if got == 0:
                raise ServerFault("the server closed the connection mid-reply")
            have += got
        return data

    def _recv(self, size: int) -> bytes:
        self._wait()
        try:
            data = self._sock.recv(size)
        except TimeoutError as exc:
            raise ServerFault("no complete reply within the time-out (KILN_REMOTE_TIMEOUT_S)") from exc
        except OSError as exc:
            raise ServerFault(f"{type(exc).__name__}: {exc}") from exc
        if not data:
            raise ServerFault("the server closed the connection")
        return data

    def _wait(self) -> None:
        """Let the next ``recv`` wait only until the deadline."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise ServerFault("no complete reply within the time-out (KILN_REMOTE_TIMEOUT_S)")
        self._sock.settimeout(left)


def _integer(text: bytes) -> int:
    digits = text[1:] if text[:1] == b"-" else text
    if not 0 < len(digits) <= 19 or not digits.isdigit():
        raise ServerFault(f"{text[:24]!r} where an integer belongs")
    return int(text)

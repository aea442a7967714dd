"""The one module that sends requests to Redis, and the judge of every reply.

:class:`RedisClient` holds a few idle :class:`~triton_kiln.remote.connection.Connection` objects
(kiln's own RESP2 client, :mod:`triton_kiln.remote.resp`: a deadline per request, sizes refused
from their declared length). Every request goes through :meth:`RedisClient._request`, which
asks the :class:`~triton_kiln.remote.health.CircuitBreaker` first and sorts each outcome by who
is at fault:

* **the server** (refused or timed-out connection, a reply not done by the deadline, a reply
  that is not RESP2 or not of the type the command returns, an error reply other than
  ``WRONGTYPE``): no answer; a read is a miss, a write is dropped, and the breaker opens (one
  warning per process);
* **one key** (a value over the size limit, a key holding another type): :class:`EntryRefused`
  for the caller to report as that key's miss; the breaker stays closed, and the next verified
  local result overwrites the key;
* an answer of the right shape: returned, for :mod:`triton_kiln.remote.records` to validate.

Nothing here raises because of the server, other than :class:`EntryRefused` from a read.

What is stored (names: :mod:`triton_kiln.remote.names`):

* an artifact entry: a Redis hash ``{file name: bytes}`` written in one ``MULTI`` (``DEL``,
  ``HSET``, ``EXPIRE``), so a reader sees the old entry or the new one, never half of one;
* a finished tuning run: a string (JSON), written with ``SET ... EX``.

Each hit renews its key's TTL (a sliding expiry: entries in use stay, unused ones expire).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from triton_kiln.redis_url import redacted_url
from triton_kiln.remote.connection import Address, Command, Connection, describe
from triton_kiln.remote.health import CircuitBreaker
from triton_kiln.remote.resp import EntryRefused, Error, Reply, ServerFault, Status

__all__ = ["EntryRefused", "RedisClient"]

T = TypeVar("T")
_MAX_IDLE = 8
_WRITES = ("EXEC", "SET")
_SMALL = 1 << 10
"""Byte budget of replies that carry no value (writes, ``EXPIRE``)."""


class RedisClient:
    """Requests to one Redis server, each ended by one deadline and guarded by the breaker."""

    def __init__(self, url: str, *, timeout_s: float, retry_s: float) -> None:
        self.url = url
        self.where = redacted_url(url)
        self.address = Address.from_url(url)
        self.timeout_s = timeout_s
        self.breaker = CircuitBreaker(self.where, retry_s)
        self._idle: list[Connection] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _request(
        self, action: str, commands: list[Command], budget: int, parse: Callable[[list[Reply]], T]
    ) -> T | None:
        """``parse(replies)``, or ``None`` if the breaker is open or the server is at fault."""
        if not self.breaker.allow():
            return None
        deadline = time.monotonic() + self.timeout_s
        try:
            answer = self._exchange(commands, budget, parse, deadline)
        except EntryRefused as exc:
            if commands[-1][0] in _WRITES:  # a write's reply carries no entry: the server is at fault
                self.breaker.failed(action, exc)
                return None
            self.breaker.succeeded()
            raise
        except ServerFault as exc:
            self.breaker.failed(action, exc)
            return None
        except Exception as exc:  # a reply no rule above foresaw: the server's fault, not the caller's
            self.breaker.failed(action, exc)
            return None
        self.breaker.succeeded()
        return answer

    def _exchange(
        self, commands: list[Command], budget: int, parse: Callable[[list[Reply]], T], deadline: float
    ) -> T:
        conn = self._take()
        reused = conn is not None
        while True:
            if conn is None:
                conn = Connection.open(self.address, deadline)
            try:
                answer = parse(conn.request(commands, deadline, budget))
            except ServerFault:
                conn.close()
                if reused and time.monotonic() < deadline:  # an idle connection the server dropped
                    conn, reused = None, False
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            self._give(conn)
            return answer

    def _take(self) -> Connection | None:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's sockets are the parent's to use
                self._idle, self._pid = [], os.getpid()
            return self._idle.pop() if self._idle else None

    def _give(self, conn: Connection) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    # -- hashes: artifact entries -----------------------------------------------------------

    def read_hash(self, name: str, ttl_s: int | None, max_bytes: int) -> dict[bytes, bytes] | None:
        """The hash ``name`` (``None``: missing, or no answer); its TTL renewed. Raises
        :class:`EntryRefused` if it holds more than ``max_bytes`` or is not a hash."""

        def parse(replies: list[Reply]) -> dict[bytes, bytes] | None:
            _expired(replies[1:], "EXPIRE")
            fields = _value(replies[0], "HGETALL", list)
            if len(fields) % 2 or not all(isinstance(item, bytes) for item in fields):
                raise ServerFault("HGETALL was answered with an array that is not field-value pairs")
            pairs = [item for item in fields if isinstance(item, bytes)]
            return dict(zip(pairs[::2], pairs[1::2], strict=True)) or None

        return self._request("read an entry", [("HGETALL", name), *_expire(name, ttl_s)], max_bytes, parse)

    def write_hash(self, name: str, fields: Mapping[str, bytes], ttl_s: int | None) -> bool:
        """Replace the hash ``name`` by ``fields`` atomically; whether the server took it."""
        pairs = [part for field, data in fields.items() for part in (field, data)]
        queued: list[Command] = [("DEL", name), ("HSET", name, *pairs), *_expire(name, ttl_s)]
        return bool(self._request("write an entry", _transaction(queued), _SMALL, _committed(len(queued))))

    # -- strings: tuning runs ---------------------------------------------------------------

    def read_value(self, name: str, ttl_s: int | None, max_bytes: int) -> bytes | None:
        """The string ``name`` (``None``: missing, or no answer); its TTL renewed. Raises
        :class:`EntryRefused` if it holds more than ``max_bytes`` or is not a string."""

        def parse(replies: list[Reply]) -> bytes | None:
            _expired(replies[1:], "EXPIRE")
            return None if replies[0] is None else _value(replies[0], "GET", bytes)

        return self._request("read a tuning run", [("GET", name), *_expire(name, ttl_s)], max_bytes, parse)

    def write_value(self, name: str, value: bytes, ttl_s: int | None) -> bool:
        command: Command = ("SET", name, value) if ttl_s is None else ("SET", name, value, "EX", ttl_s)
        return bool(self._request("write a tuning run", [command], _SMALL, _status_ok))

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _expire(name: str, ttl_s: int | None) -> list[Command]:
    return [] if ttl_s is None else [("EXPIRE", name, ttl_s)]


def _value(reply: Reply, command: str, kind: type[T]) -> T:
    """``reply`` if it is a ``kind``; a ``WRONGTYPE`` error is the key's, anything else the server's."""
    if isinstance(reply, Error) and reply.message.startswith("WRONGTYPE"):
        raise EntryRefused("the key holds another type of value")
    if not isinstance(reply, kind):
        raise ServerFault(f"{command} was answered {describe(reply)}")
    return reply


def _expired(replies: list[Reply], command: str) -> None:
    for reply in replies:
        if not isinstance(reply, int):
            raise ServerFault(f"{command} was answered {describe(reply)}")


def _status_ok(replies: list[Reply]) -> bool:
    if replies[0] != Status("OK"):
        raise ServerFault(f"SET was answered {describe(replies[0])}")
    return True


def _transaction(queued: list[Command]) -> list[Command]:
    return [("MULTI",), *queued, ("EXEC",)]


def _committed(count: int) -> Callable[[list[Reply]], bool]:
    """The check of a ``MULTI`` ... ``EXEC`` of ``count`` commands: each queued, each done."""

    def parse(replies: list[Reply]) -> bool:
        multi, *queued, done = replies
        wanted = [Status("OK")] + [Status("QUEUED")] * len(queued)
        for reply, want in zip((multi, *queued), wanted, strict=True):
            if reply != want:
                raise ServerFault(f"MULTI was answered {describe(reply)}")
        if not isinstance(done, list) or len(done) != count or any(isinstance(r, Error) for r in done):
            raise ServerFault(f"EXEC was answered {describe(done)}")
        return True

    return parse

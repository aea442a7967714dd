"""One connection to a Redis server: the URL's address, TCP, TLS or a Unix socket, ``AUTH`` and
``SELECT``, and requests that each end by one deadline.

::

    Connection.open(address, deadline)   connect (TLS handshake for rediss://), AUTH, SELECT
    Connection.request(commands, deadline, budget)
        -> all commands sent at once (a pipeline) -> one reply each, read by ReplyReader
           (resp.py) under the same deadline and byte budget

A connection that saw a :class:`~triton_kiln.remote.resp.ServerFault` or an
:class:`~triton_kiln.remote.resp.EntryRefused` may hold unread bytes: its owner closes it and
opens a new one (:class:`~triton_kiln.remote.client.RedisClient` does).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from triton_kiln.remote.resp import EntryRefused, Error, Reply, ReplyReader, ServerFault, Status, encode

Command = tuple[bytes | str | int, ...]


@dataclass(frozen=True)
class Address:
    """Where a ``KILN_REMOTE_CACHE`` URL points, and how to log in."""

    host: str | None
    port: int
    unix_path: str | None
    tls: bool
    db: int
    username: str | None
    password: str | None

    @classmethod
    def from_url(cls, url: str) -> Address:
        """The address of ``redis://[user:password@]host:port/db``, ``rediss://...``,
        ``unix:///path.sock?db=0`` (already checked by :mod:`triton_kiln.settings`)."""
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        db_text = query.get("db", ["0"])[0] if parts.scheme == "unix" else parts.path.lstrip("/") or "0"
        return cls(
            host=None if parts.scheme == "unix" else parts.hostname,
            port=parts.port or 6379,
            unix_path=parts.path if parts.scheme == "unix" else None,
            tls=parts.scheme == "rediss",
            db=int(db_text),
            username=unquote(parts.username) if parts.username else None,
            password=None if parts.password is None else unquote(parts.password),
        )


class Connection:
    """A socket to the server, logged in and on the URL's database."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    @classmethod
    def open(cls, address: Address, deadline: float) -> Connection:
        sock = _connect(address, deadline)
        conn = cls(sock)
        try:
            login: list[Command] = []
            if address.password is not None:
                user = () if address.username is None else (address.username,)
                login.append(("AUTH", *user, address.password))
            if address.db:
                login.append(("SELECT", address.db))
            for reply in conn.request(login, deadline, budget=1024) if login else []:
                if not isinstance(reply, Status):
                    raise ServerFault(f"logging in was answered {describe(reply)}")
        except EntryRefused as exc:
            conn.close()
            raise ServerFault(f"logging in was answered with {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def request(self, commands: list[Command], deadline: float, budget: int) -> list[Reply]:
        """One reply per command; bulk strings of all of them together at most ``budget`` bytes."""
        payload = b"".join(encode(*command) for command in commands)
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerFault("no time left for the request (KILN_REMOTE_TIMEOUT_S)")
        try:
            self._sock.settimeout(left)
            self._sock.sendall(payload)
        except TimeoutError as exc:
            raise ServerFault("the request could not be sent within the time-out") from exc
        except OSError as exc:
            raise ServerFault(f"{type(exc).__name__}: {exc}") from exc
        reader = ReplyReader(self._sock, deadline)
        replies: list[Reply] = []
        for _ in commands:
            reply = reader.read(budget)
            if isinstance(reply, bytes):
                budget -= len(reply)
            elif isinstance(reply, list):
                budget -= sum(len(item) for item in reply if isinstance(item, bytes))
            replies.append(reply)
        return replies

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def describe(reply: Reply) -> str:
    """A reply, for a message (never its contents, which may be large or secret)."""
    if isinstance(reply, Error):
        return f"with the error {reply.message[:200]!r}"
    if isinstance(reply, Status):
        return f"with the status {reply.text[:40]!r}"
    if isinstance(reply, list):
        return f"with an array of {len(reply)}"
    if reply is None:
        return "with nil"
    return f"with {'an integer' if isinstance(reply, int) else 'a string'}"


def _connect(address: Address, deadline: float) -> socket.socket:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ServerFault("no time left to connect (KILN_REMOTE_TIMEOUT_S)")
    try:
        if address.unix_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(left)
                sock.connect(address.unix_path)
            except BaseException:
                sock.close()
                raise
            return sock
        assert address.host is not None
        sock = socket.create_connection((address.host, address.port), timeout=left)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not address.tls:
            return sock
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            return ssl.create_default_context().wrap_socket(sock, server_hostname=address.host)
        except BaseException:
            sock.close()
            raise
    except TimeoutError as exc:
        raise ServerFault("could not connect within the time-out (KILN_REMOTE_TIMEOUT_S)") from exc
    except OSError as exc:  # refused, unreachable, a name that does not resolve, TLS refused
        raise ServerFault(f"{type(exc).__name__}: {exc}") from exc

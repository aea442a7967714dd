"""Servers on 127.0.0.1 that speak to kiln as a broken or hostile Redis would, for tests.

:class:`LyingServer` accepts connections on a free port and answers each command by its kind:

* ``"ok"``: ``+OK`` to everything (a misconfigured proxy, a port another service reuses);
* ``"integer"``: ``HGETALL``/``GET`` answered with an integer, and ``EXEC`` too (the write path);
* ``"bulk"``: ``HGETALL`` answered with a bulk string, ``GET`` with an array;
* ``"map-with-integer"``: ``HGETALL`` answered with a field whose value is an integer;
* ``"integer-exec"``: reads answered as Redis does for a missing key, writes (``EXEC``,
  ``SET``) with an integer: only the write path, on the pool's manager thread, meets the lie;
* ``"dribble"``: every reply a long bulk string, one byte every 0.25 s (for up to 30 s);
* ``"silent"``: reads every command and never answers.

Commands inside ``MULTI`` are answered ``+QUEUED`` (except by ``"ok"``, ``"dribble"`` and
``"silent"``), so the write path reaches its ``EXEC``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

WRONG_TYPES = ("ok", "integer", "bulk", "map-with-integer", "integer-exec")
"""Servers that answer at once, with replies of types the commands never return."""
KINDS = (*WRONG_TYPES, "dribble", "silent")

_READS = {
    "integer": {b"HGETALL": b":7\r\n", b"GET": b":7\r\n", b"EXEC": b":1\r\n"},
    "bulk": {b"HGETALL": b"$3\r\nabc\r\n", b"GET": b"*1\r\n$1\r\na\r\n", b"EXEC": b"$2\r\nok\r\n"},
    "map-with-integer": {
        b"HGETALL": b"*2\r\n$13\r\nartifact.json\r\n:5\r\n",
        b"GET": b"*2\r\n$1\r\na\r\n:1\r\n",
        b"EXEC": b"*1\r\n*1\r\n:1\r\n",
    },
    "integer-exec": {b"HGETALL": b"*0\r\n", b"GET": b"$-1\r\n", b"EXPIRE": b":0\r\n", b"EXEC": b":3\r\n"},
}


def _commands(conn: socket.socket) -> object:
    """Each command the client sends, as a list of its arguments (until it closes)."""
    buf = b""

    def line() -> bytes:
        nonlocal buf
        while b"\r\n" not in buf:
            data = conn.recv(65536)
            if not data:
                raise EOFError
            buf += data
        head, buf = buf.split(b"\r\n", 1)
        return head

    def exactly(size: int) -> bytes:
        nonlocal buf
        while len(buf) < size + 2:
            data = conn.recv(65536)
            if not data:
                raise EOFError
            buf += data
        data, buf = buf[:size], buf[size + 2 :]
        return data

    while True:
        count = int(line()[1:])
        yield [exactly(int(line()[1:])) for _ in range(count)]


class LyingServer:
    def __init__(self, kind: str) -> None:
        assert kind in KINDS, kind
        self.kind = kind
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # accept() wakes to see stop()
        self.port = self._listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self.commands: list[bytes] = []
        """Names of the commands received, in order."""
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        in_multi = False
        try:
            for command in _commands(conn):  # type: ignore[attr-defined]
                name = command[0].upper()
                self.commands.append(name)
                if self.kind == "silent":
                    continue
                if self.kind == "ok":
                    conn.sendall(b"+OK\r\n")
                elif self.kind == "dribble":
                    self._dribble(conn)
                elif name == b"MULTI":
                    in_multi = True
                    conn.sendall(b"+OK\r\n")
                elif in_multi and name != b"EXEC":
                    conn.sendall(b"+QUEUED\r\n")
                else:
                    in_multi = False
                    conn.sendall(_READS[self.kind].get(name, b":1\r\n"))
        except (EOFError, OSError, ValueError):
            pass
        finally:
            conn.close()

    def _dribble(self, conn: socket.socket) -> None:
        reply = b"$1000\r\n" + b"x" * 1000 + b"\r\n"
        ends = time.monotonic() + 30
        for i in range(len(reply)):
            if self._stopped.is_set() or time.monotonic() > ends:
                raise EOFError
            conn.sendall(reply[i : i + 1])
            time.sleep(0.25)

    def stop(self) -> None:
        self._stopped.set()
        self._threads[0].join(timeout=5)
        self._listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> LyingServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

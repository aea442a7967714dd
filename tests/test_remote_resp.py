"""kiln's RESP2 reader on its own, over a socket pair: every reply that is not RESP2, breaks a
bound, or comes too slowly is a :class:`ServerFault`; a value over the byte budget is an
:class:`EntryRefused` read no further than its header."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from triton_kiln.remote.resp import EntryRefused, Error, ReplyReader, ServerFault, Status, encode


def read(data: bytes, budget: int = 1 << 20, deadline_s: float = 2.0) -> object:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(data)
        theirs.shutdown(socket.SHUT_WR)
        return ReplyReader(ours, time.monotonic() + deadline_s).read(budget)


@pytest.mark.parametrize(
    ("data", "reply"),
    [
        (b"+OK\r\n", Status("OK")),
        (b"-WRONGTYPE no\r\n", Error("WRONGTYPE no")),
        (b":-12\r\n", -12),
        (b"$3\r\nabc\r\n", b"abc"),
        (b"$-1\r\n", None),
        (b"*2\r\n$1\r\na\r\n:1\r\n", [b"a", 1]),
        (b"*1\r\n*1\r\n:1\r\n", [[1]]),
    ],
)
def test_replies_of_each_type_are_read(data: bytes, reply: object) -> None:
    assert read(data) == reply


@pytest.mark.parametrize(
    "data",
    [
        b"%1\r\n",  # RESP3, never asked for
        b":1x\r\n",
        b":--1\r\n",
        b"$3\r\nabcd\r\n",  # not ended by CRLF
        b"$-5\r\n",
        b"*4097\r\n",  # more elements than any reply kiln asks for
        b"*1\r\n*1\r\n*1\r\n:1\r\n",  # nested three deep
        b"+" + b"x" * (70 << 10),  # a line that never ends
        b"$10\r\nabc",  # closed mid-reply
    ],
)
def test_anything_else_is_the_servers_fault(data: bytes) -> None:
    with pytest.raises(ServerFault):
        read(data)


def test_a_value_over_the_budget_is_refused_from_its_header() -> None:
    with pytest.raises(EntryRefused, match="declares 1073741824 bytes"):
        read(b"$1073741824\r\n", budget=16 << 20)  # no body sent: never waited for
    with pytest.raises(EntryRefused):  # the budget covers all the bulk strings of a reply
        read(b"*2\r\n$6\r\nabcdef\r\n$6\r\nabcdef\r\n", budget=10)


def test_a_dribbling_reply_ends_at_the_deadline() -> None:
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def dribble() -> None:
        for byte in b"$1000\r\n" + b"x" * 1000:
            if stop.wait(0.05):
                return
            theirs.sendall(bytes([byte]))

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        with pytest.raises(ServerFault, match="KILN_REMOTE_TIMEOUT_S"):
            ReplyReader(ours, started + 0.3).read(1 << 20)
        assert time.monotonic() - started < 0.6
    finally:
        stop.set()
        thread.join(timeout=5)
        ours.close()
        theirs.close()


def test_commands_are_arrays_of_bulk_strings() -> None:
    assert encode("SET", b"k\r\n", 5) == b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$1\r\n5\r\n"

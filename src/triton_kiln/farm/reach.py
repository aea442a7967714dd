"""Whether a Ray address answers, asked before ``ray.init`` is asked to join it.

``ray.init(address="host:port")`` on an address where no cluster runs does not fail: Ray's C++
client retries for minutes, printing ``Failed to get cluster ID ... TimedOut`` lines. So before
joining an explicit ``host:port`` (or ``ray://host:port``), :func:`check_address` resolves the
host and opens a TCP connection to the port, each step waiting at most :data:`PROBE_TIMEOUT_S`,
and raises kiln's :class:`~triton_kiln.farm.errors.FarmError` naming the step that failed: the name
does not resolve, nothing listens there (connection refused), or no answer in time (a host that
drops packets, a firewall). Addresses Ray looks up itself (``None``: ``RAY_ADDRESS`` or a new local
cluster, ``"auto"``, ``"local"``) and ones that are not ``host:port`` (Ray refuses those at once)
are left to Ray. A port that answers is no proof that a Ray cluster listens there; it only turns
the common mistakes (a wrong host or port, a head that is not started) into one clear error.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from triton_kiln.farm.errors import FarmError

PROBE_TIMEOUT_S = 5.0
"""How long resolving the host, then connecting to the port, may each take (seconds)."""

ADVICE = "start one with `ray start --head` and pass its address (host:port)"
"""The end of every "could not join the Ray cluster" message."""


def join_error(address: str, reason: str) -> FarmError:
    """kiln's error for a cluster at ``address`` that cannot be joined, for ``reason``."""
    return FarmError(f"could not join the Ray cluster at {address}: {reason}; {ADVICE}")


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port``, ``[v6 host]:port`` or ``ray://host:port``; ``None`` for
    anything else (Ray's own lookups, other schemes, malformed text: Ray answers those itself)."""
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or "://" in host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None  # an IPv6 address without brackets: not Ray's format
    if not 0 < int(port) < 65536:
        raise join_error(address, f"{port} is not a TCP port (1-65535)")
    return host, int(port)


def check_address(address: str | None, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`FarmError` unless the ``host:port`` of ``address`` resolves and takes a TCP
    connection, each within ``timeout_s``; addresses Ray looks up itself pass unchecked."""
    target = host_port(address) if address is not None else None
    if address is None or target is None:
        return
    host, port = target
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    infos = _resolve(address, host, port, timeout_s)
    deadline = time.monotonic() + timeout_s
    last: OSError | None = None
    for family, kind, proto, sockaddr in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(left)
            try:
                sock.connect(sockaddr)
            except OSError as exc:
                last = exc
                continue
        return
    if isinstance(last, ConnectionRefusedError):
        raise join_error(address, f"nothing listens on {where} (connection refused)")
    if last is None or isinstance(last, TimeoutError):
        raise join_error(address, f"{where} did not answer within {timeout_s:g} s (connection timed out)")
    raise join_error(address, f"cannot connect to {where} ({last.strerror or last})")


_Endpoint = tuple[socket.AddressFamily, socket.SocketKind, int, tuple[Any, ...]]
"""What to connect to: family, socket type, protocol, socket address (``getaddrinfo``'s rows)."""


def _resolve(address: str, host: str, port: int, timeout_s: float) -> list[_Endpoint]:
    """``getaddrinfo`` of ``host:port`` (TCP), given ``timeout_s`` at most: it has no timeout of
    its own, so it runs in a daemon thread that is left behind if the resolver hangs."""
    result: list[list[_Endpoint]] = []
    failure: list[OSError] = []

    def lookup() -> None:
        try:
            rows = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result.append([(family, kind, proto, tuple(addr)) for family, kind, proto, _, addr in rows])
        except OSError as exc:
            failure.append(exc)

    thread = threading.Thread(target=lookup, name="kiln-ray-resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if result and result[0]:
        return result[0]
    if failure:
        text = failure[0].strerror or str(failure[0])
        raise join_error(address, f"the host name {host} does not resolve ({text})")
    if thread.is_alive():
        raise join_error(address, f"resolving the host name {host} took more than {timeout_s:g} s")
    raise join_error(address, f"the host name {host} resolves to no address")

"""The Redis URL of ``KILN_REMOTE_CACHE``: checked when the settings are read, shown without its
password wherever kiln prints it.

Kept apart from :mod:`triton_kiln.remote`, which is imported only once a remote cache is in use:
the settings check a URL (and ``kiln settings`` shows one) without loading the client.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

SCHEMES = ("redis", "rediss", "unix")
"""``redis://`` (TCP), ``rediss://`` (TLS), ``unix://`` (a local socket)."""

EXPECTED = "a Redis URL: redis://host:port/db, rediss://... or unix:///path.sock"
"""What a URL must look like, in the words of the error a malformed one raises."""


def parse_redis_url(value: str) -> str:
    """``value`` stripped, if it is a Redis URL kiln can use; :class:`ValueError` if it is not."""
    parts = urlsplit(value.strip())
    if parts.scheme not in SCHEMES:
        raise ValueError(value)
    if parts.scheme == "unix" and not parts.path:
        raise ValueError(value)
    if parts.scheme != "unix" and (not parts.hostname or not _db_number(parts.path)):
        raise ValueError(value)
    _ = parts.port  # a malformed port raises ValueError
    return value.strip()


def url_problem(value: object) -> str | None:
    """Why ``value`` is not a usable Redis URL (``None``: it is one)."""
    try:
        if isinstance(value, str):
            parse_redis_url(value)
            return None
    except ValueError:
        pass
    return f"expected {EXPECTED}"


def redacted_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: how kiln shows ``KILN_REMOTE_CACHE``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _db_number(path: str) -> bool:
    """``/0``, ``/12`` or nothing: the database part of a Redis URL."""
    db = path.strip("/")
    return not db or (db.isascii() and db.isdigit())

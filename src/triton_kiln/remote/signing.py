"""Signatures on what kiln writes to the remote cache, with a key the machines share.

Without a key (``KILN_REMOTE_KEY_FILE`` unset) an entry read from Redis is checked for damage
and tampering with its files (the manifest's sizes and sha256s), but whoever can write to the
Redis database can write a consistent entry. With a key, every artifact entry and tuning run
kiln writes carries an HMAC-SHA256 over the Redis key's name and:

* for an artifact entry, its record (``artifact.json``): the record lists every file's sha256
  and size, and an entry holding a file the record does not list is refused, so the record's
  signature covers the whole entry;
* for a tuning run or a program record, its JSON (:func:`signed_value`).

A reader with a key loads only what carries a valid signature under that key; a missing or
wrong one is a miss with a :class:`~triton_kiln.artifacts.store.CacheWarning`. A reader without a key
ignores signatures. The key never leaves the machine: only signatures are written.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

FIELD = "kiln-signature"
"""The artifact hash's field holding the signature (never a file name kiln writes)."""
PREFIX = b"kiln-signature "
"""A signed value's (a tuning run's, a program record's) first line: this, the signature in hex,
a newline; then the JSON."""


class Signer:
    """HMAC-SHA256 with one key (the contents of ``KILN_REMOTE_KEY_FILE``)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        return cls(path.read_bytes())

    def sign(self, name: str, data: bytes) -> str:
        return hmac.new(self._key, name.encode() + b"\0" + data, hashlib.sha256).hexdigest()

    def verify(self, name: str, data: bytes, signature: bytes | str | None) -> bool:
        if signature is None:
            return False
        try:  # compare_digest takes ASCII strings only: anything else is no signature of kiln's
            given = signature if isinstance(signature, bytes) else signature.encode("ascii")
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(self.sign(name, data).encode(), given)


def signed_value(signer: Signer | None, name: str, data: bytes) -> bytes:
    """What is stored under ``name`` for ``data``: ``data`` itself without a key, else its
    signature's line (:data:`PREFIX`) and then ``data``."""
    if signer is None:
        return data
    return PREFIX + signer.sign(name, data).encode() + b"\n" + data


def split_signed(value: bytes) -> tuple[bytes | None, bytes]:
    """``(signature or None, payload)`` of a stored value (the inverse of :func:`signed_value`)."""
    if not value.startswith(PREFIX):
        return None, value
    line, _, payload = value.partition(b"\n")
    return line[len(PREFIX) :], payload

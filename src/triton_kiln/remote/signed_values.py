"""Values kiln writes whole and signed (with ``KILN_REMOTE_KEY_FILE``) under one name, and reads
back bounded and checked, a refused entry one warning: what program records, Inductor's template
timings and Inductor's best configs share."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.remote import records
from triton_kiln.remote.client import EntryRefused, RedisClient
from triton_kiln.remote.signing import Signer, signed_value

T = TypeVar("T")


class SignedValues:
    """Signed values on ``client``'s server, each kept ``ttl_s`` and read only up to
    ``max_entry_bytes``."""

    def __init__(
        self,
        client: RedisClient,
        *,
        ttl_s: int | None,
        signer: Signer | None = None,
        max_entry_bytes: int = 16 << 20,
    ) -> None:
        self.client = client
        self.where = client.where
        self.ttl_s = ttl_s
        self.signer = signer
        self.max_entry_bytes = max_entry_bytes
        self.published = 0
        """Values the server took."""

    def read(self, name: str) -> bytes | None:
        """The payload stored under ``name`` (``None``: none there, or the server unreachable);
        raises :class:`~triton_kiln.remote.client.EntryRefused` (over the size limit) or
        :class:`~triton_kiln.remote.records.BadEntry` (a malformed, missing or wrong signature)."""
        raw = self.client.read_value(name, self.ttl_s, self.max_entry_bytes)
        return None if raw is None else records.verified_payload(raw, name, self.signer)

    def read_checked(self, name: str, check: Callable[[bytes], T], refused: str) -> T | None:
        """``check(payload)`` of what :meth:`read` gives, or ``None``: nothing there, the server
        unreachable, or refused (too large, a bad signature, or ``check`` raised a ``ValueError``)
        with one :class:`CacheWarning` that says ``refused`` (what the entry was taken for, and
        what happens instead)."""
        try:
            payload = self.read(name)
            return None if payload is None else check(payload)
        except (EntryRefused, ValueError) as exc:  # BadEntry is a ValueError
            warnings.warn(
                f"kiln: the remote cache {self.where} holds {refused.format(name=name, exc=exc)}",
                CacheWarning,
                stacklevel=3,
            )
            return None

    def write(self, name: str, data: bytes) -> bool:
        """Store ``data`` under ``name``, signed; whether the server took it."""
        taken = self.client.write_value(name, signed_value(self.signer, name, data), self.ttl_s)
        if taken:
            self.published += 1
        return taken

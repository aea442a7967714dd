"""Values kiln writes whole and signed (with ``KILN_REMOTE_KEY_FILE``) under one name, and reads
back bounded and checked: what program records and Inductor's template timings share."""

from __future__ import annotations

from triton_kiln.remote import records
from triton_kiln.remote.client import RedisClient
from triton_kiln.remote.signing import Signer, signed_value


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

    def write(self, name: str, data: bytes) -> bool:
        """Store ``data`` under ``name``, signed; whether the server took it."""
        taken = self.client.write_value(name, signed_value(self.signer, name, data), self.ttl_s)
        if taken:
            self.published += 1
        return taken

"""Artifact-store entries in Redis: what :class:`~triton_kiln.artifacts.store.ArtifactStore` reads
through on a miss and writes to after each compile (its ``remote``).

::

    ArtifactStore.get(key)            local entry? -> verified read (entry.read_entry)
        miss -> RemoteArtifacts.fetch(key) -> {file name: bytes} or None
             -> ArtifactStore.adopt: files staged in a temporary directory, read back by
                entry.read_entry (manifest, sizes, sha256, binary checksum), renamed into
                place only if they pass; else a CacheWarning and a miss (compiled here)
    ArtifactStore.put(artifact)       written locally, read back verified
        -> RemoteArtifacts.publish(key, files)   unless the entry is over the size limit

The remote holds exactly the files of the local entry (``artifact.json`` with its manifest,
Triton's metadata, the binary, the text IRs): nothing is unpickled, nothing is trusted before
the local reader has checked it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping

from triton_kiln.artifacts.record import RECORD
from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.remote import records
from triton_kiln.remote.client import EntryRefused, RedisClient
from triton_kiln.remote.names import artifact_name
from triton_kiln.remote.records import BadEntry
from triton_kiln.remote.signing import FIELD, Signer

log = logging.getLogger("kiln.remote")


class RemoteArtifacts:
    """The artifact entries of one remote cache (implements the store's ``RemoteEntries``)."""

    def __init__(
        self, client: RedisClient, *, max_entry_bytes: int, ttl_s: int | None, signer: Signer | None = None
    ) -> None:
        self.client = client
        self.signer = signer
        """Signs what is written and checks what is read (``KILN_REMOTE_KEY_FILE``;
        triton_kiln.remote.signing)."""
        self.where = client.where
        self.max_entry_bytes = max_entry_bytes
        self.ttl_s = ttl_s
        self.fetched = 0
        """Entries read from the remote (verified or not: the store decides)."""
        self.published = 0
        """Entries the server took."""
        self.refused = 0
        """Entries read but refused (too large, malformed, not signed): each a miss with a warning."""
        self.too_large = 0
        """Entries kept local because they were over :attr:`max_entry_bytes`."""

    def fetch(self, key: str) -> dict[str, bytes] | None:
        """``key``'s files, or ``None``: missing, no answer, or refused with one warning (never raises)."""
        name = artifact_name(key)
        try:
            raw = self.client.read_hash(name, self.ttl_s, self.max_entry_bytes)
            if raw is None:
                return None
            self.fetched += 1
            files, signature = records.artifact_hash(raw)
            if self.signer is not None and not self.signer.verify(name, files.get(RECORD, b""), signature):
                why = "not signed" if signature is None else "signed with another key, or altered"
                raise BadEntry(f"it is {why} (KILN_REMOTE_KEY_FILE)")
        except (EntryRefused, BadEntry) as exc:
            self.refused += 1
            warnings.warn(
                f"kiln remote cache entry {key[:16]}... from {self.where} was refused ({exc}); it was "
                f"not loaded and will be compiled here, and the compile replaces it",
                CacheWarning,
                stacklevel=3,
            )
            return None
        return files

    def publish(self, key: str, files: Mapping[str, bytes]) -> None:
        size = sum(len(data) for data in files.values())
        if size > self.max_entry_bytes:
            self.too_large += 1
            log.info(
                "kiln: artifact %s takes %.1f MiB, over KILN_REMOTE_MAX_ENTRY_MB (%d MiB); kept local only",
                key[:16],
                size / (1 << 20),
                self.max_entry_bytes >> 20,
            )
            return
        if self.signer is not None:
            files = {**files, FIELD: self.signer.sign(artifact_name(key), files["artifact.json"]).encode()}
        if self.client.write_hash(artifact_name(key), files, self.ttl_s):
            self.published += 1

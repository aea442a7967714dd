"""Program records in Redis, so a fresh machine starts a program's compiles before it asks for them.

::

    a record written (program/recorder.py, its writer thread) -> publish(program, bytes)
        -> SET kiln:r1:program:p<format>:<sha256(program)> (signed with KILN_REMOTE_KEY_FILE)
    install() on a machine with no record of the program (thread "kiln-program-fetch")
        -> fetch(program) -> GET, refused unread if over KILN_REMOTE_MAX_ENTRY_MB, signature
           checked -> bytes, which the program package validates as it validates its file

A record is data (kernels by module and qualname, compile requests in canonical JSON), never
code: what it starts is what the program would compile, from its own imported kernels, and an
entry whose kernel's source differs is skipped (:mod:`triton_kiln.program.replay`). A fault or a
missing entry is a miss: the program runs as without a record.
"""

from __future__ import annotations

from triton_kiln.remote.client import RedisClient
from triton_kiln.remote.names import program_name
from triton_kiln.remote.signed_values import SignedValues
from triton_kiln.remote.signing import Signer


class RemotePrograms(SignedValues):
    """Program records (``record_format``: the record file's format) on ``client``'s server."""

    def __init__(
        self,
        client: RedisClient,
        record_format: int,
        *,
        ttl_s: int | None,
        signer: Signer | None = None,
        max_entry_bytes: int = 16 << 20,
    ) -> None:
        super().__init__(client, ttl_s=ttl_s, signer=signer, max_entry_bytes=max_entry_bytes)
        self.record_format = record_format

    def fetch(self, program: str) -> bytes | None:
        """``program``'s record as the server holds it (``None``: none, unreachable, or refused
        with one :class:`CacheWarning`: too large, a bad signature)."""
        return self.read_checked(
            program_name(program, self.record_format),
            bytes,
            "an invalid program record at {name} ({exc}); it is ignored, and this run's record replaces it",
        )

    def publish(self, program: str, data: bytes) -> bool:
        """Write ``program``'s record ``data``; whether the server took it."""
        return self.write(program_name(program, self.record_format), data)

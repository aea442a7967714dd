"""Inductor's max-autotune template timings in Redis, so no machine times a choice another timed.

::

    Inductor's PersistentCache.lookup misses its local file (triton_kiln.inductor.shared_timings)
      -> fetch(key) -> GET kiln:r1:inductor-timings:t1:<sha256(key)>, refused unread if over
         KILN_REMOTE_MAX_ENTRY_MB, signature checked, validated: {choice hash: ms}
      every choice found: those timings, nothing run; else the choices are timed, and
      -> publish(key, found + timed) -> SET (signed with KILN_REMOTE_KEY_FILE)

``key`` names what Inductor's own cache keys its timings by: the system (GPU, CUDA, torch and
Triton: Inductor's system hash), the operation, its inputs' layouts and the float32 matmul
precision. An entry is data (choice hashes and milliseconds), never code; one that is not what
kiln writes is a miss with one warning, and the choices are timed.
"""

from __future__ import annotations

import json
import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from triton_kiln.artifacts.record import why
from triton_kiln.remote import records
from triton_kiln.remote.names import inductor_timings_name
from triton_kiln.remote.signed_values import SignedValues

FORMAT = 1
MAX_CHOICES = 4096
"""Choices one entry holds at most; a write past it keeps the last ones given."""
_Hash = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class TimingsRecord(BaseModel):
    """What kiln stores: the key it was timed for, and each choice's time (``None``: ``inf``, a
    choice that failed)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    format: int
    key: Annotated[str, StringConstraints(min_length=1, max_length=65536)]
    timings: Annotated[dict[_Hash, Annotated[float, Field(ge=0)] | None], Field(max_length=MAX_CHOICES)]


class RemoteInductorTimings(SignedValues):
    """Inductor's template timings on ``client``'s server."""

    def fetch(self, key: str) -> dict[str, float] | None:
        """``{choice hash: ms}`` held for ``key`` (``None``: none, unreachable, or refused with one
        :class:`CacheWarning`: too large, a bad signature, not what kiln writes)."""

        def timings(payload: bytes) -> dict[str, float]:
            try:
                record = TimingsRecord.model_validate_json(payload)
            except ValidationError as exc:
                raise records.BadEntry(why(exc)) from exc
            if record.format != FORMAT or record.key != key:
                raise records.BadEntry(
                    f"format {record.format} for key {record.key[:120]!r}, not format {FORMAT} for this key"
                )
            return {choice: math.inf if ms is None else ms for choice, ms in record.timings.items()}

        return self.read_checked(
            inductor_timings_name(key),
            timings,
            "invalid Inductor timings at {name} ({exc}); they are ignored, and the choices are timed here",
        )

    def publish(self, key: str, timings: dict[str, float]) -> bool:
        """Write ``timings`` (``{choice hash: ms}``) for ``key``; whether the server took it."""
        kept = list(timings.items())[-MAX_CHOICES:]  # an entry over the limit would be refused when read
        stored = {choice: (None if math.isinf(ms) or math.isnan(ms) else ms) for choice, ms in kept}
        data = json.dumps({"format": FORMAT, "key": key, "timings": stored}, sort_keys=True).encode()
        return self.write(inductor_timings_name(key), data)

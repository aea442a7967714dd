"""Inductor's chosen configs in Redis, so no machine runs a runtime autotune or a coordinate
descent another machine ran for the same kernel.

::

    Inductor's AutotuneCache (its remote half, which kiln serves: triton_kiln.inductor.shared_best_configs)
      a kernel's module loads -> fetch(key) -> GET kiln:r1:inductor-best-config:b1:<sha256(key)>,
         refused unread if over KILN_REMOTE_MAX_ENTRY_MB, signature checked, validated
         -> Inductor keeps only that config: nothing to time
      a kernel's autotune or coordinate descent ends -> publish(key, best config) -> SET (signed)

``key`` is the one Inductor's remote autotune cache builds: torch's own hash, Triton's hash with
its backend (the GPU's architecture and the CUDA toolchain), the kernel's configs and source. An
entry is data (a config's block sizes, warps and stages), never code; one that is not what
Inductor writes, or whose values are out of the ranges below, is a miss with one warning, and
the kernel is tuned as without kiln.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from triton_kiln.artifacts.record import why
from triton_kiln.remote import records
from triton_kiln.remote.names import inductor_best_config_name
from triton_kiln.remote.signed_values import SignedValues

MAX_FIELDS = 64
"""Fields one entry holds at most (a config's block sizes and Inductor's few of its own)."""
MAX_VALUE = 1 << 20
"""The largest integer a config's field may hold: no block size reaches it."""
_Name = Annotated[str, StringConstraints(min_length=1, max_length=128)]
_Scalar = (
    Annotated[int, Field(ge=0, le=MAX_VALUE)]
    | bool
    | None
    | Annotated[str, StringConstraints(max_length=512)]
)


class BestConfigRecord(BaseModel):
    """What Inductor's autotune cache stores for a kernel, as kiln accepts it: the fields
    Inductor reads, each in its range, and the config's own (block sizes) as bounded integers."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    num_warps: Annotated[int, Field(ge=1, le=64)]
    num_stages: Annotated[int, Field(ge=0, le=16)]
    configs_hash: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    found_by_coordesc: bool = False
    time_taken_ms: Annotated[int, Field(ge=0)] | None = None
    triton_cache_hash: Annotated[str, StringConstraints(max_length=512)] | None = None
    extra_options: Annotated[dict[_Name, _Scalar], Field(max_length=MAX_FIELDS)] | None = None
    num_consumer_groups: Annotated[int, Field(ge=0, le=64)] | None = None
    num_buffers_warp_spec: Annotated[int, Field(ge=0, le=64)] | None = None
    kwargs: Annotated[
        dict[_Name, Annotated[int, Field(ge=0, le=MAX_VALUE)] | bool], Field(max_length=MAX_FIELDS)
    ]


def validated(payload: bytes) -> bytes:
    """``payload`` (Inductor's JSON of a best config) when it is one kiln accepts; raises
    :class:`~triton_kiln.remote.records.BadEntry` otherwise."""
    try:
        data: Any = json.loads(payload)
    except ValueError as exc:
        raise records.BadEntry(f"not JSON ({exc})") from exc
    if not isinstance(data, dict) or len(data) > MAX_FIELDS:
        raise records.BadEntry(f"not a JSON object of at most {MAX_FIELDS} fields")
    inductors = BestConfigRecord.model_fields.keys() - {"kwargs"}  # the rest is the config's own
    own = {k: v for k, v in data.items() if k in inductors}
    kwargs = {k: v for k, v in data.items() if k not in inductors}
    try:
        BestConfigRecord.model_validate({**own, "kwargs": kwargs})
    except ValidationError as exc:
        raise records.BadEntry(why(exc)) from exc
    return payload


class RemoteInductorBestConfigs(SignedValues):
    """Inductor's best configs on ``client``'s server."""

    def fetch(self, key: str) -> bytes | None:
        """The entry for ``key`` as Inductor wrote it (JSON bytes; ``None``: none, unreachable,
        or refused with one :class:`CacheWarning`: too large, a bad signature, not a config)."""
        return self.read_checked(
            inductor_best_config_name(key),
            validated,
            "an invalid Inductor config at {name} ({exc}); it is ignored, and the kernel is tuned here",
        )

    def publish(self, key: str, data: bytes) -> bool:
        """Write ``data`` (Inductor's JSON of a best config) for ``key``; whether the server took
        it (an entry kiln would refuse to read is not written)."""
        try:
            validated(data)
        except records.BadEntry:
            return False
        return self.write(inductor_best_config_name(key), data)

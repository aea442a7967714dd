"""Entries read from the remote cache, parsed into typed records before kiln uses any of them.

The server's replies are already of the right RESP type and size (:mod:`triton_kiln.remote.client`);
here their contents are judged, as untrusted input, with pydantic models: strict types (no
coercion), exactly kiln's field set, bounded strings, lists and mappings, and JSON parsed by
pydantic's parser, which refuses nesting past its recursion limit. An entry that fails raises
:class:`BadEntry`, whose message names what was wrong; the caller makes it that key's miss with
one warning, and the next verified local result overwrites the key.

* an artifact entry's hash: at most :data:`MAX_FIELDS` fields named in UTF-8, the signature
  field (if any) 64 hex digits; its files are then verified by the local store's reader
  (``artifact.json`` through :mod:`triton_kiln.artifacts.record`);
* a tuning run: :class:`TuningRunRecord` (the JSON of :meth:`TuningRun.to_json
  <triton_kiln.tuning.results.TuningRun.to_json>`), then :meth:`TuningRun.from_json
  <triton_kiln.tuning.results.TuningRun.from_json>` for what relates fields to each other
  (statuses, the best config among the results, finite timings).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, ValidationError

from triton_kiln.artifacts.record import why
from triton_kiln.remote.signing import FIELD, Signer, split_signed
from triton_kiln.tuning.results import TuningRun

MAX_FIELDS = 64
"""Most fields in an artifact entry's hash (kiln writes about ten)."""
_SIGNATURE = re.compile(rb"[0-9a-f]{64}")

Text = Annotated[str, StringConstraints(max_length=4096)]
Reason = Annotated[str, StringConstraints(max_length=1 << 16)]
Timing = float | Literal["inf", "-inf"] | None


class BadEntry(ValueError):
    """An entry that is not what kiln writes (its message says what is wrong)."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)


class ConfigResultRecord(_Strict):
    label: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    config: Annotated[dict[Text, JsonValue], Field(max_length=256)]
    status: Annotated[str, StringConstraints(max_length=64)]
    reason: Reason | None = None
    compile_s: Timing = None
    runtime_ms: Timing = None
    runtime_ms_p20: Timing = None
    runtime_ms_p80: Timing = None
    max_abs_diff: Timing = None
    artifact_key: Text | None = None
    screen_ms: Timing = None


class TuningRunRecord(_Strict):
    kernel: Text
    kernel_key: Text
    key_repr: Text
    device_name: Text
    capability: Text
    triton_version: Text
    results: Annotated[list[ConfigResultRecord], Field(max_length=1 << 14)]
    best_label: Text | None = None
    default_label: Text | None = None
    started_at: float
    wall_s: Timing = None
    first_result_s: Timing = None
    split: Annotated[dict[Text, float], Field(max_length=64)] | None = None
    finished_at: Timing = None
    run_id: int | None = None
    adoptions: Annotated[int, Field(ge=0)] = 0
    adoption_wait_s: Timing = None
    gpu_peak_bytes: Annotated[int, Field(ge=0)] | None = None


def artifact_hash(raw: dict[bytes, bytes]) -> tuple[dict[str, bytes], str | None]:
    """``({file name: bytes}, signature or None)`` of an artifact entry's hash."""
    if len(raw) > MAX_FIELDS:
        raise BadEntry(f"the hash has {len(raw)} fields, more than the {MAX_FIELDS} an entry may have")
    files: dict[str, bytes] = {}
    for name, data in raw.items():
        try:
            files[name.decode("utf-8")] = data
        except UnicodeDecodeError:
            raise BadEntry(f"the field name {name[:40]!r} is not UTF-8") from None
    signature = files.pop(FIELD, None)
    return files, None if signature is None else _signature(signature)


def signed_payload(value: bytes) -> tuple[str | None, bytes]:
    """``(signature or None, payload)`` of a stored value (a tuning run, a program record)."""
    signature, payload = split_signed(value)
    return (None if signature is None else _signature(signature)), payload


def verified_payload(value: bytes, name: str, signer: Signer | None) -> bytes:
    """The payload of the value stored under ``name``, its signature checked with ``signer``'s
    key where there is one (:class:`BadEntry`: a malformed, missing or wrong signature)."""
    signature, payload = signed_payload(value)
    if signer is not None and not signer.verify(name, payload, signature):
        raise BadEntry("not signed with KILN_REMOTE_KEY_FILE's key")
    return payload


def tuning_run(payload: bytes) -> TuningRun:
    """The tuning run in ``payload`` (JSON), every field typed and checked."""
    try:
        record = TuningRunRecord.model_validate_json(payload)
    except ValidationError as exc:
        raise BadEntry(why(exc)) from None
    try:
        return TuningRun.from_json(record.model_dump())
    except (ValueError, TypeError, KeyError) as exc:
        raise BadEntry(f"{type(exc).__name__}: {exc}") from None


def _signature(value: bytes) -> str:
    if not _SIGNATURE.fullmatch(value):
        raise BadEntry(f"the signature is not 64 hex digits ({len(value)} bytes)")
    return value.decode("ascii")

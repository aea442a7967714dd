"""``artifact.json``, an entry's record, parsed into a typed record before any of it is used.

The record comes from the local store or from a remote cache (where anyone who can write to the
server can write it), so it is read as untrusted input: one pydantic model per object, strict
types (no coercion: ``"1"`` is not ``1``, ``true`` is not a number), exactly kiln's field set,
bounded strings and mappings, and JSON parsed by pydantic's own parser, which refuses nesting
past its recursion limit instead of exhausting Python's stack. A record that fails is an
:class:`~triton_kiln.errors.ArtifactError` naming the field and what was wrong, and the entry
is a miss (:data:`~triton_kiln.artifacts.store_entry.READ_ERRORS`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, TypeAdapter, ValidationError

from triton_kiln.errors import ArtifactError

RECORD = "artifact.json"

Name = Annotated[str, StringConstraints(min_length=1, max_length=255)]
"""A file name (checked to stay in the entry by :func:`triton_kiln.artifacts.confined.check_name`)."""
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Text = Annotated[str, StringConstraints(max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)


class FileRecord(_Strict):
    sha256: Digest
    size: Annotated[int, Field(ge=0)]


class ArtifactRecord(_Strict):
    """kiln's record of one entry (written by :func:`~triton_kiln.artifacts.store_entry.entry_files`)."""

    format: int
    key: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    name: Text
    binary_ext: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    binary_file: Name
    binary_sha256: Digest
    metadata_file: Name
    asm: Annotated[dict[Annotated[str, StringConstraints(max_length=64)], Name], Field(max_length=64)]
    files: Annotated[dict[Name, FileRecord], Field(max_length=64)]
    compile_s: float
    stored_at: float | None = None


_OBJECT = TypeAdapter(dict[str, JsonValue])


def parse_record(data: bytes, expected_format: int) -> ArtifactRecord:
    """The record in ``data``, of ``expected_format`` (:class:`ArtifactError` naming what is wrong)."""
    fields = parse_object(data, RECORD)
    if fields.get("format") != expected_format:
        raise ArtifactError(f"format {str(fields.get('format'))[:20]}, expected {expected_format}")
    try:
        return ArtifactRecord.model_validate(fields)
    except ValidationError as exc:
        raise ArtifactError(f"{RECORD} is not kiln's record: {why(exc)}") from None


def parse_object(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object of JSON values, nested no deeper than pydantic's parser allows."""
    try:
        return _OBJECT.validate_json(data)
    except ValidationError as exc:
        raise ArtifactError(f"{what} is not a JSON object: {why(exc)}") from None


def why(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``field.path: message`` (never the value itself)."""
    errors = exc.errors(include_input=False, include_url=False)
    if not errors:
        return str(exc)
    where = ".".join(str(part) for part in errors[0]["loc"]) or "the document"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {errors[0]['msg']}{more}"

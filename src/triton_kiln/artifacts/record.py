"""``artifact.json``, an entry's record, parsed into a typed record before any of it is used.

The record comes from the local store or from a remote cache (where anyone who can write to the
server can write it), so it is read as untrusted input: one pydantic model per object, strict
types (no coercion: ``"1"`` is not ``1``, ``true`` is not a number), exactly kiln's field set,
bounded strings and mappings, and JSON parsed by pydantic's own parser, which refuses nesting
past its recursion limit instead of exhausting Python's stack. A record that fails is a
``ValueError`` (:class:`pydantic.ValidationError`) naming the field and what was wrong, and the
entry is a miss (:data:`~triton_kiln.artifacts.entry.READ_ERRORS`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, TypeAdapter

Name = Annotated[str, StringConstraints(min_length=1, max_length=255)]
"""A file name (checked to stay in the entry by :func:`triton_kiln.artifacts.confined.check_name`)."""
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Text = Annotated[str, StringConstraints(max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)


class FileRecord(_Strict):
    sha256: Digest
    size: Annotated[int, Field(ge=0)]


class ArtifactRecord(_Strict):
    """kiln's record of one entry (written by :func:`~triton_kiln.artifacts.entry.entry_files`)."""

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


_METADATA = TypeAdapter(dict[str, JsonValue])


def parse_record(data: bytes) -> ArtifactRecord:
    """The record in ``data`` (``ValueError`` if it is not one; see the module docstring)."""
    return ArtifactRecord.model_validate_json(data)


def parse_metadata(data: bytes) -> dict[str, Any]:
    """Triton's metadata JSON: an object of JSON values, nested no deeper than the parser allows."""
    return _METADATA.validate_json(data)

"""One entry of the artifact store: what it holds, and its one reader, which verifies it.

:func:`entry_files` is the entry as ``{file name: bytes}`` (the binary, Triton's metadata, the
text IRs, and ``artifact.json``: kiln's record with every file's sha256 and size), what the
store writes into a directory and what a remote cache holds.

:func:`read_entry` is the one reader of an entry, whether the entry is in the store
(:meth:`ArtifactStore.get <triton_kiln.artifacts.store.ArtifactStore.get>`) or was just fetched from a
remote cache and staged in a temporary directory (:meth:`ArtifactStore.adopt
<triton_kiln.artifacts.store.ArtifactStore.adopt>`): the record's format and key, each file named in
the manifest opened through :mod:`triton_kiln.artifacts.confined` and matched against its recorded
size and sha256, the binary against ``binary_sha256``, and ``triton/`` (if present) against the
verified bytes. The record and the metadata are parsed by :mod:`triton_kiln.artifacts.record`
(typed, bounded, depth-limited) before any of them is used. Anything else raises
:class:`~triton_kiln.errors.ArtifactError` (or ``OSError``, or ``ValueError`` from a malformed
record: :data:`READ_ERRORS`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from triton_kiln.artifacts import confined
from triton_kiln.artifacts.artifact import ARTIFACT_FORMAT, CompiledArtifact
from triton_kiln.artifacts.record import RECORD, ArtifactRecord, parse_object, parse_record
from triton_kiln.errors import ArtifactError

TRITON_DIR = "triton"
MAX_RECORD_BYTES = 1 << 20
READ_ERRORS = (OSError, ValueError, KeyError, TypeError, ArtifactError)
"""What reading a damaged or tampered entry raises."""


def entry_files(artifact: CompiledArtifact) -> dict[str, bytes]:
    """What the entry of ``artifact`` holds, ``{file name: bytes}``: the binary, Triton's metadata,
    the text IRs and, last, the record (``artifact.json``) with every file's sha256 and size."""
    files: dict[str, bytes] = {
        artifact.binary_file_name: artifact.binary,
        artifact.metadata_file_name: artifact.metadata_json(),
    }
    asm_files = {ext: artifact.asm_file_name(ext) for ext in artifact.asm}
    for ext, name in asm_files.items():
        files[name] = artifact.asm[ext].encode()
    if RECORD in files or len(files) != 2 + len(asm_files):
        raise ArtifactError(f"artifact {artifact.key[:12]} ({artifact.name}) has clashing file names")
    record = {
        "format": ARTIFACT_FORMAT,
        "key": artifact.key,
        "name": artifact.name,
        "binary_ext": artifact.binary_ext,
        "binary_file": artifact.binary_file_name,
        "binary_sha256": artifact.binary_sha256,
        "metadata_file": artifact.metadata_file_name,
        "asm": asm_files,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in files.items()
        },
        "compile_s": artifact.compile_s,
        "stored_at": time.time(),
    }
    files[RECORD] = json.dumps(record, indent=1).encode()
    return files


def read_entry(entry_fd: int, key: str) -> CompiledArtifact:
    """The artifact in the entry open as ``entry_fd``, every served file verified (see the docstring)."""
    record = parse_record(confined.read_file(entry_fd, RECORD, max_size=MAX_RECORD_BYTES), ARTIFACT_FORMAT)
    if record.key != key:
        raise ArtifactError(f"entry holds key {record.key[:12]}..., not {key[:12]}...")
    listed = manifest(record)
    binary = _served(entry_fd, listed, record.binary_file)
    metadata_bytes = _served(entry_fd, listed, record.metadata_file)
    artifact = CompiledArtifact(
        key=key,
        name=record.name,
        binary=binary,
        binary_ext=record.binary_ext,
        metadata=parse_object(metadata_bytes, record.metadata_file),
        asm={ext: _served(entry_fd, listed, name).decode() for ext, name in record.asm.items()},
        compile_s=record.compile_s,
    )
    if artifact.binary_sha256 != record.binary_sha256:
        raise ArtifactError("binary checksum mismatch")
    _check_triton_copy(entry_fd, {record.binary_file: binary, record.metadata_file: metadata_bytes})
    return artifact


def manifest(record: ArtifactRecord) -> dict[str, tuple[str, int]]:
    """``{file name: (sha256, size)}`` from the record, every name checked to stay in the entry."""
    return {confined.check_name(name): (item.sha256, item.size) for name, item in record.files.items()}


def _served(entry_fd: int, manifest: dict[str, tuple[str, int]], name: object) -> bytes:
    """The verified bytes of ``name``: listed in the manifest, a regular file, matching its sha256."""
    name = confined.check_name(name)
    if name == RECORD or name not in manifest:
        raise ArtifactError(f"{name} is not listed in the entry's manifest")
    digest, size = manifest[name]
    try:
        data = confined.read_file(entry_fd, name, max_size=size)  # never more than kiln wrote
    except confined.FileTooLargeError as exc:
        found = exc.size
    else:
        found = len(data)
        if found == size and hashlib.sha256(data).hexdigest() == digest:
            return data
    raise ArtifactError(
        f"{name}: checksum mismatch ({found} bytes, kiln wrote {size}; the file changed after kiln wrote it)"
    )


def _check_triton_copy(entry_fd: int, expected: dict[str, bytes]) -> None:
    """``triton/`` (if made) is a real directory whose files (if present) equal the verified bytes."""
    kind = confined.file_kind(entry_fd, TRITON_DIR)
    if kind is None:
        return
    if kind != "dir":
        raise ArtifactError(f"{TRITON_DIR}/ is a {kind}, not the directory kiln made")
    triton_fd = confined.open_dir(TRITON_DIR, entry_fd)
    try:
        for name, data in expected.items():
            if confined.file_kind(triton_fd, name) is None:
                continue  # laid out lazily (triton_files.py) or removed: rebuilt when asked for
            if confined.read_file(triton_fd, name, size=len(data)) != data:
                raise ArtifactError(f"{TRITON_DIR}/{name} differs from the verified entry")
    finally:
        os.close(triton_fd)

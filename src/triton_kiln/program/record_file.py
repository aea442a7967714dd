"""A program record on disk: which compiles a program asked kiln's pool for, in the order it asked.

One JSON file per program in the cache directory, ``<cache_dir>/programs/<sha256(program)[:32]>.json``::

    {"format": 1, "program": "/home/me/train.py", "runs": 7,
     "entries": [{"kernel": "moe_align", "module": "liger_kernel.ops.fused_moe_kernels",
                  "qualname": "moe_align", "identity": <sha256>, "key": <sha256>, "source": "jit",
                  "signature": [["x_ptr", "*fp32"], ...], "constexprs": [["BLOCK", ["int", 128]]],
                  "options": [...], "attrs": [...], "target": ["cuda", 90, 32],
                  "last_run": 7, "runs": 5}, ...]}

Values are :func:`~triton_kiln.compile.values.canonical` forms (``1``, ``1.0`` and ``True`` differ),
so a request is rebuilt from data, never unpickled. The file is written atomically and read as
untrusted input, as ``artifact.json`` is (:mod:`triton_kiln.artifacts.record`): one strict pydantic
model per object, bounded strings and lists, a size cap on the file; a file that fails is a miss
with one warning, and the next write replaces it. A file of another ``format`` is a quiet miss.

Bounded: :func:`merged` keeps at most ``KILN_PROGRAM_RECORD_MAX`` entries: this run's, in the order
it needed them, then earlier runs' by how recently they were needed; the least recently needed go.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, ValidationError

from triton_kiln import notices
from triton_kiln.files import atomic_write

log = logging.getLogger("kiln.program")

FORMAT: Literal[1] = 1
DIRECTORY = "programs"
MAX_FILE_BYTES = 4 << 20
"""A larger file is not read (a record of 4096 entries of usual kernels is well under it)."""
MAX_ENTRIES = 4096
"""The most entries a file may hold (``KILN_PROGRAM_RECORD_MAX`` is at most this)."""

Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Name = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Text = Annotated[str, StringConstraints(max_length=4096)]
Pairs = Annotated[list[tuple[Name, JsonValue]], Field(max_length=512)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)


class Entry(_Strict):
    """One compile request, as data: the kernel by module and qualname, its identity (the
    :class:`~triton_kiln.compile.kernel_spec.KernelSpec` hash) and the request's key, and the
    request's parts in canonical forms."""

    kernel: Name
    module: Name
    qualname: Name
    identity: Digest
    key: Digest
    source: Literal["jit", "tuning"]
    signature: Annotated[list[tuple[Name, Name]], Field(max_length=512)]
    constexprs: Pairs
    options: Pairs
    attrs: Pairs
    target: tuple[Name, int | Name, Annotated[int, Field(ge=1, le=1024)]]
    last_run: Annotated[int, Field(ge=0)]
    runs: Annotated[int, Field(ge=1)]


class ProgramRecord(_Strict):
    format: Literal[1]
    program: Text
    runs: Annotated[int, Field(ge=0)]
    entries: Annotated[list[Entry], Field(max_length=MAX_ENTRIES)]


def record_path(cache_dir: Path, program: str) -> Path:
    """Where ``program``'s record is kept in ``cache_dir``."""
    digest = hashlib.sha256(program.encode("utf-8", "surrogateescape")).hexdigest()
    return Path(cache_dir) / DIRECTORY / f"{digest[:32]}.json"


def read(path: Path) -> ProgramRecord | None:
    """The record at ``path``; ``None`` when there is none, when it has another format (quietly),
    or when it cannot be read or fails validation (one warning: the next write replaces it)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        notices.warn(log, f"kiln: the program record {path} cannot be read ({exc}); nothing is replayed.")
        return None
    return parse(data, str(path))


def parse(data: bytes, where: str) -> ProgramRecord | None:
    """The record ``data`` holds (read from ``where``: a file, a remote cache's entry), validated
    as :func:`read` says; ``None`` for another format (quietly) or an invalid record (a warning)."""
    problem = _problem(data)
    if problem is None:
        try:
            return ProgramRecord.model_validate_json(data)
        except ValidationError as exc:
            problem = _first_error(exc)
    if problem == "":
        log.debug("kiln: the program record %s has another format; it is replaced at the next write", where)
        return None
    notices.warn(
        log,
        f"kiln: the program record {where} is not valid ({problem}); nothing is replayed from it "
        f"and this run's record replaces it.",
    )
    return None


def encoded(record: ProgramRecord) -> bytes:
    """``record`` as the bytes of its file (and of its remote cache entry)."""
    return record.model_dump_json().encode()


def _problem(data: bytes) -> str | None:
    """Why ``data`` is no record of :data:`FORMAT` before the full validation (``""``: another
    format, a quiet miss; ``None``: go on)."""
    if len(data) > MAX_FILE_BYTES:
        return f"over {MAX_FILE_BYTES >> 20} MiB"
    head = data[:64].replace(b" ", b"")
    if head.startswith(b'{"format":') and not head.startswith(b'{"format":%d,' % FORMAT):
        return ""
    return None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "the file"
    return f"{where}: {first.get('msg', 'invalid')}"


def write(path: Path, record: ProgramRecord) -> None:
    """Write ``record`` to ``path`` atomically (a reader sees the old file or the new one)."""
    atomic_write(path, encoded(record))


def merged(earlier: Iterable[Entry], this_run: Iterable[Entry], cap: int) -> list[Entry]:
    """This run's entries in the order it needed them, then earlier ones it
    did not need, most recently needed first (their order kept within a run); at most ``cap``."""
    now = list(this_run)
    needed = {entry.key for entry in now}
    rest = [entry for entry in earlier if entry.key not in needed]
    rest.sort(key=lambda entry: -entry.last_run)  # stable: a run's own order is kept
    return (now + rest)[:cap]

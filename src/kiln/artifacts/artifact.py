"""The compiled result of a request: binary, entry name and every field needed to launch it.

A :class:`CompiledArtifact` is plain data (bytes, strings, JSON-able metadata), so it crosses
process boundaries cheaply and is stored on disk without pickle (see :mod:`kiln.artifacts.store`).
Launch metadata is *required*: :meth:`CompiledArtifact.launch_field` raises
:class:`~kiln.errors.MissingMetadataError` naming a missing field instead of guessing.

:func:`to_triton_kernel` turns an artifact back into Triton's ``CompiledKernel`` (the object
``kernel[grid](*args)`` launches) without calling ``triton.compile``: it lays the binary and
metadata out the way Triton's own cache does and lets Triton load them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.errors import ArtifactError, MissingMetadataError

if TYPE_CHECKING:
    from kiln.compile.request import CompileRequest

ARTIFACT_FORMAT = 1

# Fields Triton 3.6's CUDA launcher and loader read from a kernel's metadata.
LAUNCH_FIELDS: tuple[str, ...] = (
    "name",
    "num_warps",
    "num_ctas",
    "shared",
    "target",
    "global_scratch_size",
    "global_scratch_align",
    "profile_scratch_size",
    "profile_scratch_align",
    "launch_cooperative_grid",
    "launch_pdl",
)


@dataclass(frozen=True)
class CompiledArtifact:
    """A compiled kernel: its binary, entry point and Triton's full metadata record."""

    key: str
    name: str
    binary: bytes = field(repr=False)
    binary_ext: str
    metadata: dict[str, Any] = field(repr=False)
    asm: dict[str, str] = field(default_factory=dict, repr=False)
    compile_s: float = 0.0

    def __post_init__(self) -> None:
        for name in LAUNCH_FIELDS:
            if name not in self.metadata:
                raise MissingMetadataError(name, self.name or "?")
        if self.metadata["name"] != self.name:
            raise ArtifactError(
                f"artifact {self.key[:12]} names its entry {self.name!r} but its metadata says "
                f"{self.metadata['name']!r}; the artifact is inconsistent and was rejected."
            )
        if not self.binary:
            raise ArtifactError(f"artifact {self.key[:12]} ({self.name}) has an empty binary.")

    # -- launch metadata --------------------------------------------------------------------

    def launch_field(self, name: str) -> Any:
        try:
            return self.metadata[name]
        except KeyError:
            raise MissingMetadataError(name, self.name) from None

    @property
    def num_warps(self) -> int:
        return int(self.launch_field("num_warps"))

    @property
    def shared(self) -> int:
        return int(self.launch_field("shared"))

    @property
    def target(self) -> tuple[str, int | str, int]:
        t = self.launch_field("target")
        return (t["backend"], t["arch"], t["warp_size"])

    @property
    def binary_sha256(self) -> str:
        return hashlib.sha256(self.binary).hexdigest()

    # -- construction from Triton -----------------------------------------------------------

    @classmethod
    def from_triton(cls, key: str, compiled: Any, compile_s: float) -> CompiledArtifact:
        """Build from Triton's ``CompiledKernel`` (in the worker, right after ``triton.compile``)."""
        metadata_path = next(
            (Path(p) for name, p in compiled.metadata_group.items() if name.endswith(".json")), None
        )
        if metadata_path is None:
            raise ArtifactError(f"Triton returned no metadata file for kernel {compiled.name!r}.")
        metadata = json.loads(metadata_path.read_text())
        binary_ext = _binary_ext(compiled)
        binary = compiled.asm[binary_ext]
        asm = {
            ext: text
            for ext, text in compiled.asm.items()
            if ext not in (binary_ext, "source") and isinstance(text, str)
        }
        return cls(
            key=key,
            name=str(metadata.get("name", "")),
            binary=bytes(binary),
            binary_ext=binary_ext,
            metadata=metadata,
            asm=asm,
            compile_s=compile_s,
        )


def _binary_ext(compiled: Any) -> str:
    from kiln.triton_compat import make_backend

    backend = make_backend(compiled.metadata.target)
    return str(backend.binary_ext)


def write_triton_group(artifact: CompiledArtifact, directory: Path) -> dict[str, str]:
    """Write the artifact as Triton's cache does (``<name>.json`` + ``<name>.<ext>``)."""
    from kiln.files import atomic_write

    directory.mkdir(parents=True, exist_ok=True)
    base = artifact.name[:150]
    meta_path = directory / f"{base}.json"
    bin_path = directory / f"{base}.{artifact.binary_ext}"
    if not bin_path.exists():
        atomic_write(bin_path, artifact.binary)
    if not meta_path.exists():
        atomic_write(meta_path, json.dumps(artifact.metadata).encode())
    return {meta_path.name: str(meta_path), bin_path.name: str(bin_path)}


def to_triton_kernel(artifact: CompiledArtifact, request: CompileRequest, directory: Path) -> Any:
    """Triton's ``CompiledKernel`` for this artifact, loaded without compiling.

    ``directory`` receives the binary and metadata (Triton reads them from files). The kernel
    binary is loaded onto the GPU lazily, on first launch, as Triton always does.
    """
    return triton_kernel_from_source(artifact, request.ast_source(request.kernel), directory)


def triton_kernel_from_source(artifact: CompiledArtifact, src: Any, directory: Path) -> Any:
    """Triton's ``CompiledKernel`` from the artifact's files in ``directory`` and a source record
    (an ``ASTSource``, or any object with the ``fn.arg_names``, ``signature`` and ``constants``
    Triton's launcher reads)."""
    from triton.compiler.compiler import CompiledKernel

    group = write_triton_group(artifact, directory)
    return CompiledKernel(src, group, artifact.metadata.get("hash", artifact.key))

"""The compiled result of a request: binary, entry name and every field needed to launch it.

A :class:`CompiledArtifact` is plain data (bytes, strings, JSON-able metadata), so it crosses
process boundaries cheaply and is stored on disk without pickle (see :mod:`kiln.artifacts.store`).
Launch metadata is *required*: :meth:`CompiledArtifact.launch_field` raises
:class:`~kiln.errors.MissingMetadataError` naming a missing field instead of guessing.

Turning an artifact back into Triton's ``CompiledKernel`` is :mod:`kiln.artifacts.triton_files`'s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from kiln.errors import ArtifactError, MissingMetadataError

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
        from kiln.triton_compat import compiled_kernel_parts

        parts = compiled_kernel_parts(compiled)
        if parts.metadata is None:
            raise ArtifactError(f"Triton returned no metadata file for kernel {parts.name!r}.")
        return cls(
            key=key,
            name=str(parts.metadata.get("name", "")),
            binary=parts.binary,
            binary_ext=parts.binary_ext,
            metadata=parts.metadata,
            asm=parts.asm,
            compile_s=compile_s,
        )

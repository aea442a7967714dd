"""The compiled result of a request: binary, entry name and every field needed to launch it.

A :class:`CompiledArtifact` is plain data (bytes, strings, JSON-able metadata), so it crosses
process boundaries cheaply and is stored on disk without pickle (see :mod:`triton_kiln.artifacts.store`).
Launch metadata is *required*: :meth:`CompiledArtifact.launch_field` raises
:class:`~triton_kiln.errors.MissingMetadataError` naming a missing field instead of guessing.

Turning an artifact back into Triton's ``CompiledKernel`` is :mod:`triton_kiln.artifacts.triton_files`'s.

The text IRs (``asm``: LLVM IR, TTIR, TTGIR, PTX) are for inspection only: nothing in kiln
launches from them, so the pool's memory cache keeps :meth:`CompiledArtifact.without_ir` copies
unless ``KILN_KEEP_IR=1`` (see :mod:`triton_kiln.pool.memory_cache`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.errors import ArtifactError, MissingMetadataError
from triton_kiln.triton_compat.compiling import launch_fields

ARTIFACT_FORMAT = 2
"""Version of the on-disk entry (2: a manifest with the sha256 and size of every served file)."""
STORE_DIR = f"artifacts-v{ARTIFACT_FORMAT}"
"""The artifact store's directory in a cache directory (one per entry format)."""

_FILE_BASE_CHARS = 150  # a file name's stem: the kernel's name, cut to stay under NAME_MAX
_ENTRY_OVERHEAD_BYTES = 1024  # what :attr:`CompiledArtifact.nbytes` adds for the objects themselves

LAUNCH_FIELDS: tuple[str, ...] = launch_fields("cuda")
"""The metadata a CUDA kernel needs to be launched (each backend's: :func:`launch_fields`)."""


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
        if "target" not in self.metadata:
            raise MissingMetadataError("target", self.name or "?")
        for name in launch_fields(self.backend):
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
    def backend(self) -> str:
        """``"cuda"``, ``"hip"``: the backend the kernel was compiled for (its launch fields differ;
        ``""`` for a target record without one, which is checked for CUDA's, the most)."""
        t = self.metadata.get("target")
        return str(t.get("backend", "")) if isinstance(t, dict) else ""

    @property
    def binary_sha256(self) -> str:
        return hashlib.sha256(self.binary).hexdigest()

    # -- files and size ---------------------------------------------------------------------

    @property
    def binary_file_name(self) -> str:
        """``<name>.<ext>``: the binary's file name, in the store and in Triton's layout."""
        return f"{self.name[:_FILE_BASE_CHARS]}.{self.binary_ext}"

    @property
    def metadata_file_name(self) -> str:
        """``<name>.json``: the metadata's file name, in the store and in Triton's layout."""
        return f"{self.name[:_FILE_BASE_CHARS]}.json"

    def asm_file_name(self, ext: str) -> str:
        return f"{self.name[:_FILE_BASE_CHARS]}.{ext}"

    def metadata_json(self) -> bytes:
        """The metadata as kiln writes it to ``<name>.json`` (and Triton reads it back)."""
        return json.dumps(self.metadata).encode()

    @property
    def nbytes(self) -> int:
        """Approximate memory this artifact holds: binary, IR texts, metadata, object overhead."""
        text = sum(len(ext) + len(body) for ext, body in self.asm.items())
        return len(self.binary) + text + len(self.metadata_json()) + _ENTRY_OVERHEAD_BYTES

    def without_ir(self) -> CompiledArtifact:
        """This artifact without its text IRs (all a launch needs: binary and metadata)."""
        return dataclasses.replace(self, asm={}) if self.asm else self

    # -- construction from Triton -----------------------------------------------------------

    @classmethod
    def from_triton(cls, key: str, compiled: Any, compile_s: float) -> CompiledArtifact:
        """Build from Triton's ``CompiledKernel`` (in the worker, right after ``triton.compile``)."""
        from triton_kiln.triton_compat import compiled_kernel_parts

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

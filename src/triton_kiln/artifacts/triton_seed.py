"""A kiln artifact written into Triton's own cache, so that ``triton.compile`` finds it.

Used where kiln compiles in its pool and then lets Triton's code run unchanged: torch
Inductor's precompile (:mod:`triton_kiln.inductor.config_compiler`) and plain ``@triton.jit`` kernels
(:mod:`triton_kiln.routing.jit`). :func:`triton_slot` computes the cache directory name (the hash)
``triton.compile(src, target, options)`` computes, in this process, as it does;
:func:`seed_triton_cache` writes the artifact there in Triton's layout (binary, metadata, the
text IRs kiln kept) as one group, atomically (Triton's cache manager). Nothing is written where
Triton already holds the group.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.artifacts.artifact import CompiledArtifact


@dataclass(frozen=True)
class TritonSlot:
    """Where ``triton.compile`` looks for a compile's files: its hash and the files' base name."""

    hash: str
    base: str  # src.name[:150], as triton.compile names its files

    @property
    def metadata_name(self) -> str:
        return f"{self.base}.json"

    def cached(self) -> bool:
        """Whether Triton's cache already holds this compile (its metadata group)."""
        return triton_compat.triton_cache_group(self.hash, self.metadata_name) is not None


def triton_slot(src: Any, backend: Any, options: dict[str, Any]) -> TritonSlot:
    """The slot ``triton.compile(src, options=options)`` uses for ``backend``'s target."""
    return TritonSlot(triton_compat.compile_hash(src, backend, dict(options)), str(src.name)[:150])


def seed_triton_cache(slot: TritonSlot, artifact: CompiledArtifact) -> None:
    """Write ``artifact`` into Triton's cache (``TRITON_CACHE_DIR``) under ``slot``; its metadata
    records ``slot.hash`` as Triton's own would. Nothing is written if the slot is filled."""
    if slot.cached():
        return
    metadata = dict(artifact.metadata)
    metadata["hash"] = slot.hash  # as triton.compile records it
    files: dict[str, bytes | str] = {f"{slot.base}.{ext}": text for ext, text in artifact.asm.items()}
    files[f"{slot.base}.{artifact.binary_ext}"] = artifact.binary
    files[slot.metadata_name] = json.dumps(metadata)
    triton_compat.put_in_triton_cache(slot.hash, files, slot.metadata_name)

"""Where the autotuner gets a compiled binary's files and Triton's kernel object for it.

Both come from the artifact store (:mod:`triton_kiln.artifacts.triton_files`), not from the pool: a
binary laid out as Triton's cache does (for the sandbox, which loads it from files) and Triton's
``CompiledKernel`` (for in-process benchmarks and launches). The store lays each binary out once
per process; the pool is asked only which store it writes to.
"""

from __future__ import annotations

from typing import Any

from triton_kiln.artifacts import triton_files as layout
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest


def triton_files(pool: Any, artifact: CompiledArtifact) -> dict[str, str]:
    """The binary in Triton's cache layout: ``{"<name>.json": path, "<name>.cubin": path}``."""
    return layout.triton_files(pool.store, artifact)


def triton_kernel(pool: Any, request: CompileRequest, artifact: CompiledArtifact) -> Any:
    """Triton's ``CompiledKernel`` for the binary (no compile; loaded on first launch)."""
    return layout.load_kernel(pool.store, request, artifact)

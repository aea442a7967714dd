"""Where the autotuner gets a compiled binary's files and Triton's kernel object for it.

Two questions, one route: a binary laid out as Triton's cache does (for the sandbox, which loads
it from files) and Triton's ``CompiledKernel`` (for in-process benchmarks and launches). Today
the compile pool answers both (``pool.triton_files``, ``pool.load_kernel``); when the artifact
store answers them itself (``kiln.artifacts.triton_files``), :func:`_binaries` is the one line
to change.
"""

from __future__ import annotations

from typing import Any

from kiln.artifacts.artifact import CompiledArtifact
from kiln.compile.request import CompileRequest


def _binaries(pool: Any) -> Any:
    """What answers for stored binaries: the pool today (see the module docstring)."""
    return pool


def triton_files(pool: Any, artifact: CompiledArtifact) -> dict[str, str]:
    """The binary in Triton's cache layout: ``{"<name>.json": path, "<name>.cubin": path}``."""
    files: dict[str, str] = _binaries(pool).triton_files(artifact)
    return files


def triton_kernel(pool: Any, request: CompileRequest, artifact: CompiledArtifact) -> Any:
    """Triton's ``CompiledKernel`` for the binary (no compile; loaded on first launch)."""
    return _binaries(pool).load_kernel(request, artifact)

"""The farm pool's jobs (queued in the caller or running on a node actor) and its counters."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest, guess_compile_cost
from triton_kiln.farm.nodes import NodeActor
from triton_kiln.pool.lookup import LookupCounts
from triton_kiln.pool.sealed import SealedRequest


@dataclass
class FarmStats(LookupCounts):
    """Counters a :class:`RayCompilePool` keeps."""

    dispatched: int = 0
    compiled: int = 0
    failed: int = 0
    rejected: int = 0  # replies that failed verification
    node_retries: int = 0  # jobs queued again because their node actor (or its node) was lost
    actor_starts: int = 0  # node actors started (one per node, more after losses)
    nodes: dict[str, int] = field(default_factory=dict)  # replies per node


@dataclass
class FarmJob:
    request: CompileRequest
    sealed: SealedRequest
    future: Future[CompiledArtifact]
    timeout_s: float
    priority: float
    started: float
    attempts: int = 1
    node: NodeActor | None = None  # the node actor running it


def longest_first(requests: list[CompileRequest]) -> list[int]:
    """Indices of ``requests``, longest guessed compile first."""
    return sorted(range(len(requests)), key=lambda i: -guess_compile_cost(requests[i]))

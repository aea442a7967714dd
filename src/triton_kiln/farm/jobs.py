"""The farm pool's jobs (queued in the caller or running on a node actor) and its counters."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

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
    actors_attached: int = 0  # standing node actors found running (started before this pool)
    nodes: dict[str, int] = field(default_factory=dict)  # replies per node
    # The start-up, in seconds since the pool was made (``None`` until it happens): Ray
    # joined, the first node actor asked for, its ready() answered, the first job sent to a
    # node actor, the first reply back; and the first actor's own timeline (its process
    # started, its constructor entered, its kiln pool made; wall clocks of two machines; a
    # standing actor attached to was made before the pool: its times are negative).
    connect_s: float | None = None
    actor_created_s: float | None = None
    actor_ready_s: float | None = None
    first_dispatch_s: float | None = None
    first_result_s: float | None = None
    actor_timeline: dict[str, float] = field(default_factory=dict)


class StartClock:
    """Writes a pool's start-up timeline into its :class:`FarmStats` (seconds since it was made)."""

    def __init__(self, stats: FarmStats) -> None:
        self.stats = stats
        self.made = time.monotonic()
        self.made_wall = time.time()

    def mark(self, name: str) -> None:
        """``stats.<name>`` is now, unless it was marked before."""
        if getattr(self.stats, name) is None:
            setattr(self.stats, name, round(time.monotonic() - self.made, 3))

    def actor_times(self, times: Any) -> None:
        """A node actor's own timeline (wall clock times by name), as offsets in the stats."""
        if isinstance(times, dict):
            self.stats.actor_timeline = {
                f"{name}_s": round(float(t) - self.made_wall, 3) for name, t in times.items()
            }


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

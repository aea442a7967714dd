"""The lookups before a compile, shared by :class:`~triton_kiln.pool.CompilePool` and
:class:`~triton_kiln.farm.RayCompilePool`: memory -> in flight -> disk (and its remote store) -> a new job.

::

    submit(key) --lock--> memory cache hit?      -> done future
                          same key in flight?    -> that job's future
                --no lock--> store.get(key)      (disk, and the remote store behind it)
                --lock--> disk hit?              -> remembered in memory, done future
                          in flight meanwhile?   -> that job's future
                          else new_job()         -> registered in flight; the caller runs it

The store is read without the lock (it may be a remote round trip); the second look under the
lock makes one new job per key however many threads submit it at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, TypeVar

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.pool.memory_cache import MemoryCache


class _InFlight(Protocol):
    @property
    def future(self) -> Future[CompiledArtifact]: ...


J = TypeVar("J", bound=_InFlight)


@dataclass
class LookupCounts:
    """What the lookups counted (both pools' stats start with these)."""

    submitted: int = 0
    deduplicated: int = 0  # served by the same key's job in flight
    memory_hits: int = 0
    disk_hits: int = 0


def find_or_add(
    key: str,
    *,
    lock: threading.Lock,
    memory: MemoryCache,
    inflight: dict[str, J],
    store: ArtifactStore | None,
    counts: LookupCounts,
    check_open: Callable[[], None],
    new_job: Callable[[], J],
) -> tuple[Future[CompiledArtifact], J | None]:
    """``key``'s future and, when nothing had it, the new job (made by ``new_job`` under ``lock``
    and put in ``inflight``) the caller must now run."""
    with lock:
        check_open()
        counts.submitted += 1
        hit = memory.get(key)
        if hit is not None:
            counts.memory_hits += 1
            return done(hit), None
        job = inflight.get(key)
        if job is not None:
            counts.deduplicated += 1
            return job.future, None
    stored = store.get(key) if store is not None else None
    with lock:
        check_open()
        if stored is not None:
            counts.disk_hits += 1
            memory.put(stored)
            return done(stored), None
        job = inflight.get(key)
        if job is not None:
            counts.deduplicated += 1
            return job.future, None
        job = new_job()
        inflight[key] = job
        return job.future, job


def done(artifact: CompiledArtifact) -> Future[CompiledArtifact]:
    """A finished future of ``artifact``."""
    future: Future[CompiledArtifact] = Future()
    future.set_result(artifact)
    return future

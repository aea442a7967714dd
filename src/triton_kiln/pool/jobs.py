"""A pool's jobs, and the table its caller threads and its manager thread share.

* :class:`Job`: one compile in flight (its request, future, deadline budget, priority).
* :class:`JobQueue`: jobs waiting for a worker, highest priority first.
* :class:`JobTable`: everything both sides of the pool touch, under one lock: the jobs in
  flight (so identical requests share one future), the memory cache of finished artifacts
  (:class:`~triton_kiln.pool.memory_cache.MemoryCache`, bounded in bytes),
  the counters (:class:`PoolStats`), whether the pool is closing or broken, and the two
  events callers wait on. A job ends here, once: :meth:`JobTable.complete` (stored on disk,
  remembered, future resolved) or :meth:`JobTable.fail`.
* :class:`NodeSide`: what the table and the workers ask of the node-wide locks
  (:class:`~triton_kiln.pool.node_jobs.NodeJobs`, which builds on this module's jobs and counters).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.compile.request import CompileRequest
from triton_kiln.errors import KilnError, PoolClosedError, SettingsError
from triton_kiln.pool.lookup import LookupCounts
from triton_kiln.pool.memory_cache import MemoryCache

if TYPE_CHECKING:
    from triton_kiln.pool.sealed import SealedRequest


@dataclass
class PoolStats(LookupCounts):
    """Counters a pool keeps (read them from :attr:`CompilePool.stats`)."""

    dispatched: int = 0
    compiled: int = 0
    failed: int = 0
    worker_deaths: int = 0
    workers_forked: int = 0
    zygote_starts: int = 0
    requeued: int = 0
    node_waited: int = 0  # jobs that found their key being compiled by another process of the node
    node_served: int = 0  # ...and got its artifact from that process's compile (no compile here)
    node_takeovers: int = 0  # ...whose process ended without an artifact: compiled here instead
    node_alone: int = 0  # ...compiled here unlocked (its compile failed there, or KILN_NODE_WAIT_S)
    idle_releases: int = 0  # times the zygote and workers exited after KILN_IDLE_S without work
    idle_restarts: int = 0  # ...and a later job started them again (its cost: zygote_ready_s[-1])
    zygote_ready_s: list[float] = field(default_factory=list)
    replacement_s: list[float] = field(default_factory=list)


@dataclass
class Job:
    id: int
    request: CompileRequest | SealedRequest
    future: Future[CompiledArtifact]
    payload: bytes
    timeout_s: float
    priority: float = 0.0
    module: str | None = None  # what a worker imports for the kernel (None: rebuilt from source)
    attempts: int = 0
    started: float = 0.0
    slot: object = None  # the node slot held while it runs (triton_kiln.pool.node_jobs)


def check_job_arguments(timeout_s: object, priority: object) -> None:
    """:class:`SettingsError` naming ``timeout_s`` or ``priority`` unless each is ``None`` or fit:
    a positive, finite number of seconds, and a real number (not NaN). Checked in the caller, so
    a bad value never reaches the manager thread, whose queue compares them."""
    if timeout_s is not None and not _positive_finite(timeout_s):
        raise SettingsError(
            f"timeout_s={timeout_s!r} is not valid: expected a positive, finite number of seconds "
            f"(or None for the pool's job_timeout_s, KILN_JOB_TIMEOUT_S)."
        )
    if priority is not None and not _is_real(priority):
        raise SettingsError(
            f"priority={priority!r} is not valid: expected a number (higher starts first), or None "
            f"for the pool's guess of the compile's cost."
        )


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def _positive_finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


class NodeSide(Protocol):
    """A pool's side of the node-wide locks, as the table and the workers use it."""

    def take_slot(self, job: Job) -> bool:
        """Hold a node slot for ``job`` before it runs (``False``: all are taken now)."""
        ...

    def give_slot(self, job: Job) -> None:
        """Give back ``job``'s slot (it goes back to the queue)."""
        ...

    def ended(self, job: Job, exc: BaseException | None) -> None:
        """``job`` ended (stored already when it succeeded): its slot and its key's lock let go."""
        ...


class JobQueue:
    """Pending jobs, highest priority first, FIFO among equals; retried jobs jump the queue."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Job]] = []
        self._seq = itertools.count()

    def push(self, job: Job, *, front: bool = False) -> None:
        rank = -math.inf if front else -job.priority  # a bad priority raises here, heap untouched
        heapq.heappush(self._heap, (rank, next(self._seq), job))

    def pop(self) -> Job:
        return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Job]:
        return iter([entry[2] for entry in sorted(self._heap)])

    def clear(self) -> None:
        self._heap.clear()


class JobTable:
    """The state a pool's caller threads and manager thread share (see the module docstring)."""

    def __init__(self, store: ArtifactStore | None, memory: MemoryCache) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.inflight: dict[str, Job] = {}
        self.memory = memory
        self.stats = PoolStats()
        self.closing = False  # set by shutdown(): no new jobs
        self.broken: KilnError | None = None  # set by the manager: why every job now fails
        self.ready = threading.Event()  # zygote up and every worker started (or the pool ended)
        self.closed = threading.Event()  # the manager thread has torn everything down
        self.node: NodeSide | None = None  # node-wide locks (set by the manager; its thread only)

    def check_open(self) -> None:
        if self.closing:
            raise PoolClosedError("this CompilePool was shut down; create a new one to compile more")
        if self.broken is not None:
            raise self.broken

    def remember(self, artifact: CompiledArtifact) -> None:
        """Keep ``artifact`` in the memory cache (call with :attr:`lock` held)."""
        self.memory.put(artifact)

    def forget(self, job: Job) -> None:
        """Drop ``job`` from the jobs in flight (it was cancelled before it ran)."""
        if self.node is not None:
            self.node.ended(job, CancelledError())
        with self.lock:
            self.inflight.pop(job.request.key, None)

    def complete(self, job: Job, artifact: CompiledArtifact, *, stored: bool = False) -> None:
        """``job`` ended with ``artifact`` (``stored``: read from the store, another process's)."""
        if self.store is not None and not stored:
            self.store.put_or_warn(artifact)  # a failed write warns (once); the caller has its binary
        if self.node is not None:
            self.node.ended(job, None)  # stored first, then the node's lock is let go
        with self.lock:
            self.inflight.pop(job.request.key, None)
            self.remember(artifact)
            if not stored:
                self.stats.compiled += 1
        if not job.future.done():
            job.future.set_result(artifact)

    def fail(self, job: Job, exc: BaseException) -> None:
        if self.node is not None:
            self.node.ended(job, exc)
        with self.lock:
            if self.inflight.get(job.request.key) is job:
                del self.inflight[job.request.key]
            self.stats.failed += 1
        future = job.future
        if future.done() or (not future.running() and not future.set_running_or_notify_cancel()):
            return  # finished or cancelled already
        future.set_exception(exc)

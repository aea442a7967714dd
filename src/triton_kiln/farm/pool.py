"""The compile pool on a Ray cluster: :class:`RayCompilePool`, :class:`~triton_kiln.pool.CompilePool`'s
interface.

Data flow::

    caller threads                  scheduler thread (one per pool)            Ray nodes
    --------------                  -------------------------------            ---------
    submit(request) -> key ->
      memory, disk (and remote)
      store, in flight (lookup.py)
      -> SealedRequest, queue ----> longest first, to the node actor    ----> NodeCompiler (one
                                    with the most free slots (nodes.py)        per node; its kiln
                                                                               CompilePool with the
    Future <---- verify (wire.py), store.put <---- ray.wait / ray.get <------- node's CPUs; the
                                                                               request opened only
                                                                               in a kiln worker)

* One actor per node (:mod:`triton_kiln.farm.node_actor`), started with the pool (its kiln pool's
  zygote warms then) and on nodes that join later; it holds the node's CPUs (``cpus_per_node``)
  and its pool has as many workers: one zygote per node, never one per Ray worker process.
  ``standing=True``: the node's standing actor (``kiln farm up``), shared by every driver, is
  attached to (or made) and left running at shutdown (nodes.py).
* An abort, a segfault or a hang in Triton kills only a kiln worker: the job fails with kiln's
  typed error, the actor serves on. Ray restarts no actor and re-runs no call.
* A lost actor (killed, its node died or left): its jobs are queued again (``node_retries``
  times, then ``NodeLostError``) for the other nodes' actors or the node's new one. No config
  can kill an actor (it never unpickles a request), so a re-run repeats no crash.
* Replies are plain data, verified (wire.py) before the artifact is stored (local store, and
  any remote one behind it); a rejected reply fails its job with ``ArtifactError``.
* Jobs wait here, highest ``priority`` first (default :func:`guess_compile_cost`); a node gets
  its workers plus a short queue (nodes.py) from the moment its actor is asked for (Ray holds
  the calls until it runs). ``stats`` times the start-up (jobs.py).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_kiln import settings as settings_mod
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest
from triton_kiln.errors import ArtifactError, PoolClosedError
from triton_kiln.farm import ray_api, wire
from triton_kiln.farm.errors import FarmTaskError, NodeLostError, NoNodeError
from triton_kiln.farm.jobs import FarmJob, FarmStats, StartClock, longest_first
from triton_kiln.farm.nodes import NodeActor, NodeActors
from triton_kiln.pool.interface import BatchMethods
from triton_kiln.pool.lookup import find_or_add
from triton_kiln.pool.memory_cache import MemoryCache
from triton_kiln.pool.pool import open_store
from triton_kiln.pool.sealed import SealedRequest
from triton_kiln.settings import Settings

if TYPE_CHECKING:
    from triton_kiln.pool.interface import CompileService

__all__ = ["FarmStats", "RayCompilePool"]
log = logging.getLogger("kiln.farm")

_POLL_S = 0.05
_REFRESH_S = 1.0  # how often the scheduler looks for nodes that joined or left
_CLOSE_WAIT_S = 10.0  # how long shutdown() lets the node actors end their pools


class RayCompilePool(BatchMethods):
    """A compile pool whose workers are kiln pools on a Ray cluster's nodes (``triton-kiln[ray]``).

    Args:
        address: the cluster (``"host:port"`` of ``ray start --head``, ``"auto"``, or ``None`` for
            ``RAY_ADDRESS`` or a new local cluster). Not used when Ray is already initialized.
        job_timeout_s, memory_limit_mb, cache_dir, use_disk_cache: as for
            :class:`~triton_kiln.pool.CompilePool` (each job's limits are enforced on its node).
        preload: modules the nodes' zygotes import (for instance one that installs Triton hooks).
        node_retries: how many times a job of a lost node (or node actor) runs again.
        cpus_per_node: the CPUs each node's actor holds and compiles with (``None``: all of the
            node's; Ray work of others cannot use them while the pool lives).
        node_start_timeout_s: how long a node's actor may take to start (its CPUs held by
            another pool, say) before that node is left alone a while.
        niceness: the nodes' kiln pools' niceness (``None``: this process's; Ray's worker
            processes run at 15, below every other process on the node). Raising priority
            needs root or ``RLIMIT_NICE`` on the node; without, the pools stay at Ray's.
        standing: use each node's standing compiler (``kiln farm up``; made if none runs),
            shared, left running at shutdown (``None``: ``KILN_FARM_STANDING``; nodes.py).
        ray_init: more keyword arguments for ``ray.init``.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        job_timeout_s: float | None = None,
        memory_limit_mb: int | None = None,
        cache_dir: str | Path | None = None,
        use_disk_cache: bool | None = None,
        preload: Iterable[str] = (),
        node_retries: int = 3,
        cpus_per_node: int | None = None,
        node_start_timeout_s: float = 60.0,
        niceness: int | None = None,
        standing: bool | None = None,
        settings: Settings | None = None,
        ray_init: dict[str, Any] | None = None,
    ) -> None:
        base = settings or settings_mod.current()
        overrides = {
            "job_timeout_s": job_timeout_s,
            "memory_limit_mb": memory_limit_mb,
            "cache_dir": Path(cache_dir) if cache_dir is not None else None,
            "use_disk_cache": use_disk_cache,
        }
        self.settings = base.replace(**{k: v for k, v in overrides.items() if v is not None})
        if cpus_per_node is not None and cpus_per_node < 1:
            raise ValueError(f"cpus_per_node must be at least 1, got {cpus_per_node}")
        self.store = open_store(self.settings)
        self.preload = tuple(preload)
        self.node_retries = node_retries
        self.stats = FarmStats()
        self._clock = StartClock(self.stats)
        self._memory = MemoryCache(self.settings.memory_cache_mb << 20, keep_ir=self.settings.keep_ir)
        self._lock = threading.Lock()
        self._inflight: dict[str, FarmJob] = {}  # key -> job (queued or running)
        self._queue: list[tuple[float, int, FarmJob]] = []  # (-priority, order, job), under _lock
        self._order = itertools.count()
        self._closing = False
        self._cancel = False
        self._owns_ray = ray_api.connect(address, dict(ray_init or {}))
        self._clock.mark("connect_s")
        self._nodes = NodeActors(
            cpus_per_node=cpus_per_node,
            preload=self.preload,
            memory_limit_mb=self.settings.memory_limit_mb,
            start_timeout_s=node_start_timeout_s,
            niceness=os.getpriority(os.PRIO_PROCESS, 0) if niceness is None else niceness,
            standing=self.settings.farm_standing if standing is None else standing,
        )
        self._running: dict[Any, FarmJob] = {}  # Ray ref -> job (the scheduler thread's)
        self._scheduler = threading.Thread(target=self._schedule, name="kiln-farm-scheduler", daemon=True)
        self._scheduler.start()

    # ---------------------------------------------------------------- the CompilePool interface

    def submit_order(self, requests: list[CompileRequest]) -> Iterable[int]:
        """A batch goes out longest guessed compile first (the caller's queue orders jobs the same
        way), so the longest compile does not start last on a node."""
        return longest_first(requests)

    def submit(
        self, request: CompileRequest, *, timeout_s: float | None = None, priority: float | None = None
    ) -> Future[CompiledArtifact]:
        """Compile ``request`` on the cluster; a future of its verified, stored artifact."""
        if not isinstance(request, CompileRequest):
            raise TypeError(f"submit() takes a CompileRequest, got {type(request).__name__}")

        def new_job() -> FarmJob:
            sealed = SealedRequest.of(request)
            job = FarmJob(
                request=request,
                sealed=sealed,
                future=Future(),
                timeout_s=timeout_s if timeout_s is not None else self.settings.job_timeout_s,
                priority=sealed.cost if priority is None else priority,
                started=time.monotonic(),
            )
            job.future.set_running_or_notify_cancel()
            heapq.heappush(self._queue, (-job.priority, next(self._order), job))
            return job

        future, _ = find_or_add(
            request.key,
            lock=self._lock,
            memory=self._memory,
            inflight=self._inflight,
            store=self.store,
            counts=self.stats,
            check_open=self._check_open,
            new_job=new_job,
        )
        return future

    def wait_ready(self, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        """Wait until the node actors' kiln pools are warm (zygote and workers up); what each
        node runs (host, actor pid, workers, zygote and kiln worker pids). ``[]`` if no node
        actor started within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self._nodes.snapshot():
            if time.monotonic() > deadline or not self._scheduler.is_alive():
                return []
            time.sleep(_POLL_S)
        left = max(1.0, deadline - time.monotonic())
        warm = [{"node": a.label, **ray_api.call(a.actor.warm, left, left)} for a in self._nodes.snapshot()]
        if warm and "zygote_ready_s" not in self.stats.actor_timeline:
            self._clock.actor_times(warm[0].get("times"))
        return warm

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting jobs; wait for (or cancel) those queued and running; end the node
        actors (not standing ones); leave Ray if this pool joined it. With ``wait=False`` and
        no ``cancel_futures``, jobs go on (the actors end after the last) and Ray stays joined.
        """
        with self._lock:
            self._closing = True
            self._cancel = self._cancel or cancel_futures
        if not wait and not cancel_futures:
            return
        if threading.current_thread() is not self._scheduler:
            self._scheduler.join()  # it ends the actors and drops every Ray ref it held
        if self._owns_ray and not self._scheduler.is_alive():
            self._owns_ray = False
            ray_api.disconnect()

    def __enter__(self) -> RayCompilePool:
        return self

    def __exit__(self, *exc: object) -> None:  # an exception cancels what is left
        self.shutdown(wait=True, cancel_futures=exc[0] is not None)

    @property
    def closing(self) -> bool:
        return self._closing

    # ---------------------------------------------------------------- the scheduler thread

    def _check_open(self) -> None:
        if self._closing:
            raise PoolClosedError("this RayCompilePool was shut down; create a new one to compile more")

    def _schedule(self) -> None:
        """Start node actors, hand them queued jobs, turn their replies into results."""
        next_refresh = 0.0
        try:
            while True:
                now = time.monotonic()
                with self._lock:
                    if self._cancel or (self._closing and not self._queue and not self._running):
                        return
                if now >= next_refresh:
                    self._refresh(now)
                    next_refresh = now + (_REFRESH_S if self._nodes.any_ready else _POLL_S * 4)
                self._dispatch()
                starting = self._nodes.starting_refs()
                refs = [*self._running, *starting]
                if not refs:
                    time.sleep(_POLL_S)
                    continue
                try:
                    ready = ray_api.wait(refs, _POLL_S)
                except Exception:
                    log.exception("kiln farm: waiting for Ray failed")
                    time.sleep(_POLL_S)
                    continue
                del refs
                for ref in ready:
                    if ref in starting:
                        self._started(starting[ref])
                        continue
                    job = self._running.pop(ref)
                    try:
                        if self._finish(job, ref):
                            next_refresh = 0.0  # a lost actor: look at the nodes now
                    except BaseException as exc:  # never lose a job's future to a bug here
                        log.exception("kiln farm: finishing %s failed", job.request.label())
                        self._fail(job, exc)
                del ready, starting  # no Ray ref outlives Ray (shutdown disconnects)
        finally:
            self._end()

    def _started(self, node: NodeActor) -> None:
        self._nodes.started(node, time.monotonic())
        if node.ready and self.stats.actor_ready_s is None:
            self._clock.mark("actor_ready_s")
            self._clock.actor_times(node.info.get("times"))

    def _refresh(self, now: float) -> None:
        try:
            self._nodes.refresh(now)
        except Exception:
            log.exception("kiln farm: listing the Ray cluster's nodes failed")
            return
        self.stats.actor_starts, self.stats.actors_attached = self._nodes.starts, self._nodes.attached
        if self._nodes.starts or self._nodes.attached:
            self._clock.mark("actor_created_s")
        if self._nodes.any_ready or self._nodes.any_starting:
            return
        with self._lock:
            queued = [entry[2] for entry in self._queue]
            self._queue.clear()
        if not queued:
            return
        failures = "; ".join(self._nodes.failures)
        why = f"no node could start kiln's actor: {failures}" if failures else "no live node has a CPU"
        for job in queued:
            self._fail(job, NoNodeError(f"{job.request.label()}: not compiled: {why}"))

    def _dispatch(self) -> None:
        """Queued jobs, highest priority first, each to the node actor with the most free slots."""
        while True:
            node = self._nodes.pick()
            if node is None:
                return
            with self._lock:
                if not self._queue:
                    return
                job = heapq.heappop(self._queue)[2]
            ref = node.actor.compile.remote(job.sealed, job.timeout_s)
            node.busy += 1
            job.node = node
            self._running[ref] = job
            self.stats.dispatched += 1
            self._clock.mark("first_dispatch_s")

    def _finish(self, job: FarmJob, ref: Any) -> bool:
        """End ``job`` with its call's reply, or queue it again; ``True`` if its actor was lost."""
        node = job.node
        assert node is not None
        node.busy -= 1
        reply, outcome, message = ray_api.fetch(ref)
        self._clock.mark("first_result_s")
        info, seconds = job.request.info(), time.monotonic() - job.started
        if outcome is ray_api.Outcome.ACTOR_LOST:
            started = node.ready  # else the actor never ran: no try of the job is counted
            if started:
                self._nodes.lost(node, message)
            else:
                self._nodes.start_failed(node, time.monotonic(), message)
            with self._lock:
                again = (job.attempts <= self.node_retries or not started) and not self._cancel
                if again and started:
                    job.attempts += 1
                    self.stats.node_retries += 1
                if again:
                    heapq.heappush(self._queue, (-math.inf, next(self._order), job))
            if not again:
                detail = f"{job.attempts} tries; Ray said: {message}"
                self._fail(job, NodeLostError(info, seconds, detail=detail))
            return True
        result: CompiledArtifact | BaseException
        if outcome is None:
            result = wire.read_reply(reply, job.request.key, info)
            with self._lock:
                self.stats.nodes[node.label] = self.stats.nodes.get(node.label, 0) + 1
        elif outcome is ray_api.Outcome.CANCELLED:
            result = PoolClosedError(f"{info.label()}: cancelled when the farm pool was shut down")
        else:
            result = FarmTaskError(info, seconds, detail=f"Ray said: {message}")
        if isinstance(result, CompiledArtifact):
            self._complete(job, result)
        else:
            self._fail(job, result)
        return False

    def _end(self) -> None:
        """The scheduler's last act: cancelled jobs failed, node actors ended, Ray refs dropped."""
        with self._lock:
            left = [entry[2] for entry in self._queue] + list(self._running.values())
            self._queue.clear()
        self._running.clear()
        for job in left:
            self._fail(job, PoolClosedError(f"{job.request.label()}: cancelled: the farm pool was shut down"))
        try:
            self._nodes.close(0.0 if self._cancel else _CLOSE_WAIT_S)
        except Exception:
            log.exception("kiln farm: ending the node actors failed")

    def _complete(self, job: FarmJob, artifact: CompiledArtifact) -> None:
        if self.store is not None:
            self.store.put_or_warn(artifact)  # a failed write warns (once); the caller has its binary
        with self._lock:
            self._inflight.pop(job.request.key, None)
            self._memory.put(artifact)
            self.stats.compiled += 1
        if not job.future.done():
            job.future.set_result(artifact)

    def _fail(self, job: FarmJob, exc: BaseException) -> None:
        with self._lock:
            self._inflight.pop(job.request.key, None)
            self.stats.failed += 1
            if isinstance(exc, ArtifactError):
                self.stats.rejected += 1
        if not job.future.done():
            job.future.set_exception(exc)


if TYPE_CHECKING:  # mypy checks that RayCompilePool satisfies the protocol

    def _is_a_compile_service(pool: RayCompilePool) -> CompileService:
        return pool

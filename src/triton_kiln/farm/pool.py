"""The compile pool on a Ray cluster: :class:`RayCompilePool`, :class:`~kiln.pool.CompilePool`'s interface.

Data flow::

    caller threads                      collector thread (one per pool)          Ray cluster
    --------------                      -------------------------------          -----------
    submit(request) -> key -> memory,
      disk (ArtifactStore), in flight
      -> Ray task (pickled request) -------------------------------------------> any node's Ray
    Future <---- verify (wire.py), store.put <---- ray.wait / ray.get <-------- worker process:
                                                                                 task.py, its own
                                                                                 kiln CompilePool

* Each job is one Ray task (:mod:`kiln.farm.task`) that compiles in a kiln pool inside the Ray
  worker, so an abort, a segfault or a hang in Triton fails only that job, with kiln's typed
  error, and the Ray worker lives on. Ray's retries are off (``max_retries=0``).
* A job whose node died (``NodeDiedError``, ``ObjectLostError``) is submitted again, up to
  ``node_retries`` times, and Ray places it on a live node; after that it fails with
  :class:`~kiln.farm.errors.NodeLostError`. A job whose Ray worker process died while its node
  lives (something killed it, or unpickling the request crashed it) fails at once with
  :class:`~kiln.errors.WorkerCrashedError`: it would crash again.
* Replies are plain data, verified (key, sha256, launch metadata) before the artifact is stored
  in the local :class:`~kiln.artifacts.store.ArtifactStore` (and so in any remote store behind
  it) and returned. A rejected reply fails its job with :class:`~kiln.errors.ArtifactError`.
* Ray has no priorities: :meth:`compile_many` and :meth:`as_completed` submit the longest
  guessed compiles first; :meth:`submit`'s ``priority`` is accepted and not used.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_kiln import settings as settings_mod
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.compile.request import CompileRequest, guess_compile_cost
from triton_kiln.errors import PoolClosedError, WorkerCrashedError
from triton_kiln.farm import ray_api, wire
from triton_kiln.farm.errors import FarmTaskError, NodeLostError
from triton_kiln.pool.interface import gather
from triton_kiln.pool.memory_cache import MemoryCache
from triton_kiln.settings import Settings

if TYPE_CHECKING:
    from triton_kiln.pool.interface import CompileService

__all__ = ["FarmStats", "RayCompilePool"]
log = logging.getLogger("kiln.farm")

_POLL_S = 0.05


@dataclass
class FarmStats:
    """Counters a :class:`RayCompilePool` keeps."""

    submitted: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    deduplicated: int = 0
    dispatched: int = 0
    compiled: int = 0
    failed: int = 0
    rejected: int = 0  # replies that failed verification
    node_retries: int = 0  # jobs submitted again because their node was lost
    nodes: dict[str, int] = field(default_factory=dict)  # replies per node (hostname)


@dataclass
class _Job:
    request: CompileRequest
    future: Future[CompiledArtifact]
    payload: bytes
    timeout_s: float
    started: float
    attempts: int = 1


class RayCompilePool:
    """A compile pool whose workers are Ray tasks on a cluster (``pip install 'triton-kiln[ray]'``).

    Args:
        address: the cluster (``"host:port"`` of ``ray start --head``, ``"auto"``, or ``None`` for
            ``RAY_ADDRESS`` or a new local cluster). Not used when Ray is already initialized.
        job_timeout_s, memory_limit_mb, cache_dir, use_disk_cache: as for
            :class:`~kiln.pool.CompilePool` (each job's limits are enforced on its node).
        preload: modules the nodes' zygotes import (for instance one that installs Triton hooks).
        node_retries: how many times a job of a lost node runs again elsewhere.
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
        cap = self.settings.cache_max_mb
        self.store = (
            ArtifactStore(self.settings.cache_dir, max_bytes=None if cap is None else cap << 20)
            if self.settings.use_disk_cache
            else None
        )
        self.preload = tuple(preload)
        self.node_retries = node_retries
        self.stats = FarmStats()
        self._memory = MemoryCache(self.settings.memory_cache_mb << 20, keep_ir=self.settings.keep_ir)
        self._lock = threading.Lock()
        self._inflight: dict[str, _Job] = {}  # key -> job
        self._refs: dict[Any, _Job] = {}  # Ray ref -> job
        self._closing = False
        self._owns_ray = ray_api.connect(address, dict(ray_init or {}))
        self._remote = ray_api.remote_compile()
        self._collector = threading.Thread(target=self._collect, name="kiln-farm-collector", daemon=True)
        self._collector.start()

    # ---------------------------------------------------------------- the CompilePool interface

    def submit(
        self, request: CompileRequest, *, timeout_s: float | None = None, priority: float | None = None
    ) -> Future[CompiledArtifact]:
        """Compile ``request`` on the cluster; a future of its verified, stored artifact."""
        if not isinstance(request, CompileRequest):
            raise TypeError(f"submit() takes a CompileRequest, got {type(request).__name__}")
        key = request.key
        with self._lock:
            self._check_open()
            self.stats.submitted += 1
            hit = self._memory.get(key)
            if hit is not None:
                self.stats.memory_hits += 1
                return _done(hit)
            job = self._inflight.get(key)
            if job is not None:
                self.stats.deduplicated += 1
                return job.future
        stored = self.store.get(key) if self.store is not None else None
        with self._lock:
            self._check_open()
            if stored is not None:
                self.stats.disk_hits += 1
                self._memory.put(stored)
                return _done(stored)
            job = self._inflight.get(key)
            if job is not None:
                self.stats.deduplicated += 1
                return job.future
            request.spec.check_shippable()
            job = _Job(
                request=request,
                future=Future(),
                payload=pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL),
                timeout_s=timeout_s if timeout_s is not None else self.settings.job_timeout_s,
                started=time.monotonic(),
            )
            job.future.set_running_or_notify_cancel()
            self._inflight[key] = job
            self._dispatch(job)
        return job.future

    def compile(self, request: CompileRequest, *, timeout_s: float | None = None) -> CompiledArtifact:
        """Compile one request and wait for it (raises what the job raised)."""
        return self.submit(request, timeout_s=timeout_s).result()

    def compile_many(
        self,
        requests: Iterable[CompileRequest],
        *,
        return_exceptions: bool = True,
        progress: bool | None = None,
        description: str = "compiling",
    ) -> list[CompiledArtifact | BaseException]:
        """Compile a batch on the cluster, results in input order (see :meth:`CompilePool.compile_many`)."""
        reqs = list(requests)
        futures: list[Future[CompiledArtifact] | None] = [None] * len(reqs)
        for i in _longest_first(reqs):
            futures[i] = self.submit(reqs[i])
        show = self.settings.progress if progress is None else progress
        submitted = [f for f in futures if f is not None]
        return gather(submitted, show=show, description=description, return_exceptions=return_exceptions)

    def as_completed(
        self, requests: Iterable[CompileRequest]
    ) -> Iterator[tuple[CompileRequest, Future[CompiledArtifact]]]:
        """Submit ``requests`` (longest guessed first) and yield ``(request, future)`` as each finishes."""
        reqs = list(requests)
        by_future: dict[Future[CompiledArtifact], list[CompileRequest]] = {}
        for i in _longest_first(reqs):
            by_future.setdefault(self.submit(reqs[i]), []).append(reqs[i])
        for future in as_completed(by_future):
            for request in by_future[future]:
                yield request, future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting jobs; wait for (or cancel) those in flight; leave Ray if this pool joined it.

        With ``wait=False`` and no ``cancel_futures``, jobs in flight go on and Ray stays joined.
        """
        with self._lock:
            self._closing = True
            jobs = list(self._refs.items())
            if cancel_futures:
                self._refs.clear()
        if cancel_futures:
            for ref, job in jobs:
                ray_api.cancel(ref)
                if not job.future.done():
                    job.future.set_exception(PoolClosedError("the farm pool was shut down"))
        del jobs  # Ray's object refs must all be gone before Ray is
        if not wait and not cancel_futures:
            return
        if threading.current_thread() is not self._collector:
            self._collector.join()  # it ends once no task is in flight, dropping its refs
        if self._owns_ray and not self._collector.is_alive():
            self._owns_ray = False
            ray_api.disconnect()

    def __enter__(self) -> RayCompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True, cancel_futures=exc[0] is not None)

    @property
    def closing(self) -> bool:
        return self._closing

    # ---------------------------------------------------------------- internals

    def _check_open(self) -> None:
        if self._closing:
            raise PoolClosedError("this RayCompilePool was shut down; create a new one to compile more")

    def _dispatch(self, job: _Job) -> None:
        """Start ``job``'s Ray task (call with the lock held)."""
        ref = self._remote.remote(job.payload, job.timeout_s, self.preload, self.settings.memory_limit_mb)
        self._refs[ref] = job
        self.stats.dispatched += 1

    def _collect(self) -> None:
        """The collector thread: turn each finished Ray task into its job's result."""
        while True:
            with self._lock:
                refs = list(self._refs)
                if not refs and self._closing:
                    return
            if not refs:
                time.sleep(_POLL_S)
                continue
            try:
                ready = ray_api.wait(refs, _POLL_S * 4)
            except Exception:
                if self._closing:
                    return  # Ray was shut down under a pool told not to wait
                log.exception("kiln farm: waiting for Ray tasks failed")
                time.sleep(_POLL_S)
                continue
            for ref in ready:
                with self._lock:
                    job = self._refs.pop(ref, None)
                if job is None:
                    continue
                try:
                    self._finish(job, ref)
                except BaseException as exc:  # never lose a job's future to a bug here
                    log.exception("kiln farm: finishing %s failed", job.request.label())
                    self._fail(job, exc)

    def _finish(self, job: _Job, ref: Any) -> None:
        reply, outcome, message = ray_api.fetch(ref)
        info = job.request.info()
        seconds = time.monotonic() - job.started
        if outcome is ray_api.Outcome.NODE_LOST and job.attempts <= self.node_retries:
            with self._lock:
                if not self._closing:
                    job.attempts += 1
                    self.stats.node_retries += 1
                    self._dispatch(job)
                    return
        result: CompiledArtifact | BaseException
        if outcome is None:
            result = wire.read_reply(reply, job.request.key, info)
            node = str(reply.get("node", "?")) if isinstance(reply, dict) else "?"
            with self._lock:
                self.stats.nodes[node] = self.stats.nodes.get(node, 0) + 1
        elif outcome is ray_api.Outcome.NODE_LOST:
            result = NodeLostError(info, seconds, detail=f"{job.attempts} tries; Ray said: {message}")
        elif outcome is ray_api.Outcome.WORKER_DIED:
            result = WorkerCrashedError(
                info,
                seconds,
                detail=f"the Ray worker process running it died (its node lives); Ray said: {message}",
            )
        elif outcome is ray_api.Outcome.CANCELLED:
            result = PoolClosedError(f"{info.label()}: cancelled when the farm pool was shut down")
        else:
            result = FarmTaskError(info, seconds, detail=f"Ray said: {message}")
        if isinstance(result, CompiledArtifact):
            self._complete(job, result)
        else:
            self._fail(job, result)

    def _complete(self, job: _Job, artifact: CompiledArtifact) -> None:
        if self.store is not None:
            try:
                self.store.put(artifact)
            except OSError as exc:
                log.warning("kiln could not store artifact %s: %s", artifact.key[:12], exc)
        with self._lock:
            self._inflight.pop(job.request.key, None)
            self._memory.put(artifact)
            self.stats.compiled += 1
        if not job.future.done():
            job.future.set_result(artifact)

    def _fail(self, job: _Job, exc: BaseException) -> None:
        from triton_kiln.errors import ArtifactError

        with self._lock:
            self._inflight.pop(job.request.key, None)
            self.stats.failed += 1
            if isinstance(exc, ArtifactError):
                self.stats.rejected += 1
        if not job.future.done():
            job.future.set_exception(exc)


def _longest_first(requests: list[CompileRequest]) -> list[int]:
    """Indices of ``requests``, longest guessed compile first (Ray runs tasks in submission order)."""
    return sorted(range(len(requests)), key=lambda i: -guess_compile_cost(requests[i]))


def _done(artifact: CompiledArtifact) -> Future[CompiledArtifact]:
    future: Future[CompiledArtifact] = Future()
    future.set_result(artifact)
    return future


if TYPE_CHECKING:

    def _is_a_compile_service(pool: RayCompilePool) -> CompileService:
        return pool  # mypy checks that RayCompilePool satisfies the protocol

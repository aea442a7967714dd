"""The compile pool's caller API: :class:`CompilePool` and the process-wide :func:`get_pool`.

Data flow (the modules of :mod:`triton_kiln.pool`, and who runs what)::

    caller threads (pool.py)       manager thread (manager.py)                  processes
    ------------------------       ---------------------------                  ---------
    submit(request) --+
      key, memory cache,|  Submit command + wake-up byte
      disk cache, dedup +------->  pending jobs --> idle worker ---- RunJob --->  worker k
    Future <----------------------- JobTable.complete / fail <---- JobDone/Failed  (workers.py,
                                    stderr tail <-------------------- pipe -----  worker.py;
                                                                                  one socket each)
                                    Supervisor (supervisor.py): Fork / Kill /
                                    Preload ------------------- SEQPACKET ---->  zygote (zygote.py)
                                    Forked / Exited(pid, status) <-------------  (reaps workers)

* A job runs on exactly one worker, over that worker's own socket, so a dead worker maps to
  exactly one job: that job fails with a :class:`~triton_kiln.errors.WorkerCrashedError` naming the
  signal, exit code, seconds and the worker's last stderr lines (failures.py); the worker is
  replaced by a fresh fork and queued jobs go on.
* Timeouts and the memory limit are enforced by the manager: it asks the zygote to kill the
  worker's process group and fails the job with :class:`~triton_kiln.errors.CompileTimeoutError` or
  :class:`~triton_kiln.errors.WorkerMemoryError` when the zygote reports the death.
* If the zygote dies, its workers die with it; their jobs are retried once on a new zygote.
  If it cannot start, pending jobs fail with :class:`~triton_kiln.errors.ZygoteError` saying why.
* Identical requests in flight share one future; finished artifacts are kept in memory and
  (by default) on disk, so a repeated request never reaches a worker. Lookups go memory ->
  in flight -> disk -> worker (jobs.py holds what both threads share). The memory cache holds
  at most ``KILN_MEMORY_CACHE_MB`` and keeps what a launch needs (memory_cache.py): a compile
  or disk hit returns the whole artifact, a later memory hit returns it without its text IRs
  unless ``KILN_KEEP_IR=1``.
"""

from __future__ import annotations

import itertools
import pickle
import threading
import time
import uuid
import weakref
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_kiln import settings as settings_mod
from triton_kiln.artifacts import triton_files
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.compile.request import BACKENDS, CompileRequest, guess_compile_cost, target_problem
from triton_kiln.errors import CacheDirError, PoolClosedError, TargetError
from triton_kiln.pool.interface import BatchMethods
from triton_kiln.pool.jobs import Job, JobTable, PoolStats, check_job_arguments
from triton_kiln.pool.lookup import find_or_add
from triton_kiln.pool.manager import Manager, PreloadModules, Resume, Shutdown, Submit
from triton_kiln.pool.memory_cache import MemoryCache
from triton_kiln.pool.pause import PAUSE
from triton_kiln.pool.sealed import SealedRequest
from triton_kiln.settings import Settings
from triton_kiln.triton_compat import GPUTarget

if TYPE_CHECKING:
    from triton_kiln.pool.interface import CompileService

__all__ = ["CompilePool", "PoolStats", "get_pool"]


class CompilePool(BatchMethods):
    """A long-lived pool of crash-isolated compile workers forked from a warm zygote.

    The pool starts in the background as soon as it is created (pass ``start=False`` to
    delay), so creating it early takes its start-up off the critical path. Use it as a
    context manager, or call :meth:`shutdown`.

    Args:
        workers, job_timeout_s, memory_limit_mb, cache_dir, use_disk_cache: override the
            matching fields of :class:`~triton_kiln.settings.Settings` (default: ``KILN_*`` variables).
        preload: modules the zygote imports up front, so every worker inherits them
            (modules of submitted kernels are added automatically); one name is one module.
        warmup_target: the target of the zygote's warm-up compile (a ``GPUTarget`` of backend
            ``'cuda'`` or ``'hip'``, checked here), or ``None`` for none.
        settings: the settings to start from (default: those in force, see
            :func:`triton_kiln.settings.current`). They are resolved here, once, and passed down.
    """

    def __init__(
        self,
        *,
        workers: int | None = None,
        job_timeout_s: float | None = None,
        memory_limit_mb: int | None = None,
        cache_dir: str | Path | None = None,
        use_disk_cache: bool | None = None,
        preload: str | Iterable[str] = (),
        warmup_target: GPUTarget | None = GPUTarget("cuda", 90, 32),  # noqa: B008 - immutable
        settings: Settings | None = None,
        start: bool = True,
    ) -> None:
        check_warmup_target(warmup_target)
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(
                f"settings must be a kiln Settings (triton_kiln.settings.Settings, e.g. "
                f"settings.current().replace(workers=4)) or None, got a {type(settings).__name__}."
            )
        if use_disk_cache is not None and not isinstance(use_disk_cache, bool):
            raise TypeError(
                f"use_disk_cache must be True or False (or None: KILN_DISK_CACHE), got {use_disk_cache!r}."
            )
        modules = module_names(preload, "preload")
        base = settings or settings_mod.current()
        overrides = {
            "workers": workers,
            "job_timeout_s": job_timeout_s,
            "memory_limit_mb": memory_limit_mb,
            "cache_dir": cache_dir,  # a str becomes a Path there; an empty one is refused
            "use_disk_cache": use_disk_cache,
        }
        self.settings = base.replace(**{k: v for k, v in overrides.items() if v is not None})
        if self.settings.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.settings.workers}")
        try:
            self.store = open_store(self.settings)
        except CacheDirError as exc:
            if cache_dir is None:
                raise
            where = f"CompilePool(cache_dir={str(cache_dir)!r})"
            variable = settings_mod.variables()["cache_dir"]
            raise CacheDirError(f"{where}: {str(exc).replace(variable, 'cache_dir')}") from exc
        self.pool_id = uuid.uuid4().hex
        memory = MemoryCache(self.settings.memory_cache_mb << 20, keep_ir=self.settings.keep_ir)
        self._table = JobTable(self.store, memory)
        self.stats: PoolStats = self._table.stats
        self._job_ids = itertools.count(1)
        self._manager = Manager(
            self.settings,
            self.pool_id,
            self._table,
            preload=modules,
            warmup_target=warmup_target,
            # Triton's key depends on Triton only, so every pool shares one key file: the one
            # in the base settings' cache directory, whatever this pool's own cache_dir.
            triton_key_dir=base.cache_dir,
        )
        # A started manager is kept alive by its thread; one never started goes with the pool.
        weakref.finalize(self, self._manager.close_if_never_started).atexit = False
        if start:
            self.start()

    # ---------------------------------------------------------------- public API

    def start(self) -> CompilePool:
        """Start the manager thread and the zygote in the background (idempotent; a zygote that
        exited idle, after ``KILN_IDLE_S``, starts again)."""
        with self._table.lock:
            if self._manager.thread is None:
                if self._table.closing:
                    raise PoolClosedError("this pool was shut down; create a new CompilePool")
                self._manager.start()
            elif self._manager.parked and not self._table.closing:
                self._manager.send(Resume())
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the zygote is up and every worker has started; ``False`` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.start()  # again if the zygote exited idle meanwhile
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = self._table.ready.wait(1.0 if left is None else min(left, 1.0))
            if ready or (deadline is not None and time.monotonic() >= deadline):
                break
        if self._table.broken is not None:
            raise self._table.broken
        if ready and self._table.closed.is_set():
            raise PoolClosedError("the pool was shut down; create a new CompilePool")
        return ready

    def submit(
        self,
        request: CompileRequest | SealedRequest,
        *,
        timeout_s: float | None = None,
        priority: float | None = None,
    ) -> Future[CompiledArtifact]:
        """Compile ``request`` in a worker; returns a future of its :class:`CompiledArtifact`.

        Identical requests in flight share one future; a request compiled before (in this
        pool, or by any pool using the same cache directory) returns at once from the cache.
        Queued jobs start highest ``priority`` first (default: :func:`guess_compile_cost`, so a
        batch runs its longest compiles first). ``timeout_s`` (a positive, finite number of
        seconds; default the pool's ``job_timeout_s``) and ``priority`` (a number) are checked
        here: a bad one raises :class:`~triton_kiln.errors.SettingsError` and the pool goes on. A
        :class:`~triton_kiln.pool.sealed.SealedRequest` is compiled without being unpickled in this
        process (only its worker opens it).
        """
        if not isinstance(request, (CompileRequest, SealedRequest)):
            raise TypeError(f"submit() takes a CompileRequest, got {type(request).__name__}")
        check_job_arguments(timeout_s, priority)
        table = self._table

        def new_job() -> Job:
            if isinstance(request, SealedRequest):
                payload, module, cost = request.payload, request.module, request.cost
            else:
                request.spec.check_shippable()
                payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
                module = None if request.spec.by_source else request.spec.module
                cost = guess_compile_cost(request)
            return Job(
                id=next(self._job_ids),
                request=request,
                future=Future(),
                payload=payload,
                timeout_s=timeout_s if timeout_s is not None else self.settings.job_timeout_s,
                priority=cost if priority is None else priority,
                module=module,
            )

        future, job = find_or_add(
            request.key,
            lock=table.lock,
            memory=table.memory,
            inflight=table.inflight,
            store=self.store,
            counts=table.stats,
            check_open=table.check_open,
            new_job=new_job,
        )
        if not future.done():
            PAUSE.interrupt()  # a compile asked for while processes are held waits for none
        if job is not None:
            self.start()
            self._manager.send(Submit(job))
        return future

    def load_kernel(self, request: CompileRequest, artifact: CompiledArtifact | None = None) -> Any:
        """Triton's launchable ``CompiledKernel`` for ``request``, compiled (or cached) by this pool.

        The parent never calls ``triton.compile``: the binary comes from a worker or the cache
        (see :func:`triton_kiln.artifacts.triton_files.load_kernel`).
        """
        artifact = artifact or self.compile(request)
        return triton_files.load_kernel(self.store, request, artifact)

    def triton_files(self, artifact: CompiledArtifact) -> dict[str, str]:
        """The artifact laid out as Triton's cache does (``{"<name>.json": path, ...}``)."""
        return triton_files.triton_files(self.store, artifact)

    def preload(self, modules: str | Iterable[str]) -> None:
        """Have the zygote import ``modules`` so later workers inherit them."""
        names = module_names(modules, "modules")
        self.start()
        self._manager.send(PreloadModules(names))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting jobs; finish (or with ``cancel_futures``, cancel) queued ones; end all processes."""
        with self._table.lock:
            self._table.closing = True
            thread = self._manager.thread
        self._manager.send(Shutdown(cancel_futures))
        if thread is None:
            self._manager.close_fds()
            self._table.closed.set()
        elif wait and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> CompilePool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True, cancel_futures=exc[0] is not None)

    @property
    def closing(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._table.closing

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran (directly, or by a first job or :meth:`wait_ready`)."""
        return self._manager.thread is not None

    @property
    def zygote_pid(self) -> int | None:
        zygote = self._manager.supervisor.zygote
        return zygote.proc.pid if zygote is not None and not zygote.dead else None

    @property
    def zygote_info(self) -> dict[str, Any]:
        """What the current zygote reported when ready (pid, threads, start-up seconds, preloads)."""
        zygote = self._manager.supervisor.zygote
        return dict(zygote.info) if zygote is not None else {}

    def worker_pids(self) -> list[int]:
        return self._manager.workers.pids()


def module_names(modules: str | Iterable[str], what: str) -> list[str]:
    """``modules`` as a list of module names: one name alone is one module, not its letters."""
    names = [modules] if isinstance(modules, str) else modules
    if not isinstance(names, Iterable) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"{what} must be module names, such as ['numpy', 'my_kernels'], got {modules!r}.")
    return list(names)


def check_warmup_target(target: object) -> None:
    """A warm-up target of a backend Triton has, or ``None`` (checked before anything starts). Its
    arch is left to the warm-up: a compile ptxas refuses fails the zygote's start with ptxas's
    own words (``tests/test_zygote.py``)."""
    if target is None:
        return
    if not isinstance(target, GPUTarget):
        raise TypeError(
            f"warmup_target must be a triton GPUTarget or None, got {target!r}; "
            f"pass GPUTarget('cuda', 90, 32) (an H100/H200)."
        )
    if target.backend not in BACKENDS:
        raise TargetError(f"warmup_target={target}: {target_problem(target)}.")


def open_store(settings: Settings) -> ArtifactStore | None:
    """The artifact store ``settings`` describe (``None``: no disk cache): ``KILN_CACHE_DIR``
    capped at ``KILN_CACHE_MAX_MB``, with ``KILN_REMOTE_CACHE`` behind it when set (only then
    is :mod:`triton_kiln.remote` imported)."""
    if not settings.use_disk_cache:
        return None
    remote = None
    if settings.remote_cache is not None:
        from triton_kiln.remote import remote_artifacts

        remote = remote_artifacts(settings)
    cap = settings.cache_max_mb
    return ArtifactStore(settings.cache_dir, max_bytes=None if cap is None else cap << 20, remote=remote)


_DEFAULT_POOL: CompilePool | None = None
_DEFAULT_LOCK = threading.Lock()


def get_pool() -> CompilePool:
    """The process-wide pool (created on first use from ``KILN_*`` settings, closed at exit).

    The pool's processes start with its first job (a process served from caches spawns none);
    call ``get_pool().start()`` early (at import time of your library, say) to take their
    start-up off the critical path: it starts them in the background and returns at once.
    """
    global _DEFAULT_POOL
    with _DEFAULT_LOCK:
        if _DEFAULT_POOL is None or _DEFAULT_POOL.closing:
            # Started by its first job (a cache hit needs no process), or by start()/wait_ready().
            _DEFAULT_POOL = CompilePool(start=False)
            import atexit

            atexit.register(_close_at_exit, _DEFAULT_POOL)
        return _DEFAULT_POOL


EXIT_WAIT_S = 5.0
"""How long the exit of a process waits for the process-wide pool's manager thread to end its
processes and remove its temporary folder (milliseconds, usually; a stuck one is not waited for)."""


def _close_at_exit(pool: CompilePool) -> None:
    """The process-wide pool at interpreter exit: queued jobs cancelled, its processes ended and
    its folder in TMPDIR removed, waiting at most :data:`EXIT_WAIT_S` (a folder left by a stuck
    exit, or a killed process, is swept by the next pool to start: :mod:`triton_kiln.pool.temp_root`)."""
    pool.shutdown(wait=False, cancel_futures=True)
    thread = pool._manager.thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=EXIT_WAIT_S)


if TYPE_CHECKING:  # mypy checks that CompilePool satisfies the protocol

    def _is_a_compile_service(pool: CompilePool) -> CompileService:
        return pool

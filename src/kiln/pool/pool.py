"""The compile pool: futures in the caller, one manager thread, a zygote, forked workers.

Data flow::

    caller threads                manager thread (owns every fd below)          processes
    --------------                --------------------------------------          ---------
    submit(request) --+
      key, dedup,     |  command queue + wakeup pipe
      cache lookup    +----------> pending jobs ---> idle worker ---- job ---->  worker k
    Future <----------------------- result / error <----- ok / err ---------  (one socket each)
                                   stderr tail <------------------ pipe -----  worker k
                                   fork / kill / preload ---- SEQPACKET ---->  zygote
                                   forked / exited(pid, status) <-----------  (reaps workers)

* A job runs on exactly one worker, over that worker's own socket, so a dead worker maps to
  exactly one job: that job fails with a :class:`~kiln.errors.WorkerCrashedError` naming the
  signal, exit code, seconds and the worker's last stderr lines; the worker is replaced by a
  fresh fork and queued jobs go on.
* Timeouts and the memory limit are enforced here: the manager asks the zygote to kill the
  worker's process group and fails the job with :class:`~kiln.errors.CompileTimeoutError` or
  :class:`~kiln.errors.WorkerMemoryError` when the zygote reports the death.
* If the zygote dies, its workers die with it; their jobs are retried once on a new zygote.
  If it cannot start, pending jobs fail with :class:`~kiln.errors.ZygoteError` saying why.
* Identical requests in flight share one future; finished artifacts are kept in memory and
  (by default) on disk, so a repeated request never reaches a worker.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import queue
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln import settings as settings_mod
from kiln.artifacts.artifact import CompiledArtifact, to_triton_kernel, write_triton_group
from kiln.artifacts.store import ArtifactStore
from kiln.compile.request import CompileRequest, guess_compile_cost
from kiln.errors import (
    CompileTimeoutError,
    KilnError,
    PoolClosedError,
    RemoteCompileError,
    RemoteTraceback,
    WorkerCrashedError,
    WorkerMemoryError,
    ZygoteDiedError,
    ZygoteError,
)
from kiln.pool.handles import Job, JobQueue, LineTail, WorkerHandle, ZygoteHandle
from kiln.pool.protocol import (
    W_ERR,
    W_HELLO,
    W_JOB,
    W_OK,
    Z_EXITED,
    Z_FORK,
    Z_FORK_FAILED,
    Z_FORKED,
    Z_KILL,
    Z_PRELOAD,
    Z_PRELOADED,
    Z_READY,
    encode,
)
from kiln.pool.worker import decode_exception
from kiln.settings import Settings
from kiln.triton_compat import GPUTarget

log = logging.getLogger("kiln.pool")

_EXIT_GRACE_S = 0.5  # after a worker's exit, how long to wait for the rest of its stderr
_MEMORY_CACHE_ENTRIES = 4096
_NEVER_PRELOAD = ("kiln", "triton", "builtins")


@dataclass
class PoolStats:
    """Counters a pool keeps (read them from :attr:`CompilePool.stats`)."""

    submitted: int = 0
    deduplicated: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    dispatched: int = 0
    compiled: int = 0
    failed: int = 0
    worker_deaths: int = 0
    workers_forked: int = 0
    zygote_starts: int = 0
    requeued: int = 0
    zygote_ready_s: list[float] = field(default_factory=list)
    replacement_s: list[float] = field(default_factory=list)


class CompilePool:
    """A long-lived pool of crash-isolated compile workers forked from a warm zygote.

    The pool starts in the background as soon as it is created (pass ``start=False`` to
    delay), so creating it early takes its start-up off the critical path. Use it as a
    context manager, or call :meth:`shutdown`.

    Args:
        workers, job_timeout_s, memory_limit_mb, cache_dir, use_disk_cache: override the
            matching fields of :class:`~kiln.settings.Settings` (default: ``KILN_*`` variables).
        preload: modules the zygote imports up front, so every worker inherits them
            (modules of submitted kernels are added automatically).
        warmup_target: the target of the zygote's warm-up compile.
    """

    def __init__(
        self,
        *,
        workers: int | None = None,
        job_timeout_s: float | None = None,
        memory_limit_mb: int | None = None,
        cache_dir: str | Path | None = None,
        use_disk_cache: bool | None = None,
        preload: Iterable[str] = (),
        warmup_target: GPUTarget | None = GPUTarget("cuda", 90, 32),  # noqa: B008 - immutable
        settings: Settings | None = None,
        start: bool = True,
    ) -> None:
        base = settings or settings_mod.current()
        overrides = {
            "workers": workers,
            "job_timeout_s": job_timeout_s,
            "memory_limit_mb": memory_limit_mb,
            "cache_dir": Path(cache_dir) if cache_dir is not None else None,
            "use_disk_cache": use_disk_cache,
        }
        self.settings = base.replace(**{k: v for k, v in overrides.items() if v is not None})
        if self.settings.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.settings.workers}")
        self.store = ArtifactStore(self.settings.cache_dir) if self.settings.use_disk_cache else None
        self.stats = PoolStats()
        self.pool_id = uuid.uuid4().hex
        self._preload = list(preload)
        self._warmup_target = warmup_target
        self._lock = threading.Lock()
        self._inflight: dict[str, Job] = {}
        self._memory: dict[str, CompiledArtifact] = {}
        self._commands: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        # Closes the wake-up pipe once: at teardown, at shutdown of a never-started pool, or
        # when a never-started pool is garbage-collected.
        self._close_wake = weakref.finalize(self, _close_fds, self._wake_r, self._wake_w)
        self._close_wake.atexit = False  # at exit the manager thread may still be reading it
        self._closing = False
        self._closed = threading.Event()
        self._ready = threading.Event()
        self._broken: KilnError | None = None
        self._job_ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # ---------------------------------------------------------------- public API

    def start(self) -> CompilePool:
        """Start the manager thread and the zygote in the background (idempotent)."""
        with self._lock:
            if self._thread is None:
                if self._closing:
                    raise PoolClosedError("this pool was shut down; create a new CompilePool")
                self._thread = threading.Thread(target=self._run, name="kiln-pool-manager", daemon=True)
                self._thread.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the zygote is up and every worker has started; ``False`` on timeout."""
        self.start()
        ready = self._ready.wait(timeout)
        if self._broken is not None:
            raise self._broken
        if ready and self._closed.is_set():
            raise PoolClosedError("the pool was shut down; create a new CompilePool")
        return ready

    def submit(
        self,
        request: CompileRequest,
        *,
        timeout_s: float | None = None,
        priority: float | None = None,
    ) -> Future[CompiledArtifact]:
        """Compile ``request`` in a worker; returns a future of its :class:`CompiledArtifact`.

        Identical requests in flight share one future; a request compiled before (in this
        pool, or by any pool using the same cache directory) returns at once from the cache.
        Queued jobs start highest ``priority`` first (default: :func:`guess_compile_cost`, so a
        batch runs its longest compiles first).
        """
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
                self._remember(stored)
                return _done(stored)
            job = self._inflight.get(key)
            if job is not None:
                self.stats.deduplicated += 1
                return job.future
            request.spec.check_shippable()
            future: Future[CompiledArtifact] = Future()
            job = Job(
                id=next(self._job_ids),
                request=request,
                future=future,
                payload=pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL),
                timeout_s=timeout_s if timeout_s is not None else self.settings.job_timeout_s,
                priority=guess_compile_cost(request) if priority is None else priority,
            )
            self._inflight[key] = job
        self.start()
        self._command("job", job)
        return future

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
        """Compile a batch in parallel, in input order, with a progress bar on a terminal.

        With ``return_exceptions`` (the default) a failed job's exception takes its place in
        the list; otherwise the first failure is raised once every job has finished.
        """
        from kiln.progress import progress_bar

        reqs = list(requests)
        futures = [self.submit(r) for r in reqs]
        positions: dict[Future[CompiledArtifact], list[int]] = {}
        for i, future in enumerate(futures):
            positions.setdefault(future, []).append(i)
        results: list[CompiledArtifact | BaseException | None] = [None] * len(futures)
        show = self.settings.progress if progress is None else progress
        with progress_bar(total=len(futures), description=description, enabled=show) as bar:
            for done in as_completed(positions):
                exc = done.exception()
                for i in positions[done]:
                    results[i] = exc if exc is not None else done.result()
                    bar.advance(failed=exc is not None)
        if not return_exceptions:
            for item in results:
                if isinstance(item, BaseException):
                    raise item
        return [r for r in results if r is not None]

    def as_completed(
        self, requests: Iterable[CompileRequest]
    ) -> Iterator[tuple[CompileRequest, Future[CompiledArtifact]]]:
        """Submit ``requests`` and yield ``(request, future)`` pairs as each finishes."""
        by_future: dict[Future[CompiledArtifact], list[CompileRequest]] = {}
        for request in requests:
            by_future.setdefault(self.submit(request), []).append(request)
        for future in as_completed(by_future):
            for request in by_future[future]:
                yield request, future

    def load_kernel(self, request: CompileRequest, artifact: CompiledArtifact | None = None) -> Any:
        """Triton's launchable ``CompiledKernel`` for ``request``, compiled (or cached) by this pool.

        The parent never calls ``triton.compile``: the binary comes from a worker or the cache.
        """
        artifact = artifact or self.compile(request)
        return to_triton_kernel(artifact, request, self._triton_dir(artifact))

    def triton_files(self, artifact: CompiledArtifact) -> dict[str, str]:
        """The artifact laid out as Triton's cache does (``{"<name>.json": path, ...}``)."""
        return write_triton_group(artifact, self._triton_dir(artifact))

    def _triton_dir(self, artifact: CompiledArtifact) -> Path:
        if self.store is not None:
            return self.store.put(artifact) / "triton"
        import tempfile

        return Path(tempfile.mkdtemp(prefix="kiln-kernel-"))

    def preload(self, modules: Iterable[str]) -> None:
        """Have the zygote import ``modules`` so later workers inherit them."""
        self.start()
        self._command("preload", list(modules))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting jobs; finish (or with ``cancel_futures``, cancel) queued ones; end all processes."""
        with self._lock:
            self._closing = True
            thread = self._thread
        self._command("shutdown", cancel_futures)
        if thread is None:
            self._close_wake()
            self._closed.set()
        elif wait and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> CompilePool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True, cancel_futures=exc[0] is not None)

    @property
    def zygote_pid(self) -> int | None:
        zygote = getattr(self, "_zygote", None)
        return zygote.proc.pid if zygote is not None and not zygote.dead else None

    @property
    def zygote_info(self) -> dict[str, Any]:
        """What the current zygote reported when ready (pid, threads, start-up seconds, preloads)."""
        zygote = getattr(self, "_zygote", None)
        return dict(zygote.info) if zygote is not None else {}

    def worker_pids(self) -> list[int]:
        return [w.pid for w in list(getattr(self, "_workers", {}).values()) if w.pid is not None]

    # ---------------------------------------------------------------- caller-side helpers

    def _check_open(self) -> None:
        if self._closing:
            raise PoolClosedError("this CompilePool was shut down; create a new one to compile more")
        if self._broken is not None:
            raise self._broken

    def _command(self, kind: str, payload: Any) -> None:
        self._commands.put((kind, payload))
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _remember(self, artifact: CompiledArtifact) -> None:
        if len(self._memory) >= _MEMORY_CACHE_ENTRIES:
            self._memory.pop(next(iter(self._memory)))
        self._memory[artifact.key] = artifact

    # ================================================================ manager thread

    def _run(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._workers: dict[int, WorkerHandle] = {}
        self._pending = JobQueue()
        self._wids = itertools.count(1)
        self._unsafe_modules: set[str] = set()
        self._zygote: ZygoteHandle | None = None
        self._zygote_failures = 0
        self._next_memory_check = 0.0
        self._replace_since: float | None = None
        self._cancel = False
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        try:
            self._spawn_zygote()
            while True:
                self._drain_commands()
                if self._closing and (self._cancel or not self._pending) and not self._busy():
                    break
                for key, _ in self._sel.select(self._next_timeout()):
                    self._on_readable(*key.data)
                now = time.monotonic()
                self._check_zygote(now)
                self._check_limits(now)
                self._finalize_dead(now)
                self._maintain_workers()
                # Commands that arrived while we waited (their wake-up byte was consumed by this
                # select) must be seen now, not after the next select's timeout.
                self._drain_commands()
                self._dispatch()
        except BaseException as exc:  # a bug in kiln: fail every job loudly, never hang
            log.exception("kiln pool manager crashed")
            self._broken = KilnError(f"kiln's pool manager thread crashed: {type(exc).__name__}: {exc}")
            self._fail_everything(self._broken)
        finally:
            self._teardown()

    # -- commands ---------------------------------------------------------------

    def _drain_commands(self) -> None:
        while True:
            try:
                kind, payload = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "job":
                if self._broken is not None:
                    self._fail(payload, self._broken)
                else:
                    self._pending.push(payload)
            elif kind == "preload":
                self._preload.extend(payload)
                self._request_preload(payload)
            elif kind == "shutdown":
                self._cancel = self._cancel or bool(payload)
                if self._cancel:
                    while self._pending:
                        job = self._pending.pop()
                        with self._lock:
                            self._inflight.pop(job.request.key, None)
                        job.future.cancel()

    def _workers_ready(self) -> bool:
        workers = getattr(self, "_workers", {})
        return len(workers) >= self.settings.workers and all(w.ready for w in workers.values())

    def _busy(self) -> bool:
        return any(w.job is not None for w in self._workers.values())

    def _next_timeout(self) -> float:
        if not self._commands.empty():
            return 0.0
        timeout = 1.0
        now = time.monotonic()
        for w in self._workers.values():
            if w.deadline is not None:
                timeout = min(timeout, max(0.0, w.deadline - now))
            if w.exited:
                timeout = min(timeout, 0.05)
        if self.settings.memory_limit_mb and self._busy():
            timeout = min(timeout, self.settings.memory_poll_s)
        if self._zygote is not None and not self._zygote.ready:
            timeout = min(timeout, 0.1)
        return timeout

    # -- I/O ----------------------------------------------------------------------

    def _on_readable(self, kind: str, ref: Any) -> None:
        if kind == "wake":
            with contextlib.suppress(OSError):
                os.read(self._wake_r, 65536)
        elif kind == "zctl":
            self._read_zygote(ref)
        elif kind == "zout":
            if not ref.read_output():
                self._unregister(ref.out_fd)
        elif kind == "chan":
            self._read_worker(ref)
        elif kind == "err":
            self._read_worker_err(ref)

    def _unregister(self, fileobj: Any) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(fileobj)

    def _read_zygote(self, zygote: ZygoteHandle) -> None:
        while True:
            try:
                data = zygote.ctl.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._unregister(zygote.ctl)
                zygote.read_output()
                if zygote is self._zygote:
                    self._on_zygote_death(zygote, planned=False)
                return
            self._on_zygote_message(zygote, pickle.loads(data))

    def _on_zygote_message(self, zygote: ZygoteHandle, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == Z_READY:
            zygote.ready = True
            zygote.info = message[1]
            self._zygote_failures = 0
            self.stats.zygote_ready_s.append(time.monotonic() - zygote.started_at)
            self._on_preloaded(zygote, message[1]["preloaded"])
            log.debug("zygote %s ready: %s", zygote.proc.pid, message[1])
        elif kind == Z_PRELOADED:
            self._on_preloaded(zygote, message[1])
        elif kind == Z_FORKED:
            worker = self._workers.get(message[1])
            if worker is not None:
                worker.pid = message[2]
        elif kind == Z_FORK_FAILED:
            worker = self._workers.pop(message[1], None)
            if worker is not None:
                self._close_worker(worker)
            log.warning("kiln zygote could not fork a worker (%s); restarting the zygote", message[2])
            self._on_zygote_death(zygote, planned=True)
        elif kind == Z_EXITED:
            pid, returncode = message[1], message[2]
            for worker in self._workers.values():
                if worker.pid == pid and not worker.exited:
                    worker.exited = True
                    worker.returncode = returncode
                    worker.exited_at = time.monotonic()
                    self._read_worker(worker)

    def _on_preloaded(self, zygote: ZygoteHandle, results: dict[str, str | None]) -> None:
        restart = False
        for module, error in results.items():
            zygote.preloading.discard(module)
            if error is None:
                zygote.preloaded.add(module)
                continue
            self._unsafe_modules.add(module)
            if "threads" in error:
                restart = True
                warnings.warn(
                    f"kiln: {error} in the zygote, which must stay single-threaded to fork safely; "
                    f"workers will import {module!r} themselves instead (slower start). Set the "
                    f"library's thread-count variable to 1 to let kiln preload it.",
                    RuntimeWarning,
                    stacklevel=1,
                )
            else:
                log.warning("kiln could not preload %s in the zygote: %s", module, error)
        if restart:
            self._on_zygote_death(zygote, planned=True)

    def _read_worker(self, worker: WorkerHandle) -> None:
        while worker.chan_open:
            try:
                data = worker.chan.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                worker.chan_open = False
                self._unregister(worker.chan)
                return
            for frame in worker.reader.feed(data):
                self._on_worker_message(worker, pickle.loads(frame))

    def _read_worker_err(self, worker: WorkerHandle) -> None:
        while worker.err_open:
            try:
                data = os.read(worker.err_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                worker.err_open = False
                self._unregister(worker.err_fd)
                return
            worker.tail.feed(data)

    def _on_worker_message(self, worker: WorkerHandle, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == W_HELLO:
            worker.pid = message[1]
            worker.ready = True
            if worker.replaces_since is not None:
                self.stats.replacement_s.append(time.monotonic() - worker.replaces_since)
            if self._workers_ready():
                self._ready.set()
            return
        job = worker.job
        if job is None or job.id != message[1]:
            return  # a reply for a job already given up on (timed out, killed)
        worker.job = None
        worker.deadline = None
        if kind == W_OK:
            self._complete(job, message[2])
        elif kind == W_ERR:
            _, _, blob, type_name, text, tb, seconds = message
            self._fail(job, self._job_exception(job, blob, type_name, text, tb, seconds, worker))

    def _job_exception(
        self,
        job: Job,
        blob: bytes | None,
        type_name: str,
        text: str,
        tb: str,
        seconds: float,
        worker: WorkerHandle,
    ) -> BaseException:
        if blob is not None:
            try:
                exc = decode_exception(blob)
                exc.__cause__ = RemoteTraceback(tb)
                return exc
            except Exception:
                pass  # the parent cannot rebuild it (class not importable here): keep it as text
        return RemoteCompileError(
            job.request.info(),
            seconds,
            worker.tail.snapshot(),
            exc_type=type_name,
            exc_message=text,
            remote_traceback=tb,
        )

    # -- results ----------------------------------------------------------------------

    def _complete(self, job: Job, artifact: CompiledArtifact) -> None:
        if self.store is not None:
            try:
                self.store.put(artifact)
            except OSError as exc:
                log.warning("kiln could not store artifact %s: %s", artifact.key[:12], exc)
        with self._lock:
            self._inflight.pop(job.request.key, None)
            self._remember(artifact)
            self.stats.compiled += 1
        if not job.future.done():
            job.future.set_result(artifact)

    def _fail(self, job: Job, exc: BaseException) -> None:
        with self._lock:
            if self._inflight.get(job.request.key) is job:
                del self._inflight[job.request.key]
            self.stats.failed += 1
        future = job.future
        if future.done() or (not future.running() and not future.set_running_or_notify_cancel()):
            return  # finished or cancelled already
        future.set_exception(exc)

    def _fail_everything(self, exc: KilnError) -> None:
        pending = getattr(self, "_pending", None)
        jobs = list(pending or ())
        if pending is not None:
            pending.clear()
        jobs += [w.job for w in getattr(self, "_workers", {}).values() if w.job is not None]
        with self._lock:
            jobs += [j for j in self._inflight.values() if j not in jobs]
        while True:
            try:
                kind, payload = self._commands.get_nowait()
            except queue.Empty:
                break
            if kind == "job":
                jobs.append(payload)
        for job in jobs:
            self._fail(job, exc)

    # -- zygote lifecycle ---------------------------------------------------------------

    def _spawn_zygote(self) -> None:
        self.stats.zygote_starts += 1
        zygote = ZygoteHandle(self.pool_id, self.settings.stderr_tail_lines)
        target = self._warmup_target
        zygote.send_init(
            {
                "sys_path": list(sys.path),
                "cwd": os.getcwd(),
                # Triton's key is cached machine-wide (not per pool cache): it depends on Triton only.
                "cache_dir": settings_mod.current().cache_dir,
                "warmup_target": (target.backend, target.arch, target.warp_size) if target else None,
                "preload": [m for m in dict.fromkeys(self._preload) if m not in self._unsafe_modules],
            }
        )
        self._zygote = zygote
        self._sel.register(zygote.ctl, selectors.EVENT_READ, ("zctl", zygote))
        self._sel.register(zygote.out_fd, selectors.EVENT_READ, ("zout", zygote))

    def _check_zygote(self, now: float) -> None:
        zygote = self._zygote
        if zygote is None or zygote.dead:
            return
        if zygote.proc.poll() is not None:
            zygote.read_output()
            self._on_zygote_death(zygote, planned=False)
        elif not zygote.ready and now - zygote.started_at > self.settings.zygote_start_timeout_s:
            zygote.timed_out = True
            self._on_zygote_death(zygote, planned=False)

    def _on_zygote_death(self, zygote: ZygoteHandle, *, planned: bool) -> None:
        if zygote.dead:
            return
        was_ready = zygote.ready
        returncode = zygote.proc.poll()
        if returncode is None and not planned:
            # Its socket closed first; give it a moment to exit so the error can say how.
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = zygote.proc.wait(timeout=2.0)
        self._unregister(zygote.ctl)
        self._unregister(zygote.out_fd)
        zygote.read_output()
        zygote.kill()
        self._zygote = None
        # Its workers die with it (parent-death signal): retry their jobs on a new zygote.
        for worker in list(self._workers.values()):
            if worker.pid is not None:
                # Their children (ptxas) have no such signal: end the groups from here (best
                # effort; the reaper is gone, so this is the only chance to).
                with contextlib.suppress(OSError):
                    os.killpg(worker.pid, signal.SIGKILL)
            job = worker.job
            worker.job = None
            self._drop_worker(worker)
            if job is None:
                continue
            if not planned:
                job.attempts += 1
            if job.attempts > 1:
                self._fail(
                    job,
                    ZygoteDiedError(
                        job.request.info(), time.monotonic() - job.started, worker.tail.snapshot()
                    ),
                )
            else:
                self.stats.requeued += 1
                self._pending.push(job, front=True)
        if self._closing:
            return
        if not was_ready and not planned:
            self._zygote_failures += 1
            if zygote.timed_out:
                reason = f"it did not become ready within {self.settings.zygote_start_timeout_s:.0f} s"
            else:
                from kiln.errors import describe_exit

                reason = f"it ended with {describe_exit(returncode)} during start-up"
            if self._zygote_failures >= self.settings.zygote_restarts:
                self._broken = ZygoteError(
                    f"{reason} ({self._zygote_failures} attempts in a row)", zygote.tail.snapshot()
                )
                self._fail_everything(self._broken)
                self._ready.set()  # wake wait_ready(), which raises the error
                return
            log.warning("kiln zygote failed to start (%s); retrying", reason)
        elif not planned:
            log.warning("kiln zygote (pid %s) died; starting a new one", zygote.proc.pid)
        self._spawn_zygote()

    def _request_preload(self, modules: list[str]) -> None:
        zygote = self._zygote
        if zygote is None or zygote.dead:
            return
        wanted = [
            m
            for m in modules
            if m not in zygote.preloaded
            and m not in zygote.preloading
            and m not in self._unsafe_modules
            and m.split(".")[0] not in _NEVER_PRELOAD
            and m not in ("__main__", "__mp_main__")
        ]
        if wanted and zygote.ready:
            zygote.preloading.update(wanted)
            zygote.send(Z_PRELOAD, wanted)
        elif wanted:
            self._preload.extend(wanted)

    # -- workers ----------------------------------------------------------------------------

    def _maintain_workers(self) -> None:
        zygote = self._zygote
        if zygote is None or not zygote.ready or zygote.dead:
            return
        if self._closing and not self._pending:
            return  # shutting down: queued jobs still need workers, nothing else does
        while len(self._workers) < self.settings.workers:
            self._fork_worker(zygote)
            if zygote.dead:
                return

    def _fork_worker(self, zygote: ZygoteHandle) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        wid = next(self._wids)
        try:
            zygote.send(Z_FORK, wid, fds=[child_end.fileno(), err_w])
        except OSError:
            parent_end.close()
            os.close(err_r)
            self._on_zygote_death(zygote, planned=False)
            return
        finally:
            child_end.close()
            os.close(err_w)
        parent_end.setblocking(False)
        os.set_blocking(err_r, False)
        worker = WorkerHandle(wid, parent_end, err_r, LineTail(self.settings.stderr_tail_lines))
        worker.replaces_since, self._replace_since = self._replace_since, None
        self._workers[wid] = worker
        self.stats.workers_forked += 1
        self._sel.register(parent_end, selectors.EVENT_READ, ("chan", worker))
        self._sel.register(err_r, selectors.EVENT_READ, ("err", worker))

    def _dispatch(self) -> None:
        if not self._pending:
            return
        for worker in self._workers.values():
            if not self._pending:
                return
            if not worker.ready or worker.job is not None or worker.exited or worker.kill_reason:
                continue
            job = self._pending.pop()
            if not job.future.running() and not job.future.set_running_or_notify_cancel():
                with self._lock:
                    self._inflight.pop(job.request.key, None)
                continue
            spec = job.request.spec
            if not spec.by_source:
                self._request_preload([spec.module])
            now = time.monotonic()
            worker.job = job
            job.started = now
            worker.deadline = now + job.timeout_s
            try:
                worker.chan.setblocking(True)
                worker.chan.sendall(encode((W_JOB, job.id, job.payload)))
            except OSError:
                worker.job = None  # the worker is dying; the job never started
                worker.deadline = None
                self._pending.push(job, front=True)
                continue
            finally:
                with contextlib.suppress(OSError):
                    worker.chan.setblocking(False)
            self.stats.dispatched += 1

    def _check_limits(self, now: float) -> None:
        zygote = self._zygote
        for worker in self._workers.values():
            if worker.job is None or worker.kill_reason or worker.exited:
                continue
            if worker.deadline is not None and now >= worker.deadline:
                self._kill_worker(worker, "timeout", zygote)
        limit = self.settings.memory_limit_mb
        if not limit or now < self._next_memory_check:
            return
        self._next_memory_check = now + self.settings.memory_poll_s
        for worker in self._workers.values():
            if worker.job is None or worker.kill_reason or worker.exited or worker.pid is None:
                continue
            rss = _group_rss(worker)
            if rss is not None and rss > limit * 1024 * 1024:
                worker.peak_rss = rss
                self._kill_worker(worker, "memory", zygote)

    def _kill_worker(self, worker: WorkerHandle, reason: str, zygote: ZygoteHandle | None) -> None:
        worker.kill_reason = reason
        if zygote is not None and not zygote.dead and worker.pid is not None:
            zygote.send(Z_KILL, worker.pid)

    def _finalize_dead(self, now: float) -> None:
        for worker in list(self._workers.values()):
            if not worker.exited:
                continue
            waited = now - worker.exited_at
            if (worker.err_open or worker.chan_open) and waited < _EXIT_GRACE_S:
                continue
            self._read_worker(worker)
            self._read_worker_err(worker)
            job = worker.job
            worker.job = None
            self.stats.worker_deaths += 1
            self._drop_worker(worker)
            self._replace_since = worker.exited_at
            if job is not None:
                self._fail(job, self._death_error(job, worker, now))

    def _death_error(self, job: Job, worker: WorkerHandle, now: float) -> KilnError:
        info = job.request.info()
        seconds = (worker.exited_at or now) - job.started
        tail = worker.tail.snapshot()
        if worker.kill_reason == "timeout":
            return CompileTimeoutError(
                info, seconds, tail, worker.returncode, detail=f"the limit is {job.timeout_s:g} s"
            )
        if worker.kill_reason == "memory":
            peak = worker.peak_rss / 2**20
            return WorkerMemoryError(
                info,
                seconds,
                tail,
                worker.returncode,
                detail=f"it reached {peak:.0f} MiB; the limit is {self.settings.memory_limit_mb} MiB",
            )
        return WorkerCrashedError(info, seconds, tail, worker.returncode)

    def _drop_worker(self, worker: WorkerHandle) -> None:
        self._workers.pop(worker.wid, None)
        self._close_worker(worker)

    def _close_worker(self, worker: WorkerHandle) -> None:
        self._unregister(worker.chan)
        if worker.err_fd >= 0:
            self._unregister(worker.err_fd)
        worker.close()

    # -- teardown -------------------------------------------------------------------------------

    def _teardown(self) -> None:
        zygote = self._zygote
        for worker in list(self._workers.values()):
            if worker.job is not None and not worker.job.future.done():
                self._fail(worker.job, PoolClosedError("the pool shut down before this job finished"))
            self._drop_worker(worker)
        if zygote is not None and not zygote.dead:
            with contextlib.suppress(OSError):
                zygote.ctl.close()  # EOF: the zygote kills its workers and exits
            try:
                zygote.proc.wait(timeout=5)
            except Exception:
                zygote.kill()
            zygote.close()
            zygote.dead = True
        for job in list(self._pending):
            if not job.future.done():
                job.future.cancel()
        self._pending.clear()
        with contextlib.suppress(Exception):
            self._sel.close()
        self._close_wake()
        self._ready.set()  # nobody waits for a pool that has ended
        self._closed.set()


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _done(artifact: CompiledArtifact) -> Future[CompiledArtifact]:
    future: Future[CompiledArtifact] = Future()
    future.set_result(artifact)
    return future


def _group_rss(worker: WorkerHandle) -> int | None:
    """Resident memory of a worker and its children (ptxas), in bytes."""
    import psutil

    try:
        if worker.ps is None or worker.ps.pid != worker.pid:
            worker.ps = psutil.Process(worker.pid)
        total = int(worker.ps.memory_info().rss)
        for child in worker.ps.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += int(child.memory_info().rss)
        return total
    except psutil.Error:
        return None


_DEFAULT_POOL: CompilePool | None = None
_DEFAULT_LOCK = threading.Lock()


def get_pool() -> CompilePool:
    """The process-wide pool (created on first use from ``KILN_*`` settings, closed at exit).

    Call it early (at import time of your library, say) to take the pool's start-up off the
    critical path: it starts in the background and returns at once.
    """
    global _DEFAULT_POOL
    with _DEFAULT_LOCK:
        if _DEFAULT_POOL is None or _DEFAULT_POOL._closing:
            # Started by its first job (a cache hit needs no process), or by start()/wait_ready().
            _DEFAULT_POOL = CompilePool(start=False)
            import atexit

            atexit.register(_DEFAULT_POOL.shutdown, wait=False, cancel_futures=True)
        return _DEFAULT_POOL

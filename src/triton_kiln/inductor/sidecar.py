"""kiln's Inductor sidecar, as the caller's process sees it: one process that imports torch and
does every Triton compile job's in-process work (what Inductor's own compile worker does), with
its compiles in kiln's pool behind it.

::

    caller's process                                   sidecar process (sidecar_main)
    ----------------                                   ------------------------------
    GraphLowering.__init__ (a graph to compile;
      a warm process, its graphs from Inductor's
      caches, never gets here) -> start() ------ spawn -->  import torch, Inductor;
                                                       triton_kiln.inductor installed in-thread
                             -> want_pool() ----------->  ("start_pool"): kiln's pool started
    InductorPool.submit(_worker_compile_triton, ...)
      -> submit(fn, args, fallback):
         sidecar ready:                                 Inductor's _worker_compile_triton, its
           ("job", id, pickle(fn, args)) ---------->    compiles in the sidecar's kiln pool
         not ready yet, dead or closed:
           fallback(): the caller's own kiln threads (kiln's pool in the caller)
      reader thread  <----------------------------     ("log", record): logged here
      future <- unpickled kernel  <---------------     ("done", id, ("ok", (kernel, us)) | ("error", exc))
    sidecar died: its jobs in flight -> fallback()

Why: the per-kernel work around a compile (the kernel's module executed, ``@triton.jit``'s
source read, each config described, Triton's cache filled, the kernel pickled) is Python that
holds the caller's GIL. Inductor's main thread generates code meanwhile, and lost that time to
kiln's threads (``bench/inductor_gil.py``). Stock Inductor does that work in its worker
processes; here it is done in this one, so the caller only unpickles results, as with stock.

No job ever waits for the sidecar: until it is ready (importing torch takes it 3-4 s on a machine
with bytecode caches, ~14 s on one without, such as the GPU machine's image with
``PYTHONDONTWRITEBYTECODE=1``), and after it failed, jobs take the in-process path
(:func:`triton_kiln.inductor.process_pool.compile_job`), which compiles in the caller's own
kiln pool. Nothing is lost when the sidecar dies. ``KILN_INDUCTOR_SIDECAR=0`` uses that path only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from triton_kiln import child_env
from triton_kiln.errors import describe_exit
from triton_kiln.pool.pause import PAUSE
from triton_kiln.sandbox.channel import Died, TimedOut, WorkerProcess

log = logging.getLogger("kiln.inductor")

# The sidecar process runs this module, which imports the hooks (they import this one): named, not
# imported, so the parent's side never imports the child's.
_MODULE = "triton_kiln.inductor.sidecar_main"
_READ_SLICE_S = 3600.0  # a reader's wait for the next message once the sidecar is ready

Fallback = Callable[[], "Future[Any]"]


@dataclass
class SidecarStats:
    """What the sidecar did, for benchmarks and tests (times from :func:`time.monotonic`)."""

    spawned_at: float | None = None
    ready_at: float | None = None
    startup_s: float | None = None  # as the sidecar measured its own start
    first_job_at: float | None = None
    jobs: int = 0  # sent to the sidecar
    idle_releases: int = 0  # times it exited after KILN_IDLE_S without a job (started again on need)
    fallbacks: int = 0  # run in the caller's process instead (before it was ready, or after it died)
    died: str | None = None
    pid: int | None = None


@dataclass
class _Job:
    future: Future[Any]
    fallback: Fallback


@dataclass
class _State:
    phase: str = "idle"  # idle, starting, ready, dead, closed
    next_id: int = 0
    pending: dict[int, _Job] = field(default_factory=dict)
    pool_wanted: bool = False  # want_pool() came before the sidecar was ready


class Sidecar:
    """One sidecar process, started on demand (:meth:`start`), gone once idle for ``idle_s``
    (started again on the next demand), never restarted after a death: from then on every job
    runs through its fallback (the reason is logged once at WARNING)."""

    def __init__(
        self,
        threads: int,
        start_timeout_s: float,
        preload: tuple[str, ...] = (),
        idle_s: float | None = None,
    ) -> None:
        from triton_kiln import settings

        self.threads = threads
        self.start_timeout_s = start_timeout_s
        # with no job in flight for idle_s (KILN_IDLE_S), the sidecar exits; a later graph
        # lowered (or job) starts a new one
        self.idle_s = settings.current().idle_s if idle_s is None else idle_s
        self.preload = preload  # modules the sidecar imports first (tests: a fake GPU driver)
        self.stats = SidecarStats()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._state = _State()
        self._process: WorkerProcess | None = None
        _LIVE.add(self)

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's sidecar, socket and reader thread are not this
        process's. Start over, idle: a job here starts the child's own sidecar (or runs in its
        threads), never writes to the parent's socket."""
        self.stats = SidecarStats()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._state = _State()
        self._process = None

    @property
    def phase(self) -> str:
        with self._lock:
            return self._state.phase

    def start(self) -> None:
        """Spawn the sidecar in the background (idempotent; returns at once)."""
        with self._lock:
            if self._state.phase != "idle":
                return
            self._state.phase = "starting"
        threading.Thread(target=self._run, name="kiln-inductor-sidecar", daemon=True).start()

    def want_pool(self) -> None:
        """Have the sidecar start its kiln pool now, or as soon as it is ready (a graph is
        being lowered: compiles follow). A warm process never asks, so its sidecar starts no
        compile process."""
        with self._lock:
            ready = self._state.phase == "ready"
            if not ready:
                self._state.pool_wanted = True
        if ready:
            self._send_message(("start_pool", -1, b""))

    def submit(
        self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], fallback: Fallback
    ) -> Future[Any]:
        """``fn(*args, **kwargs)`` in the sidecar when it is ready; otherwise (starting, dead,
        closed, or a job that cannot be pickled) ``fallback()``'s future, at once."""
        PAUSE.interrupt()  # a job sent while kiln's processes are held must not wait for the hold
        with self._lock:
            if self.stats.first_job_at is None:
                self.stats.first_job_at = time.monotonic()
            ready = self._state.phase == "ready"
        if not ready:
            self.start()
            return self._fall_back(fallback)
        try:
            blob = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            log.debug("kiln: an Inductor job could not be pickled for the sidecar (%s): run here", exc)
            return self._fall_back(fallback)
        future: Future[Any] = Future()
        with self._lock:
            sending = self._state.phase == "ready"  # not if it died since (its jobs are rerun)
            if sending:
                job_id = self._state.next_id
                self._state.next_id += 1
                self._state.pending[job_id] = _Job(future, fallback)
        if not sending:
            return self._fall_back(fallback)
        if self._send_message(("job", job_id, blob)):
            with self._lock:
                self.stats.jobs += 1
        return future

    def close(self) -> None:
        """Stop the sidecar; jobs still in flight go to their fallback."""
        with self._lock:
            if self._state.phase == "closed":
                return
            self._state.phase = "closed"
            orphans = self._take_pending()
            process = self._process
        self._rerun(orphans)
        if process is not None:
            process.close(wait_s=5.0)

    # -- the reader thread ----------------------------------------------------------------------

    def _run(self) -> None:
        self.stats.spawned_at = time.monotonic()
        try:
            process = WorkerProcess(
                _MODULE, child_env.INDUCTOR_SIDECAR_FD, child_env.INDUCTOR_SIDECAR_PARENT, self._init()
            )
        except Exception as exc:
            self._died(f"could not be started ({exc})")
            return
        with self._lock:
            self._process = process
            self.stats.pid = process.pid
            closed = self._state.phase == "closed"
        if closed:
            process.close(wait_s=5.0)
            return
        try:
            self._read(process)
        except Died as died:
            with self._lock:
                closed = self._state.phase == "closed"
            if not closed:
                reason = (
                    died.args[0]
                    if died.args and died.args[0]
                    else f"died with {describe_exit(process.wait(10))}"
                )
                tail = process.stderr_tail()
                self._died(reason + ("; it printed: " + " | ".join(tail[-3:]) if tail else ""))
        except TimedOut:
            process.kill()
            self._died(f"did not start within {self.start_timeout_s:g} s (KILN_ZYGOTE_START_TIMEOUT_S)")

    def _read(self, process: WorkerProcess) -> None:
        deadline = self.start_timeout_s
        ready = False
        while True:
            try:
                message = process.receive(deadline)
            except TimedOut:
                if not ready:
                    raise
                if self._release_if_idle(process):
                    return
                continue
            kind = message[0]
            if kind == "ready":
                self.stats.startup_s = float(message[1])
                self.stats.ready_at = time.monotonic()
                ready = True
                deadline = min(_READ_SLICE_S, max(self.idle_s, 0.05))
                self._on_ready()
            elif kind == "done":
                self._on_done(int(message[1]), message[2])
            elif kind == "log":
                _relog(message[1])
            elif kind == "start_failed":
                raise Died(f"failed to start: {str(message[1]).strip().splitlines()[-1]}")

    def _release_if_idle(self, process: WorkerProcess) -> bool:
        """No message for ``idle_s``: with no job in flight, the sidecar exits (its kiln pool
        with it) and the next :meth:`start` spawns a new one. ``False``: a job is running."""
        with self._lock:
            if self._state.phase != "ready" or self._state.pending:
                return False
            self._state = _State(next_id=self._state.next_id)  # idle: start() spawns anew
            self._process = None
            self.stats.idle_releases += 1
        process.close(wait_s=5.0)
        log.debug("kiln: the Inductor sidecar exited after %gs without a job (KILN_IDLE_S)", self.idle_s)
        return True

    def _init(self) -> dict[str, Any]:
        from triton_kiln import settings

        current = settings.current()
        return {
            "settings": {f.name: getattr(current, f.name) for f in dataclasses.fields(current)},
            "log_level": logging.getLogger("kiln").getEffectiveLevel(),
            "threads": self.threads,
            "preload": list(self.preload),
        }

    def _on_ready(self) -> None:
        with self._lock:
            if self._state.phase != "starting":
                return
            self._state.phase = "ready"
            pool_wanted = self._state.pool_wanted
        if pool_wanted:
            self._send_message(("start_pool", -1, b""))

    def _on_done(self, job_id: int, payload: bytes) -> None:
        PAUSE.wait_running()  # the kernel is unpickled under the GIL: not while Inductor times one
        with self._lock:
            job = self._state.pending.pop(job_id, None)
        if job is None:  # rerun elsewhere already (closed)
            return
        try:
            status, value = pickle.loads(payload)
        except Exception as exc:  # a result this process cannot load: compile it here instead
            log.warning(
                "kiln: a result from the Inductor sidecar could not be loaded (%s): compiled here", exc
            )
            self._rerun([job])
            return
        if status == "ok":
            job.future.set_result(value)
        else:
            job.future.set_exception(value)

    def _send_message(self, message: tuple[str, int, bytes]) -> bool:
        """One frame to the sidecar; one sender at a time (Inductor submits from several threads,
        and two ``sendall`` calls at once could interleave their frames on the stream)."""
        process = self._process
        if process is None:
            return False
        try:
            with self._send_lock:
                process.send(message)
        except Died:
            return False  # the reader sees the death and reruns every pending job
        return True

    # -- a sidecar that died ----------------------------------------------------------------------

    def _died(self, reason: str) -> None:
        with self._lock:
            if self._state.phase == "closed":
                return
            self._state.phase = "dead"
            orphans = self._take_pending()
        self.stats.died = reason
        log.warning(
            "kiln: the Inductor sidecar (pid %s) %s: its %d Triton compile job(s) in flight and every "
            "later one run in this process's threads instead (their compiles still in kiln's pool)",
            self.stats.pid,
            reason,
            len(orphans),
        )
        self._rerun(orphans)

    def _take_pending(self) -> list[_Job]:
        orphans = list(self._state.pending.values())
        self._state.pending.clear()
        return orphans

    def _rerun(self, jobs: list[_Job]) -> None:
        for job in jobs:
            _chain(self._fall_back(job.fallback), job.future)

    def _fall_back(self, fallback: Fallback) -> Future[Any]:
        with self._lock:
            self.stats.fallbacks += 1
        return fallback()


_LIVE: weakref.WeakSet[Sidecar] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for sidecar in list(_LIVE):
        sidecar._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _chain(source: Future[Any], target: Future[Any]) -> None:
    def copy(done: Future[Any]) -> None:
        exc = done.exception()
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


def _relog(fields: dict[str, Any]) -> None:
    logger = logging.getLogger(str(fields["name"]))
    if logger.isEnabledFor(int(fields["levelno"])):
        logger.handle(logging.makeLogRecord(fields))

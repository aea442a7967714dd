"""The manager thread: the one loop that owns a pool's processes, sockets and pending jobs.

::

    caller threads                   manager thread (this module)                 processes
    --------------                   ----------------------------                 ---------
    send(Submit | PreloadModules |   command queue + wake-up pipe
         Shutdown) -------------->   pending jobs -> Workers.dispatch -- RunJob --> worker k
    Future <------------------------ JobTable.complete / fail <- JobDone/Failed -- (own socket)
                                     stderr tail <------------------- pipe ------ worker k
                                     Supervisor / Workers: Fork, Kill, Preload --> zygote
                                     Ready, Preloaded, Forked, Exited <----------- (reaps workers)

Each turn of the loop: drain commands; wait on every fd (wake-up pipe, the zygote's socket and
output, each worker's socket and stderr) until the nearest deadline; then check the zygote
(:class:`~triton_kiln.pool.supervisor.Supervisor`), the workers' limits, finish the workers that died,
fork replacements and dispatch (:class:`~triton_kiln.pool.workers.Workers`).

Only this thread reads the fds above or registers them; caller threads put commands on the
queue and write one byte to the wake-up pipe (and close it for a pool that never started).
A bug in this loop fails every job with a :class:`~triton_kiln.errors.KilnError`; it never hangs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_kiln.errors import KilnError, ZygoteError
from triton_kiln.pool.handles import ZygoteHandle
from triton_kiln.pool.jobs import Job, JobQueue, JobTable
from triton_kiln.pool.node_jobs import NodeJobs
from triton_kiln.pool.pause import PAUSE
from triton_kiln.pool.protocol import Exited, Forked, ForkFailed, Preloaded, Ready, unpack
from triton_kiln.pool.supervisor import Supervisor
from triton_kiln.pool.workers import Workers
from triton_kiln.settings import Settings
from triton_kiln.triton_compat import GPUTarget

log = logging.getLogger("kiln.pool")


@dataclass(frozen=True)
class Submit:
    """Queue this job."""

    job: Job


@dataclass(frozen=True)
class PreloadModules:
    """Have the zygote import these modules (and every later zygote too)."""

    modules: list[str]


@dataclass(frozen=True)
class Resume:
    """Start the zygote again if it exited idle (``start()``, ``wait_ready()``)."""


@dataclass(frozen=True)
class Shutdown:
    """Stop once queued jobs are done (or cancel them first)."""

    cancel_futures: bool


Command = Submit | PreloadModules | Resume | Shutdown


class Manager:
    """A pool's manager thread and all of its state (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        pool_id: str,
        table: JobTable,
        *,
        preload: list[str],
        warmup_target: GPUTarget | None,
        triton_key_dir: Path | None,
    ) -> None:
        self.settings = settings
        self.table = table
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        # Closes the pipe and the selector once: at teardown, at shutdown of a never-started
        # pool, or when a never-started pool is garbage-collected.
        self.close_fds = weakref.finalize(self, _close, self.selector, self.wake_r, self.wake_w)
        self.close_fds.atexit = False  # at exit the manager thread may still be reading them
        self.pending = JobQueue()
        # Compile once per node (node_jobs.py): only where a disk cache can carry the artifacts.
        self.node = NodeJobs(settings, table.store, table.stats) if settings.node and table.store else None
        table.node = self.node
        self.supervisor = Supervisor(
            settings,
            pool_id,
            table,
            self.selector,
            self,
            preload=preload,
            warmup_target=warmup_target,
            triton_key_dir=triton_key_dir,
        )
        self.workers = Workers(settings, table, self.selector, self.supervisor, self.pending)
        self.thread: threading.Thread | None = None
        self._cancel = False
        # Idle release (KILN_IDLE_S): with no work for idle_s, the zygote and its workers exit,
        # giving back their memory and process slots; the next job (or start()) spawns a zygote.
        self.idle_since: float | None = None
        self.parked = False

    # ---------------------------------------------------------------- caller threads

    def start(self) -> None:
        """Start the thread (the caller holds the pool's lock)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self.run, name="kiln-pool-manager", daemon=True)
            self.thread.start()

    def close_if_never_started(self) -> None:
        """Close the pipe and the selector of a pool dropped before it started."""
        if self.thread is None:
            self.close_fds()

    def send(self, command: Command) -> None:
        self.commands.put(command)
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self.wake_w, b"x")

    # ---------------------------------------------------------------- the loop

    def run(self) -> None:
        workers = self.workers
        try:
            self.supervisor.spawn()
            while True:
                PAUSE.wait_running()  # while a benchmark is timed: no result handling, no GIL taken
                self._drain_commands()
                # Cancelling (Ctrl-C in a ``with`` block, shutdown(cancel_futures=True)) does not
                # wait for running jobs: teardown fails them and the zygote kills their groups.
                idle = not self._busy()
                if self.table.closing and (self._cancel or idle):
                    break
                for key, _ in self.selector.select(self._next_timeout()):
                    self._on_readable(*key.data)
                now = time.monotonic()
                self._poll_node(now)
                if self.parked and self.pending:
                    self._resume()
                self.supervisor.check(now)
                workers.check_limits(now)
                workers.finalize_dead(now)
                workers.maintain()
                # Commands that arrived while we waited (their wake-up byte was consumed by this
                # select) must be seen now, not after the next select's timeout.
                self._drain_commands()
                workers.dispatch()
                self._release_if_idle(time.monotonic())
        except BaseException as exc:  # a bug in kiln: fail every job loudly, never hang
            log.exception("kiln pool manager crashed")
            self.table.broken = KilnError(f"kiln's pool manager thread crashed: {type(exc).__name__}: {exc}")
            self.fail_everything(self.table.broken)
        finally:
            self._teardown()

    def _drain_commands(self) -> None:
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, Submit):
                self._admit(command.job)
            elif isinstance(command, PreloadModules):
                self.supervisor.preload.extend(command.modules)
                self.supervisor.request_preload(command.modules)
            elif isinstance(command, Resume):
                if self.parked:
                    self._resume()
            elif isinstance(command, Shutdown):
                self._cancel = self._cancel or command.cancel_futures
                if self._cancel:
                    waiting = self.node.drop_waiting() if self.node is not None else []
                    for job in waiting:
                        self.table.forget(job)
                        job.future.cancel()
                    while self.pending:
                        job = self.pending.pop()
                        self.table.forget(job)
                        job.future.cancel()

    def _admit(self, job: Job) -> None:
        """Queue ``job``; a job whose own data cannot be queued fails alone, the pool goes on."""
        if self.table.broken is not None:
            self.table.fail(job, self.table.broken)
            return
        try:
            if self.node is None or self.node.admit(job):
                self.pending.push(job)
        except Exception as exc:  # one job's bad data (its priority, say): that job fails, not the pool
            log.exception("kiln could not queue job %s", job.id)
            self.table.fail(
                job,
                KilnError(
                    f"kiln could not queue this compile ({type(exc).__name__}: {exc}); check the "
                    f"arguments it was submitted with. Other jobs go on."
                ),
            )

    def _busy(self) -> bool:
        node = self.node
        return bool(self.pending or self.workers.busy() or (node and (node.waiting or node.ready)))

    def _release_if_idle(self, now: float) -> None:
        """After ``idle_s`` with no job, queued or running: the zygote and its workers exit."""
        if self._busy() or self.table.closing or self.table.broken is not None:
            self.idle_since = None
            return
        zygote = self.supervisor.zygote
        if zygote is None or not zygote.ready:  # parked, or still starting: not idle yet
            return
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < self.settings.idle_s:
            return
        self.parked = True
        self.idle_since = None
        self.table.stats.idle_releases += 1
        with self.table.lock:
            self.table.ready.clear()  # wait_ready() waits for the next zygote
        self.workers.drop_all()
        self.supervisor.release()
        log.debug("kiln pool: idle for %gs (KILN_IDLE_S): zygote and workers exited", self.settings.idle_s)

    def _resume(self) -> None:
        self.parked = False
        self.table.stats.idle_restarts += 1
        self.supervisor.spawn()

    def _poll_node(self, now: float) -> None:
        """Jobs another process of the node was compiling: served from its artifact, or ours now."""
        if self.node is None:
            return
        settled = self.node.poll(now)
        for job, artifact in settled.served:
            self.table.complete(job, artifact, stored=True)
        for job in settled.run:
            self.pending.push(job)
        for job in settled.dropped:
            self.table.forget(job)

    def _next_timeout(self) -> float:
        if not self.commands.empty():
            return 0.0
        now = time.monotonic()
        timeout = self.workers.next_timeout(1.0, now)
        if self.idle_since is not None:
            timeout = min(timeout, max(0.0, self.idle_since + self.settings.idle_s - now))
        if self.node is not None:
            timeout = self.node.next_timeout(timeout)
        zygote = self.supervisor.zygote
        if zygote is not None and not zygote.ready:
            timeout = min(timeout, 0.1)
        return timeout

    def _on_readable(self, kind: str, ref: Any) -> None:
        if kind == "wake":
            with contextlib.suppress(OSError):
                os.read(self.wake_r, 65536)
        elif kind == "zctl":
            self._read_zygote(ref)
        elif kind == "zout":
            if not ref.read_output():
                self.supervisor.unregister(ref.out_fd)
        elif kind == "chan":
            self.workers.read(ref)
        elif kind == "err":
            self.workers.read_err(ref)

    def _read_zygote(self, zygote: ZygoteHandle) -> None:
        while True:
            try:
                data = zygote.ctl.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.supervisor.unregister(zygote.ctl)
                zygote.read_output()
                if zygote is self.supervisor.zygote:
                    self.supervisor.on_death(zygote, planned=False)
                return
            self._on_zygote_message(zygote, unpack(data))

    def _on_zygote_message(self, zygote: ZygoteHandle, message: Any) -> None:
        if isinstance(message, Ready):
            self.supervisor.on_ready(zygote, message.info)
        elif isinstance(message, Preloaded):
            self.supervisor.on_preloaded(zygote, message.results)
        elif isinstance(message, Forked):
            self.workers.on_forked(message)
        elif isinstance(message, ForkFailed):
            self.workers.on_fork_failed(message)
            log.warning("kiln zygote could not fork a worker (%s); restarting the zygote", message.reason)
            self.supervisor.on_death(zygote, planned=True)
        elif isinstance(message, Exited):
            self.workers.on_exited(message)

    # ---------------------------------------------------------------- ZygoteHost

    def zygote_lost(self, *, planned: bool, returncode: int | None = None) -> None:
        self.workers.lose_all(planned=planned, returncode=returncode)

    def give_up(self, error: ZygoteError) -> None:
        self.table.broken = error
        self.fail_everything(error)
        self.table.ready.set()  # wake wait_ready(), which raises the error

    # ---------------------------------------------------------------- endings

    def fail_everything(self, exc: KilnError) -> None:
        jobs = list(self.pending)
        self.pending.clear()
        jobs += self.workers.running_jobs()
        with self.table.lock:
            jobs += [j for j in self.table.inflight.values() if j not in jobs]
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                break
            if isinstance(command, Submit):
                jobs.append(command.job)
        for job in jobs:
            self.table.fail(job, exc)

    def _teardown(self) -> None:
        self.workers.drop_all()
        if self.node is not None:
            for job in self.node.drop_all():
                self.table.forget(job)
                job.future.cancel()
        self.supervisor.shutdown()
        for job in list(self.pending):
            if not job.future.done():
                job.future.cancel()
        self.pending.clear()
        self.close_fds()
        self.table.ready.set()  # nobody waits for a pool that has ended
        self.table.closed.set()


def _close(selector: selectors.BaseSelector, *fds: int) -> None:
    with contextlib.suppress(Exception):
        selector.close()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)

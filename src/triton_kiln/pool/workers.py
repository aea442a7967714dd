"""A pool's compile workers, as the manager thread sees them: fork, dispatch, limits, deaths.

::

    Workers (this module, on the manager thread)                  worker k (forked by the zygote)
      maintain(): Fork(wid) + fds -> zygote ----- fork ---------->  Hello(pid)
      dispatch(): next pending job ----------- RunJob ----------->  compile
      read(): JobDone / JobFailed  <------------------------------  reply
              -> JobTable.complete / fail (RemoteError.rebuild)
      check_limits(): past its deadline, or over the memory limit -> Kill(pid) -> zygote
      on_exited() + finalize_dead(): the zygote reaped it -> death_error -> JobTable.fail,
              a fresh fork replaces it on the next maintain()

One job per worker and one socket per worker, so a death fails exactly that worker's job.
Kills go through the zygote (the only reaper of its workers), so a late kill can never hit a
recycled pid. Everything here runs on the manager thread only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import selectors
import signal
import socket
import time
from typing import Any

from triton_kiln.errors import PoolClosedError, ZygoteDiedError, zygote_death_detail
from triton_kiln.framing import encode
from triton_kiln.pool.failures import KILL_MEMORY, KILL_TIMEOUT, death_error
from triton_kiln.pool.handles import LineTail, WorkerHandle, ZygoteHandle
from triton_kiln.pool.jobs import Job, JobQueue, JobTable
from triton_kiln.pool.protocol import (
    Exited,
    Fork,
    Forked,
    ForkFailed,
    Hello,
    JobDone,
    JobFailed,
    Kill,
    RunJob,
)
from triton_kiln.pool.supervisor import Supervisor
from triton_kiln.settings import Settings

_EXIT_GRACE_S = 0.5  # after a worker's exit, how long to wait for the rest of its stderr


class Workers:
    """The live workers of a pool, keyed by worker id (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        table: JobTable,
        selector: selectors.BaseSelector,
        supervisor: Supervisor,
        pending: JobQueue,
    ) -> None:
        self.settings = settings
        self.table = table
        self.selector = selector
        self.supervisor = supervisor
        self.pending = pending
        self.handles: dict[int, WorkerHandle] = {}
        self._wids = itertools.count(1)
        self._next_memory_check = 0.0
        self._replace_since: float | None = None  # when the last worker died (replacement stats)

    # ---------------------------------------------------------------- state

    def all_ready(self) -> bool:
        handles = self.handles
        return len(handles) >= self.settings.workers and all(w.ready for w in handles.values())

    def busy(self) -> bool:
        return any(w.job is not None for w in self.handles.values())

    def running_jobs(self) -> list[Job]:
        return [w.job for w in self.handles.values() if w.job is not None]

    def pids(self) -> list[int]:
        return [w.pid for w in list(self.handles.values()) if w.pid is not None]

    def next_timeout(self, timeout: float, now: float) -> float:
        """``timeout`` shortened to the nearest deadline or pending death of a worker."""
        for w in self.handles.values():
            if w.deadline is not None:
                timeout = min(timeout, max(0.0, w.deadline - now))
            if w.exited:
                timeout = min(timeout, 0.05)
        if self.settings.memory_limit_mb and self.busy():
            timeout = min(timeout, self.settings.memory_poll_s)
        return timeout

    # ---------------------------------------------------------------- reading

    def read(self, worker: WorkerHandle) -> None:
        while worker.chan_open:
            try:
                data = worker.chan.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                worker.chan_open = False
                self.supervisor.unregister(worker.chan)
                return
            for frame in worker.reader.feed(data):
                self._on_message(worker, pickle.loads(frame))

    def read_err(self, worker: WorkerHandle) -> None:
        while worker.err_open:
            try:
                data = os.read(worker.err_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                worker.err_open = False
                self.supervisor.unregister(worker.err_fd)
                return
            worker.tail.feed(data)

    def _on_message(self, worker: WorkerHandle, message: Any) -> None:
        if isinstance(message, Hello):
            worker.pid = message.pid
            worker.ready = True
            if worker.replaces_since is not None:
                self.table.stats.replacement_s.append(time.monotonic() - worker.replaces_since)
            if self.all_ready():
                self.table.ready.set()
            return
        job = worker.job
        if job is None or job.id != message.job_id:
            return  # a reply for a job already given up on (timed out, killed)
        worker.job = None
        worker.deadline = None
        if isinstance(message, JobDone):
            self.table.complete(job, message.artifact)
        elif isinstance(message, JobFailed):
            error = message.error.rebuild(job.request.info(), message.seconds, worker.tail.snapshot())
            self.table.fail(job, error)

    # ---------------------------------------------------------------- the zygote's reports

    def on_forked(self, message: Forked) -> None:
        worker = self.handles.get(message.worker_id)
        if worker is not None:
            worker.pid = message.pid

    def on_fork_failed(self, message: ForkFailed) -> None:
        worker = self.handles.pop(message.worker_id, None)
        if worker is not None:
            self._close(worker)

    def on_exited(self, message: Exited) -> None:
        for worker in self.handles.values():
            if worker.pid == message.pid and not worker.exited:
                worker.exited = True
                worker.returncode = message.returncode
                worker.exited_at = time.monotonic()
                self.read(worker)

    # ---------------------------------------------------------------- lifecycle

    def maintain(self) -> None:
        """Fork workers up to the pool's size (while the zygote is ready)."""
        zygote = self.supervisor.ready_zygote
        if zygote is None:
            return
        if self.table.closing and not self.pending:
            return  # shutting down: queued jobs still need workers, nothing else does
        while len(self.handles) < self.settings.workers:
            self._fork(zygote)
            if zygote.dead:
                return

    def _fork(self, zygote: ZygoteHandle) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        wid = next(self._wids)
        try:
            zygote.send(Fork(wid), fds=[child_end.fileno(), err_w])
        except OSError:
            parent_end.close()
            os.close(err_r)
            self.supervisor.on_death(zygote, planned=False)
            return
        finally:
            child_end.close()
            os.close(err_w)
        parent_end.setblocking(False)
        os.set_blocking(err_r, False)
        worker = WorkerHandle(wid, parent_end, err_r, LineTail(self.settings.stderr_tail_lines))
        worker.replaces_since, self._replace_since = self._replace_since, None
        self.handles[wid] = worker
        self.table.stats.workers_forked += 1
        self.selector.register(parent_end, selectors.EVENT_READ, ("chan", worker))
        self.selector.register(err_r, selectors.EVENT_READ, ("err", worker))

    def dispatch(self) -> None:
        """Give pending jobs to idle workers, highest priority first."""
        if not self.pending:
            return
        for worker in self.handles.values():
            if not self.pending:
                return
            if not worker.ready or worker.job is not None or worker.exited or worker.kill_reason:
                continue
            job = self.pending.pop()
            if not job.future.running() and not job.future.set_running_or_notify_cancel():
                self.table.forget(job)
                continue
            node = self.table.node
            if node is not None and not node.take_slot(job):
                self.pending.push(job, front=True)  # every node slot is busy: at the next turn
                return
            if job.module is not None:
                self.supervisor.request_preload([job.module])
            # The previous job's output (written before its reply) is drained and forgotten, so
            # this job's errors quote only what this job printed.
            self.read_err(worker)
            worker.tail.clear()
            now = time.monotonic()
            worker.job = job
            job.started = now
            worker.deadline = now + job.timeout_s
            try:
                worker.chan.setblocking(True)
                worker.chan.sendall(encode(RunJob(job.id, job.payload)))
            except OSError:
                worker.job = None  # the worker is dying; the job never started
                worker.deadline = None
                self._give_slot(job)
                self.pending.push(job, front=True)
                continue
            finally:
                with contextlib.suppress(OSError):
                    worker.chan.setblocking(False)
            self.table.stats.dispatched += 1

    def check_limits(self, now: float) -> None:
        """Have the zygote kill workers past their job's deadline or over the memory limit."""
        zygote = self.supervisor.zygote
        for worker in self.handles.values():
            if worker.job is None or worker.kill_reason or worker.exited:
                continue
            if worker.deadline is not None and now >= worker.deadline:
                self._kill(worker, KILL_TIMEOUT, zygote)
        limit = self.settings.memory_limit_mb
        if not limit or now < self._next_memory_check:
            return
        self._next_memory_check = now + self.settings.memory_poll_s
        for worker in self.handles.values():
            if worker.job is None or worker.kill_reason or worker.exited or worker.pid is None:
                continue
            rss = worker.group_rss()
            if rss is not None and rss > limit * 1024 * 1024:
                worker.peak_rss = rss
                self._kill(worker, KILL_MEMORY, zygote)

    def _kill(self, worker: WorkerHandle, reason: str, zygote: ZygoteHandle | None) -> None:
        worker.kill_reason = reason
        if zygote is not None and not zygote.dead and worker.pid is not None:
            zygote.send(Kill(worker.pid))

    def finalize_dead(self, now: float) -> None:
        """Fail the job of each worker the zygote reaped (once its last output is read)."""
        for worker in list(self.handles.values()):
            if not worker.exited:
                continue
            waited = now - worker.exited_at
            if (worker.err_open or worker.chan_open) and waited < _EXIT_GRACE_S:
                continue
            self.read(worker)
            self.read_err(worker)
            job = worker.job
            worker.job = None
            self.table.stats.worker_deaths += 1
            self._drop(worker)
            self._replace_since = worker.exited_at
            if job is not None:
                error = death_error(
                    job.request.info(),
                    (worker.exited_at or now) - job.started,
                    worker.tail.snapshot(),
                    worker.returncode,
                    kill_reason=worker.kill_reason,
                    timeout_s=job.timeout_s,
                    peak_rss=worker.peak_rss,
                    memory_limit_mb=self.settings.memory_limit_mb,
                )
                self.table.fail(job, error)

    def lose_all(self, *, planned: bool, returncode: int | None = None) -> None:
        """The zygote died and its workers with it (parent-death signal): retry their jobs once."""
        for worker in list(self.handles.values()):
            if worker.pid is not None:
                # Their children (ptxas) have no such signal: end the groups from here (best
                # effort; the reaper is gone, so this is the only chance to).
                with contextlib.suppress(OSError):
                    os.killpg(worker.pid, signal.SIGKILL)
            job = worker.job
            worker.job = None
            self._drop(worker)
            if job is None:
                continue
            if not planned:
                job.attempts += 1
            if job.attempts > 1:
                self.table.fail(
                    job,
                    ZygoteDiedError(
                        job.request.info(),
                        time.monotonic() - job.started,
                        worker.tail.snapshot(),
                        detail=zygote_death_detail(returncode),
                    ),
                )
            else:
                self.table.stats.requeued += 1
                self._give_slot(job)
                self.pending.push(job, front=True)

    def _give_slot(self, job: Job) -> None:
        if self.table.node is not None:
            self.table.node.give_slot(job)

    def drop_all(self) -> None:
        """Close every worker (at teardown), failing a job still running."""
        for worker in list(self.handles.values()):
            if worker.job is not None and not worker.job.future.done():
                self.table.fail(worker.job, PoolClosedError("the pool shut down before this job finished"))
            self._drop(worker)

    def _drop(self, worker: WorkerHandle) -> None:
        self.handles.pop(worker.wid, None)
        self._close(worker)

    def _close(self, worker: WorkerHandle) -> None:
        self.supervisor.unregister(worker.chan)
        if worker.err_fd >= 0:
            self.supervisor.unregister(worker.err_fd)
        worker.close()

"""Compile once per node: a pool's side of the node-wide locks (manager thread only).

::

    manager thread (this module)            cache directory (triton_kiln.node.locks)      other processes
    ----------------------------            ---------------------------------      ---------------
    Submit(job) -> admit(job):
        key lock free?  take it ----------> node/compile/ab/<key>.lock  (flock)
            -> pending, compiles as usual
        held by another process? -> waiting               <------------------- its pool compiles <key>
    poll() every KILN_NODE_POLL_S:                                              stores the artifact,
        artifact stored?  -> the job's future gets it (no compile here)         removes and frees
        lock free, no artifact (its holder died) -> take it, compile (take-over)  the lock
        lock free, its compile failed just now (<key>.failed) -> compile here, unlocked
        waited past KILN_NODE_WAIT_S (holder alive but stuck) -> compile here, unlocked
    dispatch: a node slot (node/slots/<i>.lock) per running compile, given back when it ends
    ended(job): stored first (JobTable.complete), then the lock is removed and freed

A holder that dies (SIGKILL included) frees its locks with its last descriptor, so a waiter
takes the job over within one poll; nothing waits on a dead process, and the only bounded wait
on a live one is ``KILN_NODE_WAIT_S`` (its own compile is bounded by its ``KILN_JOB_TIMEOUT_S``).
A failed compile is not served to waiters: each compiles it again (in parallel, unlocked), so
every process raises its own exception, exactly as without the node.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass
from pathlib import Path

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.errors import PoolClosedError
from triton_kiln.node.locks import FileLock, Slots, marker_since, node_dir, remove_file, write_marker
from triton_kiln.pool.jobs import Job, PoolStats
from triton_kiln.settings import Settings

log = logging.getLogger("kiln.pool")


@dataclass
class Waiting:
    """A job whose key another process is compiling."""

    job: Job
    since: float  # Unix time (compared with a failure marker's mtime)
    since_mono: float


@dataclass
class Settled:
    """What one :meth:`NodeJobs.poll` settled: jobs served from another process's artifact, jobs
    to compile here now, and cancelled jobs no longer waited for (to forget)."""

    served: list[tuple[Job, CompiledArtifact]]
    run: list[Job]
    dropped: list[Job]


def slot_count(settings: Settings) -> int:
    """``KILN_NODE_SLOTS``, else the CPU cores (or the pool's workers if more: alone, it is not held back)."""
    if settings.node_slots is not None:
        return settings.node_slots
    return max(os.cpu_count() or 1, settings.workers)


class NodeJobs:
    """One pool's node-wide in-flight locks, waiting jobs and compile slots (see the docstring)."""

    def __init__(self, settings: Settings, store: ArtifactStore, stats: PoolStats) -> None:
        self.directory = node_dir(settings.cache_dir) / "compile"
        self.store = store
        self.stats = stats
        self.slots = Slots(settings.cache_dir, slot_count(settings))
        self.poll_s = settings.node_poll_s
        self.wait_s = settings.node_wait_s
        self.waiting: list[Waiting] = []
        self.ready: list[tuple[Job, CompiledArtifact]] = []  # served at admission: the next poll's
        self.locks: dict[int, FileLock] = {}  # job id -> its key's lock, held
        self._next_poll = 0.0
        self.starved = False  # a job waited for a slot in the last dispatch
        self.off = False  # the node's lock files cannot be used here: every job runs alone

    def _take(self, lock: FileLock) -> bool | None:
        """``True``: held; ``False``: another process holds it; ``None``: locks unusable, work alone."""
        if self.off:
            return None
        try:
            return lock.try_acquire()
        except OSError as exc:
            self._turn_off(exc)
            return None

    def _turn_off(self, exc: OSError) -> None:
        self.off = True
        log.warning(
            "kiln: the node's lock files under %s cannot be used (%s); this pool compiles alone, as with "
            "KILN_NODE=0",
            self.directory.parent,
            exc,
        )

    def _paths(self, key: str) -> tuple[Path, Path]:
        shard = self.directory / key[:2]
        return shard / f"{key}.lock", shard / f"{key}.failed"

    def _stored(self, key: str) -> CompiledArtifact | None:
        # quiet: the caller's own disk lookup warned about a corrupt entry already
        return self.store.get(key, quiet=True) if key in self.store else None

    def admit(self, job: Job) -> bool:
        """Take ``job``'s key lock (``True``: compile it here); else (``False``) it waits, or its
        artifact, stored meanwhile, comes with the next :meth:`poll`."""
        key = job.request.key
        lock = FileLock(self._paths(key)[0])
        taken = self._take(lock)
        if taken is None:
            return True  # alone
        if taken:
            # another process may have stored it and let go since the caller's disk lookup
            stored = self._stored(key)
            if stored is None:
                self.locks[job.id] = lock
                return True
            lock.release()
            self.stats.node_served += 1
            self.ready.append((job, stored))
            return False
        self.stats.node_waited += 1
        self.waiting.append(Waiting(job, time.time(), time.monotonic()))
        self._next_poll = time.monotonic() + self.poll_s
        return False

    def poll(self, now: float) -> Settled:
        """Waiting jobs that are settled now (see :class:`Settled`)."""
        settled = Settled(self.ready, [], [])
        self.ready = []
        served, run = settled.served, settled.run
        if not self.waiting or now < self._next_poll:
            return settled
        self._next_poll = now + self.poll_s
        still: list[Waiting] = []
        for waiting in self.waiting:
            job = waiting.job
            if job.future.done():
                settled.dropped.append(job)  # cancelled meanwhile
                continue
            key = job.request.key
            lock_path, failed_path = self._paths(key)
            stored = self._stored(key)
            if stored is not None:
                self.stats.node_served += 1
                served.append((job, stored))
                continue
            lock = FileLock(lock_path)
            taken = self._take(lock)
            if taken is None:
                run.append(job)  # alone
            elif taken:
                stored = self._stored(key)
                if stored is not None:  # stored between our two looks
                    lock.release()
                    self.stats.node_served += 1
                    served.append((job, stored))
                elif marker_since(failed_path, waiting.since) is not None:
                    lock.release(remove=False)
                    self.stats.node_alone += 1
                    run.append(job)  # its holder's compile failed: ours raises our own error
                else:
                    self.locks[job.id] = lock  # its holder ended without an artifact: died, or cancelled
                    self.stats.node_takeovers += 1
                    what = job.request.info()
                    log.info("kiln: took over the compile of %s (its holder ended without it)", what)
                    run.append(job)
            elif now - waiting.since_mono > self.wait_s:
                self.stats.node_alone += 1
                log.warning(
                    "kiln: waited %.0f s (KILN_NODE_WAIT_S) for another process to compile %s; compiling "
                    "it here too",
                    self.wait_s,
                    job.request.info(),
                )
                run.append(job)
            else:
                still.append(waiting)
        self.waiting = still
        return settled

    def next_timeout(self, timeout: float) -> float:
        if self.ready:
            return 0.0
        if self.waiting or self.starved:
            return min(timeout, self.poll_s)
        return timeout

    def take_slot(self, job: Job) -> bool:
        """Hold a node slot for ``job`` (``False``: all are taken now; try again at the next turn)."""
        if self.off:
            return True
        if job.slot is None:
            try:
                job.slot = self.slots.try_take()
            except OSError as exc:
                self._turn_off(exc)
                return True
        self.starved = job.slot is None
        return job.slot is not None

    @staticmethod
    def give_slot(job: Job) -> None:
        slot, job.slot = job.slot, None
        if isinstance(slot, FileLock):
            Slots.give_back(slot)

    def ended(self, job: Job, exc: BaseException | None) -> None:
        """``job`` ended (stored already when it succeeded): free its slot and its key's lock."""
        self.give_slot(job)
        self.waiting = [w for w in self.waiting if w.job is not job]
        lock = self.locks.pop(job.id, None)
        if lock is None:
            return
        failed_path = self._paths(job.request.key)[1]
        if exc is None:
            remove_file(failed_path)
        elif not isinstance(exc, PoolClosedError | CancelledError):
            write_marker(failed_path, {"pid": os.getpid(), "error": f"{type(exc).__name__}: {exc}"[:2000]})
        lock.release()

    def drop_waiting(self) -> list[Job]:
        """The waiting jobs, no longer waited for (cancelled by the caller)."""
        jobs = [w.job for w in self.waiting] + [job for job, _ in self.ready]
        self.waiting, self.ready = [], []
        return jobs

    def drop_all(self) -> list[Job]:
        """At teardown: every lock and slot let go; the waiting jobs, for the caller to cancel."""
        jobs = self.drop_waiting()
        for lock in self.locks.values():
            lock.release()
        self.locks.clear()
        return jobs

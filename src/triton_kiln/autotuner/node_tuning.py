"""Tune once per node: one process tunes a (kernel, key, device); the others adopt its result.

::

    process A (first)                 cache dir / tuning database     process B (same identity)
    -----------------                 ---------------------------     -------------------------
    lookup: no finished run                                           lookup: no finished run
    claim(): takes the lock ------->  node/tune/<id>.lock (flock)     claim(): lock held, so every
    tunes (its compiles are shared                                      KILN_NODE_POLL_S: lookup;
      node-wide by the pool too)                                        a finished run? adopt it,
    finish_run (committed) -------->  runs.finished_at                  record_adoption (kiln report)
    lets go of the lock                                                lock free and no run (A died)?
                                                                        take the lock, tune (take-over)

The lock's name is a hash of the run's identity (kernel and configs, key, device name, compute
capability, Triton's version: :func:`.run_record.run_identity`) and of the database file, so processes on
different GPU models (or capabilities) never wait for each other's timings, and processes with
different databases never wait for a run they could not read. A waiter waits at most
``KILN_NODE_WAIT_S`` for a live tuner, then tunes alone; a dead tuner's lock is free at once.
Without a tuning database there is nothing to share: each process tunes alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_kiln.autotuner import log_lines
from triton_kiln.autotuner.node_share import Share
from triton_kiln.autotuner.plan import LocalDevice, TunedKernel
from triton_kiln.node.locks import FileLock, node_dir
from triton_kiln.settings import Settings
from triton_kiln.tuning.results import TuningRun
from triton_kiln.tuning.schema import TuningDatabaseError

log = logging.getLogger("kiln.autotune")


@dataclass
class Claim:
    """What :func:`claim` decided: tune here (``lock`` held, or ``None``: alone; ``share``: with
    processes on other GPUs), adopt ``run``, or help the tuning process (``helper``), then wait."""

    lock: FileLock | None
    run: TuningRun | None = None
    waited_s: float = 0.0
    share: Share | None = None
    helper: Share | None = None

    def release(self) -> None:
        if self.share is not None:
            self.share.release()
        if self.lock is not None:
            self.lock.release()


def lock_path(database_path: Path, lookup: dict[str, str]) -> Path:
    """The node lock of one run identity in one database (beside the database, under ``node/tune``)."""
    text = json.dumps([str(Path(database_path).resolve()), sorted(lookup.items())])
    return node_dir(Path(database_path).parent) / "tune" / f"{hashlib.sha256(text.encode()).hexdigest()}.lock"


def claim(
    settings: Settings,
    database: Any,
    lookup: dict[str, str],
    name: str,
    device: LocalDevice | None = None,
    helping: bool = True,
) -> Claim:
    """Take the identity's node lock, or wait for the process that holds it to finish its run;
    with ``KILN_NODE_SHARE`` and a ``device`` another than the tuning process's, help it first
    (``helping``: the caller has not helped yet)."""
    path = getattr(database, "path", None)
    if not settings.node or path is None:
        return Claim(None)
    lock = FileLock(lock_path(path, lookup))
    sharing = settings.node_share
    wait_s, poll_s = settings.node_share_wait_s, settings.node_poll_s
    started = time.monotonic()
    told = False
    while True:
        try:
            taken = lock.try_acquire()
        except OSError as exc:  # the lock's directory cannot be used: tune alone
            log.warning("kiln: %s: the node's tuning lock %s cannot be used (%s); tuning alone", name,
                        lock.path, exc)  # fmt: skip
            return Claim(None)
        if taken:
            run = database.lookup(**lookup)  # finished between our lookup and the lock
            if run is not None:
                lock.release()
                return Claim(None, run, time.monotonic() - started)
            if told:
                log.info("kiln: %s: the process tuning it ended without a result; tuning it here", name)
            share = Share.open(lock.path, device, True, wait_s, poll_s) if sharing else None
            return Claim(lock, None, time.monotonic() - started, share=share)
        run = database.lookup(**lookup)
        waited = time.monotonic() - started
        if run is not None:
            return Claim(None, run, waited)
        helper = Share.open(lock.path, device, False, wait_s, poll_s) if sharing and helping else None
        if helper is not None:
            log.info("kiln: %s: another process of this node is tuning it on another GPU; helping", name)
            return Claim(None, None, waited, helper=helper)
        if not told:
            log.info("kiln: %s: another process of this node is tuning it; waiting for its result", name)
            told = True
        if waited > settings.node_wait_s:
            log.warning(
                "kiln: %s: waited %.0f s (KILN_NODE_WAIT_S) for another process's tuning; tuning it here too",
                name,
                waited,
            )
            return Claim(None, None, waited)
        time.sleep(settings.node_poll_s)


def adopt(
    tuner: TunedKernel, name: str, key: tuple[Any, ...], run: TuningRun, waited_s: float, database: Any
) -> None:
    """Another process of the node tuned ``key`` of kernel ``name`` while we waited: its run is
    ``tuner``'s."""
    tuner.loaded_from = "node"
    tuner.last_run = run
    tuner.tuned[key] = run
    if run.run_id is not None:
        try:
            database.record_adoption(run.run_id, waited_s)
        except TuningDatabaseError as exc:  # only what the report shows: the config is adopted
            log.warning("kiln: %s: could not record its adoption of run %s: %s", name,
                        run.run_id, exc)  # fmt: skip
    log_lines.from_node(name, key, run.best_label or "", waited_s, len(run.results))

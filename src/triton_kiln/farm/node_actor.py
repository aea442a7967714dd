"""The farm's node actor: one per Ray node, holding that node's one warm kiln compile pool.

::

    caller (RayCompilePool)                Ray node
    -----------------------                --------
    start_node_actor(node, cpus) --------> NodeCompiler (a Ray actor: one process, threaded,
                                             many calls at once); its __init__ starts a kiln
                                             CompilePool of ``workers`` (the CPUs Ray gave it):
                                             zygote spawned now (Triton imported, Triton's key
                                             read from the node's kiln cache, warm-up compile)
    compile(SealedRequest, timeout) -----> pool.submit(sealed) --> zygote --fork--> kiln worker:
                                             unpickles the request, triton.compile
    <--- wire reply (plain data) --------- artifact, or kiln's typed error: abort / segfault /
                                             hang / memory kill only that kiln worker

This process never unpickles a request (the sealed request's payload is opened only in a kiln
worker) and never compiles, so no config can crash it: a call always returns a reply. The pool
keeps no artifacts on the node's disk (the caller's store is the cache); its memory cache
answers a repeated key. The pool's zygote and workers die with this process (parent-death
signals), so a killed actor leaves nothing behind.

A *standing* node compiler (``kiln farm up``, ``RayCompilePool(standing=True)``) is the same
class as a named, detached actor: it outlives its drivers and serves every one of them. Nothing
here is a driver's: each call carries its job (the sealed request, its timeout, its ``TRITON_*``
variables), the pool's memory cache is keyed by compile key (the same for every driver), and
``ready()`` only describes the actor. What is the actor's own, fixed when it was started, is
its CPUs, ``preload`` modules, memory limit and niceness (a driver asking for other preloads or
another memory limit is refused by that driver: :class:`~triton_kiln.farm.nodes.NodeActors`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from triton_kiln import settings
from triton_kiln.farm.wire import Reply, artifact_reply, error_reply
from triton_kiln.pool.pool import CompilePool
from triton_kiln.pool.sealed import SealedRequest

log = logging.getLogger("kiln.farm")


class NodeCompiler:
    """A Ray node's kiln compile pool, as an actor (made by
    :func:`triton_kiln.farm.ray_api.start_node_actor`)."""

    def __init__(
        self, workers: int, preload: tuple[str, ...], memory_limit_mb: int | None, niceness: int | None = None
    ) -> None:
        self.times = {"process": _process_started(), "constructor": time.time()}
        self.preload = tuple(preload)
        self.memory_limit_mb = memory_limit_mb
        self.drivers = 0  # ready() calls answered: the drivers that attached (a standing actor's many)
        self.host = socket.gethostname()
        # Ray runs its workers at niceness 15; the pool's manager thread, zygote and kiln
        # workers inherit this thread's, so they compile at the caller's, as a local pool does.
        self.niceness = _set_niceness(niceness)
        self.started = time.monotonic()
        self.pool = CompilePool(
            workers=workers,
            use_disk_cache=False,
            memory_limit_mb=memory_limit_mb,
            preload=preload,
            # a node's pool is the node's compile service, with no main thread of its own to
            # yield to (KILN_WORKER_NICE is for a pool sharing its cores with the caller's work)
            settings=settings.current().replace(worker_nice=0),
        )  # started now, in the background: the zygote warms while the caller sends jobs
        self.times["pool"] = time.time()

    def ready(self) -> dict[str, Any]:
        """This actor runs: where, with how many workers, preloads and memory limit."""
        self.drivers += 1
        return self.info()

    def info(self) -> dict[str, Any]:
        """What :meth:`ready` says, without counting a driver."""
        return {
            "host": self.host,
            "pid": os.getpid(),
            "workers": self.pool.settings.workers,
            "niceness": self.niceness,
            "preload": list(self.preload),
            "memory_limit_mb": self.memory_limit_mb,
            "drivers": self.drivers,
            "times": dict(self.times),
        }

    def warm(self, timeout_s: float) -> dict[str, Any]:
        """Wait until the pool's zygote and workers are up; what they are (pids, seconds)."""
        ready = self.pool.wait_ready(timeout_s)
        zygote = self.pool.zygote_info
        return {
            **self.info(),
            "warm": ready,
            **self.processes(),
            "times": self.timeline(),
            "zygote_s": {k: zygote[k] for k in ("key_s", "warmup_s", "startup_s") if k in zygote},
        }

    def timeline(self) -> dict[str, float]:
        """When this actor's process started, its constructor ran, its kiln pool was made and
        its zygote was ready (wall clock; the zygote's time is its pool's start plus the
        zygote's start-up as the pool measured it)."""
        times = dict(self.times)
        ready_s = self.pool.stats.zygote_ready_s
        if ready_s:
            times["zygote_ready"] = times["pool"] + ready_s[0]
        return times

    def processes(self) -> dict[str, Any]:
        """The pids of this node's kiln processes (for tests and diagnostics)."""
        return {"zygote": self.pool.zygote_pid, "kiln_workers": self.pool.worker_pids()}

    def compile(self, sealed: SealedRequest, timeout_s: float) -> Reply:
        """Compile one sealed request in the node's pool (blocks this call's thread)."""
        started = time.perf_counter()
        try:
            artifact = self.pool.submit(sealed, timeout_s=timeout_s).result()
        except BaseException as exc:
            return error_reply(exc, time.perf_counter() - started, self.host)
        return artifact_reply(artifact, self.host)

    def close(self) -> None:
        """End the pool (its zygote and workers) before Ray ends this process."""
        self.pool.shutdown(wait=True, cancel_futures=True)


def _process_started() -> float:
    """When this process started (wall clock, to the kernel's clock tick), for the farm's
    start-up timeline (``psutil``'s create time is off by up to a second: boot time in whole
    seconds)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
            up = float(uptime.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):  # not Linux
        return time.time()


def _set_niceness(niceness: int | None) -> int:
    """Give this thread (and so the threads and processes it starts) ``niceness``; the niceness
    it has. Raising priority needs root or ``RLIMIT_NICE``: without, Ray's stays (logged)."""
    if niceness is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)  # Linux: the calling thread
        except OSError as exc:
            log.warning(
                "kiln farm: the node's kiln pool stays at niceness %d (Ray's), not %d: %s; allow it "
                "with `ulimit -e` (RLIMIT_NICE) where `ray start` runs, or pass niceness=None",
                os.getpriority(os.PRIO_PROCESS, 0),
                niceness,
                exc,
            )
    return os.getpriority(os.PRIO_PROCESS, 0)

"""The node actors of one :class:`~triton_kiln.farm.RayCompilePool`, as its scheduler thread sees them.

::

    refresh() (every second)    ray.nodes(): a live node with CPUs and no actor -> start one there
                                (hard node affinity, the node's CPUs); a node that left -> dropped
    a starting actor            takes jobs at once: ``slots`` of them (its workers, plus a few
                                queued there so no worker waits for the caller's next job); Ray
                                holds its calls until its constructor has run, and its kiln pool
                                queues them while its zygote starts
    its ready() call            done -> READY; failed, or not running after ``start_timeout_s``
                                -> killed, the node rested ``REST_S`` before another try (the
                                jobs it held go back to the caller's queue, no try counted:
                                none ran)
    pick()                      the node (READY or starting) with the most free slots
    lost(node)                  its actor died (or its node): killed, forgotten; the next
                                refresh starts a new one if the node lives

Standing (``standing=True``, ``kiln farm up``): each node's actor is the named, detached one
every driver shares. A running one is attached to (no new process); its first jobs wait for
its ready() reply (milliseconds: it runs), which must show the preloads and memory limit this
driver asks for, else the node is refused by this driver (its jobs fail with ``NoNodeError``
saying how to restart the standing compilers) and the actor is left alone. One that died is
replaced by the next refresh (its name is free again). ``close()`` neither shuts down nor kills
a standing actor.

Only the scheduler thread calls these methods, but :meth:`NodeActors.snapshot`.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.farm import ray_api

log = logging.getLogger("kiln.farm")

REST_S = 10.0  # a node whose actor failed to start is left alone this long

STANDING_DRIVERS = 8
"""Drivers a standing actor serves at full rate at once: its compile calls run on
``slots_for(cpus) * STANDING_DRIVERS + 4`` threads (each waits on its job in the node's kiln
pool, which runs ``cpus`` of them and queues the rest, all drivers' jobs by priority). A ninth
driver's calls wait in Ray's queue for the actor until a thread frees: slower, never failed or
deadlocked (``ready()`` and the other short calls have their own threads, ``ray_api.CONTROL``)."""


def slots_for(workers: int) -> int:
    """Jobs one node actor is given at once: its workers, plus a short queue there."""
    return workers + max(2, workers // 4)


def compile_concurrency(cpus: int, standing: bool) -> int:
    """Compile calls a node actor runs at once (its ``max_concurrency``)."""
    return slots_for(cpus) * (STANDING_DRIVERS if standing else 1) + 4


def actor_args(
    cpus: int, preload: tuple[str, ...], memory_limit_mb: int | None, niceness: int | None
) -> tuple[Any, ...]:
    """:class:`~triton_kiln.farm.node_actor.NodeCompiler`'s constructor arguments."""
    return (cpus, preload, memory_limit_mb, niceness)


def mismatch(info: dict[str, Any], preload: tuple[str, ...], memory_limit_mb: int | None) -> str | None:
    """Why a standing actor (its ready() ``info``) cannot serve a driver asking for ``preload``
    and ``memory_limit_mb`` (``None``: it can). Its CPUs and niceness are taken as they are."""
    missing = [m for m in preload if m not in info.get("preload", ())]
    if missing:
        return f"its kiln pool does not preload {missing} (it preloads {list(info.get('preload', ()))})"
    if info.get("memory_limit_mb") != memory_limit_mb:
        return f"its memory limit is {info.get('memory_limit_mb')} MiB, this pool asks for {memory_limit_mb}"
    return None


@dataclass
class NodeActor:
    node: ray_api.NodeInfo
    workers: int
    actor: Any  # the Ray actor handle
    started: float
    ready_ref: Any = None  # while starting: its ready() call
    ready: bool = False
    standing: bool = False  # the node's named, detached actor (shared; never killed at close)
    attached: bool = False  # standing and found running: this driver did not start it
    busy: int = 0  # jobs sent and not answered
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def slots(self) -> int:
        return slots_for(self.workers)

    @property
    def label(self) -> str:
        return f"{self.info.get('host', self.node.address)} ({self.node.node_id[:8]})"


class NodeActors:
    """Starts, watches and replaces one :class:`~triton_kiln.farm.node_actor.NodeCompiler` per node."""

    def __init__(
        self,
        *,
        cpus_per_node: int | None,
        preload: tuple[str, ...],
        memory_limit_mb: int | None,
        start_timeout_s: float,
        niceness: int | None,
        standing: bool = False,
    ) -> None:
        self.standing = standing
        self.cpus_per_node = cpus_per_node
        self.preload = preload
        self.memory_limit_mb = memory_limit_mb
        self.niceness = niceness
        self.start_timeout_s = start_timeout_s
        self.actors: dict[str, NodeActor] = {}  # node id -> its actor (changed under _lock)
        self._lock = threading.Lock()  # for snapshot() from other threads
        self.resting: dict[str, float] = {}  # node id -> when it may be tried again
        self.failures: list[str] = []  # why actors failed to start (the latest few)
        self.starts = 0  # actors this driver started (or, standing, asked Ray to make)
        self.attached = 0  # standing actors found running

    def refresh(self, now: float) -> None:
        """Start actors on new live nodes, drop nodes that left, give up on slow starts."""
        live = {n.node_id: n for n in ray_api.nodes()}
        for node_id in [i for i in self.actors if i not in live]:
            self.lost(self.actors[node_id], "its node left the cluster")
        for node_id, node in live.items():
            actor = self.actors.get(node_id)
            if actor is not None:
                if not actor.ready and now - actor.started > self.start_timeout_s:
                    self._failed(actor, now, f"not running after {self.start_timeout_s:g} s")
                continue
            if self.resting.get(node_id, 0.0) > now:
                continue
            self._start(node, now)

    def _start(self, node: ray_api.NodeInfo, now: float) -> None:
        cpus = min(node.cpus, self.cpus_per_node or node.cpus)
        handle, made = ray_api.start_node_actor(
            node,
            cpus,
            compile_concurrency(cpus, self.standing),
            actor_args(cpus, self.preload, self.memory_limit_mb, self.niceness),
            standing=self.standing,
        )
        actor = NodeActor(node=node, workers=cpus, actor=handle, started=now, standing=self.standing)
        actor.attached = not made
        actor.ready_ref = ray_api.control(handle, "ready")
        with self._lock:
            self.actors[node.node_id] = actor
        self.starts += made
        self.attached += not made

    def starting_refs(self) -> dict[Any, NodeActor]:
        return {a.ready_ref: a for a in self.actors.values() if a.ready_ref is not None}

    def started(self, actor: NodeActor, now: float) -> None:
        """``actor``'s ready() call finished: running, or failed to start."""
        if actor.ready_ref is None:
            return  # given up on meanwhile (refresh: too slow to start)
        reply, outcome, message = ray_api.fetch(actor.ready_ref)
        actor.ready_ref = None
        if outcome is ray_api.Outcome.ACTOR_LOST and actor.attached:
            self.lost(actor, message)  # a standing actor that died: the next refresh makes one
            return
        if outcome is not None or not isinstance(reply, dict):
            self._failed(actor, now, message or f"ready() sent back {type(reply).__name__}")
            return
        refused = mismatch(reply, self.preload, self.memory_limit_mb) if actor.standing else None
        if refused is not None:
            self._failed(
                actor,
                now,
                f"the standing compiler cannot serve this pool: {refused}; restart the standing "
                f"compilers with these settings (`kiln farm down`, then `kiln farm up --preload ... "
                f"--memory-limit-mb ...`) or use standing=False",
                rest_s=math.inf,  # never tried again by this driver
                kill=False,  # the standing actor stays as it is, for the drivers it suits
            )
            return
        actor.info = reply
        actor.workers = int(reply.get("workers", actor.workers))
        actor.ready = True
        log.info("kiln farm: node actor on %s ready (%d workers)", actor.label, actor.workers)

    def pick(self) -> NodeActor | None:
        """The node actor (ready or starting) with the most free slots (``None``: every one is full)."""
        usable = [a for a in self.actors.values() if a.ready or not a.attached]  # attached: checked first
        best = max(usable, key=lambda a: a.slots - a.busy, default=None)
        return best if best is not None and best.slots > best.busy else None

    def lost(self, actor: NodeActor, reason: str) -> None:
        """``actor`` died (or its node did): forget it; a live node gets a new one at the next refresh."""
        if self._drop(actor):
            log.warning("kiln farm: the node actor on %s was lost (%s)", actor.label, reason)

    def start_failed(self, actor: NodeActor, now: float, reason: str) -> None:
        """A call to ``actor`` failed before its ready() was seen: it failed to start (once)."""
        if self.actors.get(actor.node.node_id) is actor:
            self._failed(actor, now, reason)

    def _failed(
        self, actor: NodeActor, now: float, reason: str, *, rest_s: float = REST_S, kill: bool = True
    ) -> None:
        self.failures = [*self.failures[-4:], f"{actor.node.address} ({actor.node.node_id[:8]}): {reason}"]
        log.warning("kiln farm: no compile actor on node %s: %s", actor.label, reason)
        self.resting[actor.node.node_id] = now + rest_s
        actor.ready_ref = None
        self._drop(actor, kill=kill)

    def _drop(self, actor: NodeActor, *, kill: bool = True) -> bool:
        """Forget (and kill) ``actor``; ``False`` if it was forgotten already."""
        with self._lock:
            known = self.actors.get(actor.node.node_id) is actor
            if known:
                del self.actors[actor.node.node_id]
        if known and kill:
            ray_api.kill(actor.actor)
        return known

    def snapshot(self) -> list[NodeActor]:
        """The ready node actors now (any thread)."""
        with self._lock:
            return [a for a in self.actors.values() if a.ready]

    @property
    def any_ready(self) -> bool:
        return any(a.ready for a in self.actors.values())

    @property
    def any_starting(self) -> bool:
        return any(not a.ready for a in self.actors.values())

    def close(self, wait_s: float) -> None:
        """End every actor this driver owns: its pool shut down first (``wait_s`` at most), then
        the actor killed. Standing actors are only forgotten (they serve the next driver; calls
        of this driver still running there end with their compile, their replies dropped)."""
        with self._lock:
            actors = [a for a in self.actors.values() if not a.standing]
            self.actors.clear()
        calls = [ray_api.control(a.actor, "close") for a in actors if a.ready] if wait_s > 0 else []
        if calls:
            ray_api.wait_all(calls, wait_s)
        del calls
        for actor in actors:
            actor.ready_ref = None
            ray_api.kill(actor.actor)

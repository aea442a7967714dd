"""The node actors of one :class:`~kiln.farm.RayCompilePool`, as its scheduler thread sees them.

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

Only the scheduler thread calls these methods, but :meth:`NodeActors.snapshot`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.farm import ray_api

log = logging.getLogger("kiln.farm")

REST_S = 10.0  # a node whose actor failed to start is left alone this long


def slots_for(workers: int) -> int:
    """Jobs one node actor is given at once: its workers, plus a short queue there."""
    return workers + max(2, workers // 4)


@dataclass
class NodeActor:
    node: ray_api.NodeInfo
    workers: int
    actor: Any  # the Ray actor handle
    started: float
    ready_ref: Any = None  # while starting: its ready() call
    ready: bool = False
    busy: int = 0  # jobs sent and not answered
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def slots(self) -> int:
        return slots_for(self.workers)

    @property
    def label(self) -> str:
        return f"{self.info.get('host', self.node.address)} ({self.node.node_id[:8]})"


class NodeActors:
    """Starts, watches and replaces one :class:`~kiln.farm.node_actor.NodeCompiler` per node."""

    def __init__(
        self,
        *,
        cpus_per_node: int | None,
        preload: tuple[str, ...],
        memory_limit_mb: int | None,
        start_timeout_s: float,
        niceness: int | None,
    ) -> None:
        self.cpus_per_node = cpus_per_node
        self.preload = preload
        self.memory_limit_mb = memory_limit_mb
        self.niceness = niceness
        self.start_timeout_s = start_timeout_s
        self.actors: dict[str, NodeActor] = {}  # node id -> its actor (changed under _lock)
        self._lock = threading.Lock()  # for snapshot() from other threads
        self.resting: dict[str, float] = {}  # node id -> when it may be tried again
        self.failures: list[str] = []  # why actors failed to start (the latest few)
        self.starts = 0

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
        handle = ray_api.start_node_actor(
            node, cpus, slots_for(cpus) + 4, (cpus, self.preload, self.memory_limit_mb, self.niceness)
        )
        actor = NodeActor(node=node, workers=cpus, actor=handle, started=now)
        actor.ready_ref = handle.ready.remote()
        with self._lock:
            self.actors[node.node_id] = actor
        self.starts += 1

    def starting_refs(self) -> dict[Any, NodeActor]:
        return {a.ready_ref: a for a in self.actors.values() if a.ready_ref is not None}

    def started(self, actor: NodeActor, now: float) -> None:
        """``actor``'s ready() call finished: running, or failed to start."""
        if actor.ready_ref is None:
            return  # given up on meanwhile (refresh: too slow to start)
        reply, outcome, message = ray_api.fetch(actor.ready_ref)
        actor.ready_ref = None
        if outcome is not None or not isinstance(reply, dict):
            self._failed(actor, now, message or f"ready() sent back {type(reply).__name__}")
            return
        actor.info = reply
        actor.workers = int(reply.get("workers", actor.workers))
        actor.ready = True
        log.info("kiln farm: node actor on %s ready (%d workers)", actor.label, actor.workers)

    def pick(self) -> NodeActor | None:
        """The node actor (ready or starting) with the most free slots (``None``: every one is full)."""
        best = max(self.actors.values(), key=lambda a: a.slots - a.busy, default=None)
        return best if best is not None and best.slots > best.busy else None

    def lost(self, actor: NodeActor, reason: str) -> None:
        """``actor`` died (or its node did): forget it; a live node gets a new one at the next refresh."""
        if self._drop(actor):
            log.warning("kiln farm: the node actor on %s was lost (%s)", actor.label, reason)

    def start_failed(self, actor: NodeActor, now: float, reason: str) -> None:
        """A call to ``actor`` failed before its ready() was seen: it failed to start (once)."""
        if self.actors.get(actor.node.node_id) is actor:
            self._failed(actor, now, reason)

    def _failed(self, actor: NodeActor, now: float, reason: str) -> None:
        self.failures = [*self.failures[-4:], f"{actor.node.address} ({actor.node.node_id[:8]}): {reason}"]
        log.warning("kiln farm: no compile actor on node %s: %s", actor.label, reason)
        self.resting[actor.node.node_id] = now + REST_S
        actor.ready_ref = None
        self._drop(actor)

    def _drop(self, actor: NodeActor) -> bool:
        """Forget and kill ``actor``; ``False`` if it was forgotten already."""
        with self._lock:
            known = self.actors.get(actor.node.node_id) is actor
            if known:
                del self.actors[actor.node.node_id]
        if known:
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
        """End every actor: its pool shut down first (``wait_s`` at most), then the actor killed."""
        with self._lock:
            actors = list(self.actors.values())
            self.actors.clear()
        calls = [a.actor.close.remote() for a in actors if a.ready] if wait_s > 0 else []
        if calls:
            ray_api.wait_all(calls, wait_s)
        del calls
        for actor in actors:
            actor.ready_ref = None
            ray_api.kill(actor.actor)

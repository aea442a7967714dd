"""Every use of Ray's API (checked against Ray 2.60.0): kiln's one module that imports ``ray``.

Used: ``ray.init`` / ``shutdown``, ``ray.nodes`` (live nodes and their CPUs), ``ray.remote`` on
:class:`~triton_kiln.farm.node_actor.NodeCompiler` with a hard ``NodeAffinitySchedulingStrategy`` and a
concurrency group for its short calls, named detached actors (``get_actor``, ``get_if_exists``,
``ray.util.list_named_actors``) for standing compilers, ``ray.wait`` / ``get`` on its calls'
refs, ``ray.kill``, and ``ray.exceptions``.

Nothing else in kiln imports Ray; this module is imported when a
:class:`~triton_kiln.farm.RayCompilePool` is made, so ``import triton_kiln`` never needs Ray
(``pip install 'triton-kiln[ray]'`` installs it).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from triton_kiln.farm import reach
from triton_kiln.farm.errors import FarmError


class Outcome(enum.Enum):
    """What a finished actor call's failure means for its job (decided here only)."""

    ACTOR_LOST = "actor lost"  # the node actor (or its node) died: run the job again elsewhere
    CANCELLED = "cancelled"
    TASK_ERROR = "task error"  # Ray failed the call for another reason


@dataclass(frozen=True)
class NodeInfo:
    """A live node of the cluster, as Ray lists it."""

    node_id: str
    address: str
    cpus: int


def ray_module() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise FarmError(
            f"the compile farm needs Ray, which is not installed ({exc}); install it with "
            f"pip install 'triton-kiln[ray]'"
        ) from None
    return ray


def connect(address: str | None, init_kwargs: dict[str, Any]) -> bool:
    """Join the cluster at ``address`` (``None``: Ray's own choice, ``RAY_ADDRESS`` or a new local
    one); ``True`` when this call connected (and the pool should disconnect at shutdown). An
    explicit ``host:port`` is probed first (:mod:`triton_kiln.farm.reach`), so one where no cluster runs
    fails within seconds instead of Ray retrying for minutes."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    reach.check_address(address)  # an explicit host:port nobody answers on: fail now, not in minutes
    try:
        ray.init(address=address, **{"log_to_driver": False, **init_kwargs})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise reach.join_error(address or "RAY_ADDRESS / a new local cluster", str(exc)) from None
    return True


def disconnect() -> None:
    ray_module().shutdown()


NAMESPACE = "kiln-farm"
"""The Ray namespace of the standing node compilers (``kiln farm up``)."""

CONTROL = "control"
"""The actor's concurrency group for its short calls (``ready``, ``warm``, ``close``...): their own
threads, so a driver's ``ready()`` is answered while other drivers' compiles fill the default group."""
CONTROL_THREADS = 16


def standing_name(node_id: str) -> str:
    """The standing node compiler's actor name on ``node_id`` (in :data:`NAMESPACE`)."""
    return f"kiln-node-{node_id}"


def start_node_actor(
    node: NodeInfo, cpus: int, concurrency: int, args: tuple[Any, ...], *, standing: bool = False
) -> tuple[Any, bool]:
    """A :class:`~triton_kiln.farm.node_actor.NodeCompiler` on ``node`` (hard node affinity), holding
    ``cpus`` of its CPUs and taking ``concurrency`` compile calls at once; ``(its handle, True)``
    (it starts in the background: call its ``ready`` method to know when it runs).

    ``standing``: the node's standing compiler, named :func:`standing_name` in :data:`NAMESPACE`,
    ``lifetime="detached"`` (it outlives the driver and is shared by every driver): the running
    one is attached to, ``(handle, False)``; if there is none (never started, or it died: a dead
    actor's name is free again), one is made (``get_if_exists``, so two drivers racing make one).

    ``max_restarts=0``, ``max_task_retries=0``: Ray restarts nothing and re-runs no call; a lost
    actor's jobs are re-run by kiln (:class:`~triton_kiln.farm.pool.RayCompilePool`), on any live node.
    """
    ray = ray_module()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from triton_kiln.farm.node_actor import NodeCompiler

    named: dict[str, Any] = {}
    if standing:
        name = standing_name(node.node_id)
        try:
            return ray.get_actor(name, namespace=NAMESPACE), False
        except ValueError:  # none running
            named = {"name": name, "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True}
    actor_class = ray.remote(concurrency_groups={CONTROL: CONTROL_THREADS})(NodeCompiler)
    handle = actor_class.options(
        num_cpus=cpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False),
        max_restarts=0,
        max_task_retries=0,
        max_concurrency=concurrency,
        **named,
    ).remote(*args)
    return handle, True


def control(actor: Any, method: str, *args: Any) -> Any:
    """``actor.<method>.remote(*args)`` in the actor's :data:`CONTROL` group: its ref."""
    return getattr(actor, method).options(concurrency_group=CONTROL).remote(*args)


def standing_actors() -> dict[str, Any]:
    """The standing node compilers now registered (running or starting): name -> handle."""
    ray = ray_module()
    from ray.util import list_named_actors

    found = {}
    for entry in list_named_actors(all_namespaces=True):
        name = str(entry.get("name", ""))
        if entry.get("namespace") == NAMESPACE and name.startswith("kiln-node-"):
            with contextlib.suppress(ValueError):  # died meanwhile
                found[name] = ray.get_actor(name, namespace=NAMESPACE)
    return found


def kill(actor: Any) -> None:
    with contextlib.suppress(Exception):  # dead already, or Ray is going down
        ray_module().kill(actor, no_restart=True)


def wait(refs: Sequence[Any], timeout_s: float) -> list[Any]:
    """The refs of ``refs`` that are done: every one done by the time the first is (or
    ``timeout_s`` passes)."""
    if not refs:
        return []
    ray = ray_module()
    first, rest = ray.wait(list(refs), num_returns=1, timeout=timeout_s, fetch_local=True)
    if not first or not rest:
        return list(first)
    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
    return [*first, *more]


def fetch(ref: Any) -> tuple[Any, Outcome | None, str]:
    """``(reply, None, "")`` of a finished call, or ``(None, outcome, Ray's message)``."""
    ray = ray_module()
    exceptions = ray.exceptions
    try:
        return ray.get(ref), None, ""
    except exceptions.TaskCancelledError as exc:
        return None, Outcome.CANCELLED, _text(exc)
    except (
        exceptions.RayActorError,  # ActorDiedError, ActorUnavailableError: the process or its node
        exceptions.NodeDiedError,
        exceptions.ObjectLostError,
        exceptions.LocalRayletDiedError,
        exceptions.WorkerCrashedError,
        # the actor's node is gone (its hard node affinity cannot be met): seen when a node was
        # killed while the farm ran; a RayError but not a RayActorError
        exceptions.ActorUnschedulableError,
    ) as exc:
        return None, Outcome.ACTOR_LOST, _text(exc)
    except exceptions.RayError as exc:
        return None, Outcome.TASK_ERROR, _text(exc)


def nodes() -> list[NodeInfo]:
    """The cluster's live nodes with at least one CPU."""
    found = []
    for entry in ray_module().nodes():
        cpus = int(entry.get("Resources", {}).get("CPU", 0))
        if entry.get("Alive") and cpus >= 1:
            found.append(NodeInfo(str(entry["NodeID"]), str(entry.get("NodeManagerAddress", "?")), cpus))
    return found


def _text(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)[:600] or type(exc).__name__


def wait_all(refs: Sequence[Any], timeout_s: float) -> None:
    """Wait until every one of ``refs`` is done, or ``timeout_s`` passes."""
    with contextlib.suppress(Exception):
        ray_module().wait(list(refs), num_returns=len(refs), timeout=timeout_s)


def call(method: Any, timeout_s: float, *args: Any) -> Any:
    """``method.remote(*args)``'s value (an actor method, run in its :data:`CONTROL` group),
    waited for ``timeout_s`` at most."""
    ray = ray_module()
    try:
        return ray.get(method.options(concurrency_group=CONTROL).remote(*args), timeout=timeout_s)
    except ray.exceptions.RayError as exc:
        raise FarmError(f"a node actor did not answer: {_text(exc)}") from None

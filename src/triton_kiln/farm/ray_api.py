"""Every use of Ray's API (checked against Ray 2.60.0): kiln's one module that imports ``ray``.

Used: ``ray.init`` / ``shutdown``, ``ray.nodes`` (live nodes and their CPUs), ``ray.remote`` on
:class:`~kiln.farm.node_actor.NodeCompiler` with a hard ``NodeAffinitySchedulingStrategy``,
``ray.wait`` / ``get`` on its calls' refs, ``ray.kill``, and ``ray.exceptions``.

Nothing else in kiln imports Ray; this module is imported when a
:class:`~kiln.farm.RayCompilePool` is made, so ``import triton_kiln`` never needs Ray
(``pip install 'triton-kiln[ray]'`` installs it).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    one); ``True`` when this call connected (and the pool should disconnect at shutdown)."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, **{"log_to_driver": False, **init_kwargs})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise FarmError(
            f"could not join the Ray cluster at {address or 'RAY_ADDRESS / a new local cluster'}: {exc}; "
            f"start one with `ray start --head` and pass its address (host:port)"
        ) from None
    return True


def disconnect() -> None:
    ray_module().shutdown()


def start_node_actor(node: NodeInfo, cpus: int, concurrency: int, args: tuple[Any, ...]) -> Any:
    """A :class:`~kiln.farm.node_actor.NodeCompiler` on ``node`` (hard node affinity), holding
    ``cpus`` of its CPUs and taking ``concurrency`` calls at once; its handle (it starts in the
    background: call its ``ready`` method to know when it runs).

    ``max_restarts=0``, ``max_task_retries=0``: Ray restarts nothing and re-runs no call; a lost
    actor's jobs are re-run by kiln (:class:`~kiln.farm.pool.RayCompilePool`), on any live node.
    """
    ray = ray_module()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from triton_kiln.farm.node_actor import NodeCompiler

    actor_class = ray.remote(NodeCompiler)
    return actor_class.options(
        num_cpus=cpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False),
        max_restarts=0,
        max_task_retries=0,
        max_concurrency=concurrency,
    ).remote(*args)


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
    """``method.remote(*args)``'s value (an actor method), waited for ``timeout_s`` at most."""
    ray = ray_module()
    try:
        return ray.get(method.remote(*args), timeout=timeout_s)
    except ray.exceptions.RayError as exc:
        raise FarmError(f"a node actor did not answer: {_text(exc)}") from None

"""Every use of Ray's API (checked against Ray 2.60.0): kiln's one module that imports ``ray``.

Nothing else in kiln imports Ray; this module is imported when a
:class:`~kiln.farm.RayCompilePool` is made, so ``import triton_kiln`` never needs Ray
(``pip install 'triton-kiln[ray]'`` installs it).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Sequence
from typing import Any

from triton_kiln.farm.errors import FarmError


class Outcome(enum.Enum):
    """What a finished Ray task's failure means for its job (decided here only)."""

    NODE_LOST = "node lost"  # the node died or left: run the job again elsewhere
    WORKER_DIED = "worker died"  # the Ray worker process died, its node alive: do not retry
    CANCELLED = "cancelled"
    TASK_ERROR = "task error"  # Ray failed the task for another reason


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


def remote_compile() -> Any:
    """The farm's Ray task: :func:`kiln.farm.task.compile_job`, one CPU, Ray's retries off.

    ``max_retries=0``: Ray would re-run a task whose worker process died, and a job that killed
    its Ray worker would kill the next one; kiln re-runs only the jobs of a lost node itself
    (:class:`~kiln.farm.pool.RayCompilePool`). ``retry_exceptions=False``: a failed compile is a
    reply, never an exception, anyway.
    """
    ray = ray_module()
    from triton_kiln.farm.task import compile_job

    return ray.remote(num_cpus=1, max_retries=0, retry_exceptions=False)(compile_job)


def wait(refs: Sequence[Any], timeout_s: float) -> list[Any]:
    """The refs of ``refs`` that are done (at least one, unless ``timeout_s`` passes first)."""
    if not refs:
        return []
    ready, _ = ray_module().wait(list(refs), num_returns=1, timeout=timeout_s, fetch_local=True)
    return list(ready)


def fetch(ref: Any) -> tuple[Any, Outcome | None, str]:
    """``(reply, None, "")`` of a finished task, or ``(None, outcome, Ray's message)``."""
    ray = ray_module()
    exceptions = ray.exceptions
    try:
        return ray.get(ref), None, ""
    except exceptions.TaskCancelledError as exc:
        return None, Outcome.CANCELLED, _text(exc)
    except (exceptions.NodeDiedError, exceptions.ObjectLostError, exceptions.LocalRayletDiedError) as exc:
        return None, Outcome.NODE_LOST, _text(exc)
    except exceptions.WorkerCrashedError as exc:
        return None, Outcome.WORKER_DIED, _text(exc)
    except exceptions.RayError as exc:
        return None, Outcome.TASK_ERROR, _text(exc)


def cancel(ref: Any) -> None:
    with contextlib.suppress(Exception):  # finished already, or Ray is going down: nothing to cancel
        ray_module().cancel(ref, force=True)


def alive_nodes() -> list[str]:
    return [n["NodeManagerAddress"] for n in ray_module().nodes() if n.get("Alive")]


def _text(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines)[:600] or type(exc).__name__

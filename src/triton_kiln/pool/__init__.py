"""kiln's crash-isolated compile pool (see :mod:`triton_kiln.pool.pool` for the data flow).

Modules, one role each: ``pool`` (the caller API), ``jobs`` (what caller threads and the
manager share), ``manager`` (the manager thread's loop), ``workers`` (forking, dispatching to
and burying workers), ``supervisor`` (the zygote's lifecycle), ``failures`` (deaths and
exceptions -> the caller's errors), ``protocol`` (the typed messages), ``handles`` (fds and
buffers of each child), and the child processes' own code: ``zygote``, ``worker``, ``warmup``.

The names below load on first use, so that the zygote and its workers, which import
``triton_kiln.pool.zygote`` and ``triton_kiln.pool.worker``, do not import the parent's side of the pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton_kiln.pool.pool import CompilePool, PoolStats, get_pool

__all__ = ["CompilePool", "PoolStats", "get_pool"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from triton_kiln.pool import pool

        return getattr(pool, name)
    raise AttributeError(f"module 'triton_kiln.pool' has no attribute {name!r}")

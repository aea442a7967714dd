"""kiln's crash-isolated compile pool (see :mod:`triton_kiln.pool.pool` for the data flow).

Modules, one role each: ``pool`` (the caller API), ``interface`` (what every compile pool
offers: ``CompileService``, the batch methods), ``jobs`` (what caller threads and the manager
share), ``lookup`` (memory -> in flight -> disk -> new job), ``memory_cache``, ``manager`` (the
manager thread's loop), ``workers`` (forking, dispatching to and burying workers),
``supervisor`` (the zygote's lifecycle), ``failures`` (deaths and exceptions -> the caller's
errors), ``protocol`` (the typed messages), ``handles`` (fds and buffers of each child),
``sealed`` (requests the pool never unpickles), ``node_jobs`` (compile once per node),
``temp_root`` (the pool's temporary folder), ``pause`` (kiln's compile processes held still
while something is timed), and the child processes' own code: ``zygote``, ``worker``,
``warmup``. ``pool`` and ``jobs`` share their names with :mod:`triton_kiln.farm`'s: the same roles
for the pool on a Ray cluster.

Imports: artifacts, compile requests, :mod:`triton_kiln.node`, the remote cache (only when one
is configured), ``triton_compat`` and the top-level errors, framing, procs, progress_bar and
settings; never the autotuner or the sandbox, which (with the farm, the integrations and the
command line) build on it.

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

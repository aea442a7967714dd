"""kiln's crash-isolated compile pool (see :mod:`kiln.pool.pool` for the data flow).

The names below load on first use, so that the zygote and its workers, which import
``kiln.pool.zygote`` and ``kiln.pool.worker``, do not import the parent's side of the pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.pool.pool import CompilePool, PoolStats, get_pool

__all__ = ["CompilePool", "PoolStats", "get_pool"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kiln.pool import pool

        return getattr(pool, name)
    raise AttributeError(f"module 'kiln.pool' has no attribute {name!r}")

"""kiln's crash-isolated compile pool (see :mod:`kiln.pool.pool` for the data flow)."""

from kiln.pool.pool import CompilePool, PoolStats, get_pool

__all__ = ["CompilePool", "PoolStats", "get_pool"]

"""kiln's compile farm: the compile pool on a Ray cluster (``pip install 'triton-kiln[ray]'``).

Modules: ``pool`` (:class:`RayCompilePool`, the caller's side), ``jobs`` (its jobs, counters
and start-up clock), ``nodes`` (its node actors: started, fed, replaced), ``node_actor`` (one
per Ray node: that node's warm kiln CompilePool), ``standing`` (standing node compilers that
outlive a driver: ``kiln farm up`` / ``down``), ``wire`` (the plain-data replies and their
checks), ``ray_api`` (every use of Ray; the only module importing it), ``reach`` (whether an
address answers, asked before joining it), ``errors``. See docs/DISTRIBUTED.md. Importing this
package does not import Ray: making a pool does.

``pool`` and ``jobs`` are named as :mod:`triton_kiln.pool`'s are because they hold the same role
for this pool: the caller's API, and the jobs in flight with their counters.

Imports: the compile pool (its lookup, sealed requests and ``CompileService`` interface),
artifacts, compile requests, and the top-level errors and settings; only the command line and
the user import this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton_kiln.farm.pool import FarmStats, RayCompilePool

__all__ = ["FarmStats", "RayCompilePool"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from triton_kiln.farm import pool

        return getattr(pool, name)
    raise AttributeError(f"module 'triton_kiln.farm' has no attribute {name!r}")

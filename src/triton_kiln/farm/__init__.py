"""kiln's compile farm: the compile pool on a Ray cluster (``pip install 'triton-kiln[ray]'``).

Modules: ``pool`` (:class:`RayCompilePool`, the caller's side), ``batch`` (its batch methods),
``jobs`` (its jobs, counters and start-up clock), ``nodes`` (its node actors: started, fed,
replaced), ``node_actor`` (one per Ray node: that node's warm kiln CompilePool), ``wire`` (the
plain-data replies and their checks), ``ray_api`` (every use of Ray; the only module importing
it), ``reach`` (whether an address answers, asked before joining it), ``errors``. See
docs/DISTRIBUTED.md. Importing this package does not import Ray: making a pool does.
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

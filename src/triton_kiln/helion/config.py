"""Which kiln pool and GPU target Helion's precompiles go to (set by :func:`configure`).

By default: kiln's process-wide pool (:func:`triton_kiln.get_pool`, ``KILN_*`` settings) and the
local GPU's target. Tests on a machine without a GPU pass ``target=GPUTarget("cuda", 90, 32)``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from triton_kiln import CompilePool, GPUTarget, get_pool


@dataclass(frozen=True)
class HelionPoolConfig:
    pool: CompilePool | None = None  # None: triton_kiln.get_pool()
    target: GPUTarget | None = None  # None: the local GPU (an error without one)


_lock = threading.Lock()
_config = HelionPoolConfig()


def configure(pool: CompilePool | None = None, target: GPUTarget | None = None) -> HelionPoolConfig:
    """Send Helion's precompiles to ``pool`` (default: kiln's process-wide pool), for ``target``.

    Returns the previous configuration (pass its fields back to restore it).
    """
    global _config
    with _lock:
        previous = _config
        _config = HelionPoolConfig(pool=pool, target=target)
        return previous


def current() -> HelionPoolConfig:
    return _config


def pool() -> CompilePool:
    """The pool in force, started (in the background) if it was not yet."""
    chosen = _config.pool or get_pool()
    return chosen.start()

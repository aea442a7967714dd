"""One node, many processes: what they share through the cache directory (docs/NODE.md).

:mod:`.locks` holds the node-wide locks (flock'd files whose holder's death frees them) and
the compile slots; the pool (:mod:`triton_kiln.pool.node_jobs`) and the autotuner
(:mod:`triton_kiln.autotuner.node_tuning`) build on them. This package imports nothing of
kiln's, so every part may use it.
"""

from __future__ import annotations

from triton_kiln.node.locks import FileLock, Slots, node_dir

__all__ = ["FileLock", "Slots", "node_dir"]

"""Bundles of tuned kernels and the fast launch path: issue #4, not built yet.

These entry points exist so that code written against the planned API fails loudly, with the
reason, instead of doing something half-way. What exists today: tuned results live in the
tuning database (:mod:`kiln.tuning`) and binaries in the artifact cache (:mod:`kiln.store`),
so a second process on the same machine already tunes and compiles nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_REASON = (
    "kiln bundles and the fast launcher are issue #4, which is not built yet; on one machine, "
    "the tuning database and artifact cache already spare later processes any tuning or compile"
)


def save_bundle(path: str | Path, *kernels: Any) -> None:
    """Write tuned kernels (binaries, launch metadata, tuning records) to ``path``. Not built yet."""
    raise NotImplementedError(_REASON)


def load_bundle(path: str | Path) -> Any:
    """Load a bundle written by :func:`save_bundle`. Not built yet."""
    raise NotImplementedError(_REASON)


def precompile(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Submit a kernel's configs to the pool in the background. Not built yet.

    Today, ``autotuned_kernel.warmup(*args, grid=...)`` compiles every config in parallel.
    """
    raise NotImplementedError(_REASON)

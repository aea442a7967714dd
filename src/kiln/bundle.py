"""Bundles of tuned kernels and the fast launch path (issue #4): only ``precompile`` is built.

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
    """Start compiling a ``kiln.autotune``'d kernel's configs for calls like ``kernel(*args)``.

    Returns the list of futures at once; the first real call waits only for what is missing.
    (Bundles, the fast launcher and definition-time precompiling are still to come: issue #4.)
    """
    from kiln.autotuner import Autotuner

    if not isinstance(kernel, Autotuner):
        raise TypeError(
            f"kiln.precompile takes a kernel decorated with kiln.autotune, got {type(kernel).__name__}; "
            f"for a plain @triton.jit kernel, submit CompileRequests to a CompilePool."
        )
    return kernel.precompile(*args, **kwargs)

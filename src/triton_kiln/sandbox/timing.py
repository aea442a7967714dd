"""How a timing loop's runs become a config's time: ``triton.testing``'s quantiles.

Both sandboxes time a config with ``triton.testing.do_bench``'s loop (the torch one with
``do_bench`` itself, the native one with its C copy, ``bench_loop``) and keep every run's
milliseconds; :func:`quantiles` is ``triton.testing``'s ``_quantile`` (linear interpolation
between sorted runs), so a median here is the median ``do_bench(..., return_mode="median")``
returns for the same runs. The tuner's final round pools the runs of its passes and takes the
same quantiles (``triton_kiln.autotuner.final_round``).
"""

from __future__ import annotations

from collections.abc import Sequence


def quantiles(times: Sequence[float], qs: Sequence[float]) -> list[float]:
    """triton.testing's ``_quantile``: linear interpolation between sorted samples."""
    ordered = sorted(times)
    n = len(ordered)
    if n == 0:
        raise ValueError("no timed run to take quantiles of")
    out = []
    for q in qs:
        point = q * (n - 1)
        lower, upper = int(point // 1), -int(-point // 1)
        t = point - lower
        out.append((1 - t) * ordered[lower] + t * ordered[upper])
    return out

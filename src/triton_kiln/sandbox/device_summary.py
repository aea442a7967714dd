"""What the output check's kernel sends to the host, and how it becomes the rule's verdict.

:mod:`triton_kiln.sandbox.compare_kernel` reduces an output, a representative and the argument before
the run to per-program rows of ten numbers (its module docstring names them);
:meth:`Summary.reduce` folds the rows (sums and maxima) into a :class:`Summary`, and
:func:`measured` turns that into the :class:`~triton_kiln.sandbox.compare.Measured` that
:func:`triton_kiln.sandbox.compare_np._measure` computes from the host copies of the same tensors, so
:func:`triton_kiln.sandbox.compare.judge` gives the same verdict either way (the exact rule unchanged):

=====================================  ==============================================
host rule (compare_np._measure)         summary
=====================================  ==============================================
bitwise equal -> "same"                 ``differ == 0``
integers / bool -> "int", mismatched    ``differ``
wide |out - ref| all finite -> "float"  ``fast_bad == 0``: ``fast_max``, ``fast_scale``
NaN where the reference has a number    ``nan_new > 0`` -> "nan"
no element where neither is NaN         ``both == 0`` -> "float", 0, 0
float64 max |diff| (NaN propagates)     ``rare_nan > 0`` -> NaN, else ``rare_max``; ``rare_scale``
produced_nonfinite                      ``nonfinite > 0``
=====================================  ==============================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from triton_kiln.sandbox.compare import Measured

SLOTS = 10  # as triton_kiln.sandbox.compare_kernel.SLOTS (that module imports Triton; this one must not)


@dataclass(frozen=True)
class Summary:
    """One comparison of an output with a representative (and with the argument before the run)."""

    differ: int
    fast_bad: int = 0
    fast_max: float = 0.0
    fast_scale: float = 0.0
    nan_new: int = 0
    both: int = 0
    rare_nan: int = 0
    rare_max: float = 0.0
    rare_scale: float = 0.0
    nonfinite: int = 0

    @classmethod
    def reduce(cls, rows: Sequence[Sequence[float]]) -> Summary:
        """Fold the kernel's per-program rows: counts add up, maxima take the largest."""
        if not rows:
            return cls(0)
        for row in rows:
            if len(row) != SLOTS:
                raise ValueError(f"a summary row has {SLOTS} numbers, got {len(row)}")

        def total(i: int) -> int:
            return int(sum(float(row[i]) for row in rows))

        def largest(i: int) -> float:
            return max(float(row[i]) for row in rows)

        return cls(
            differ=total(0),
            fast_bad=total(1),
            fast_max=largest(2),
            fast_scale=largest(3),
            nan_new=total(4),
            both=total(5),
            rare_nan=total(6),
            rare_max=largest(7),
            rare_scale=largest(8),
            nonfinite=total(9),
        )


def measured(summary: Summary, floating: bool) -> Measured:
    """What :func:`triton_kiln.sandbox.compare_np._measure` measures of the same tensors."""
    if summary.differ == 0:
        return Measured("same")
    if not floating:
        return Measured("int", mismatched=summary.differ)
    if summary.fast_bad == 0:
        return Measured("float", summary.fast_max, summary.fast_scale)
    if summary.nan_new:
        return Measured("nan")
    if summary.both == 0:
        return Measured("float")
    diff = math.nan if summary.rare_nan else summary.rare_max
    return Measured("float", diff, summary.rare_scale)


def produced_nonfinite(summary: Summary, floating: bool) -> bool:
    """:func:`triton_kiln.sandbox.compare_np.produced_nonfinite` from the summary."""
    return floating and summary.nonfinite > 0

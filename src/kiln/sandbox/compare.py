"""Comparing a config's outputs with a reference, with tolerances that suit each dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# (rtol, atol) by dtype name: reductions in another order, tf32 dots and fp16 rounding differ
# between configs of a correct kernel by this much; a wrong config differs by far more.
TOLERANCES: dict[str, tuple[float, float]] = {
    "torch.float16": (1e-2, 1e-2),
    "torch.bfloat16": (2e-2, 2e-2),
    "torch.float32": (1e-3, 1e-4),
    "torch.float64": (1e-7, 1e-9),
    "torch.float8_e4m3fn": (1.25e-1, 1e-1),
    "torch.float8_e5m2": (2.5e-1, 1e-1),
}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_diff: float
    detail: str


def compare(
    outputs: Mapping[str, Any], reference: Mapping[str, Any], tolerances: tuple[float, float] | None = None
) -> Comparison:
    """Compare every tensor in ``outputs`` with the same name in ``reference``.

    Integer and boolean tensors must match exactly; floating-point ones within
    ``atol + rtol * max|reference|``. NaN where the reference has none fails.
    """
    import torch

    common = [name for name in reference if name in outputs]
    if not common:
        return Comparison(False, float("inf"), f"no output to compare (reference has {sorted(reference)})")
    worst = 0.0
    for name in common:
        ref = reference[name]
        out = outputs[name]
        if out.shape != ref.shape or out.dtype != ref.dtype:
            return Comparison(
                False,
                float("inf"),
                f"{name}: shape/dtype {tuple(out.shape)}/{out.dtype} != {tuple(ref.shape)}/{ref.dtype}",
            )
        if out.dtype.is_floating_point:
            a = out.double()
            b = ref.double()
            nan_out = torch.isnan(a)
            if bool((nan_out & ~torch.isnan(b)).any()):
                return Comparison(False, float("nan"), f"{name}: NaN where the reference has a number")
            both = ~(nan_out | torch.isnan(b))
            diff = float((a[both] - b[both]).abs().max()) if bool(both.any()) else 0.0
            rtol, atol = tolerances or TOLERANCES.get(str(out.dtype), (1e-3, 1e-5))
            scale = float(b[both].abs().max()) if bool(both.any()) else 0.0
            worst = max(worst, diff)
            if diff > atol + rtol * scale:
                return Comparison(
                    False, diff, f"{name}: max |diff| {diff:.3g} > {atol:g} + {rtol:g} x {scale:.3g}"
                )
        else:
            mismatched = int((out != ref).sum())
            if mismatched:
                return Comparison(False, float(mismatched), f"{name}: {mismatched} elements differ")
    return Comparison(True, worst, "")

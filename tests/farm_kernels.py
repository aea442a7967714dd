"""An autotuned kernel for ``kiln compile``'s tests: its own configs are the ones compiled."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 256}, num_warps=4, num_stages=2),
    ],
    key=["n"],
)
@triton.jit
def tuned_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)

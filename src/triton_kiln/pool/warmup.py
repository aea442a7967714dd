"""The tiny kernel the zygote compiles once so that forked workers start warm."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def warmup_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)

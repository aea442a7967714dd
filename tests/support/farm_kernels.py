"""Autotuned kernels for ``kiln compile``'s tests: their own configs are the ones compiled."""

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


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4, num_stages=2),
    ],
    key=["n_rows", "n_cols"],
)
@triton.jit
def tuned_rows(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    """Pointers and integers that a real call specializes: ``out_ptr`` 16-byte aligned, ``x_ptr``
    a view at an odd offset, ``n_cols`` a multiple of 16, ``n_rows`` 1, ``stride`` neither."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = (cols < n_cols) & (row < n_rows)
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x + 1.0, mask=mask)

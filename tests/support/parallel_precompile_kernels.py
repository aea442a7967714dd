"""Kernels for tests/test_bench_parallel_precompile.py alone, so that no other test of the process
has compiled them: the pool's workers and the test compile the same ``JITFunction``s, as a
library's kernels are in a benchmark (one with a ``@triton.jit`` helper reading a global)."""

import triton
import triton.language as tl

SCALE: tl.constexpr = tl.constexpr(2.0)


@triton.jit
def _double(x):
    return x * SCALE


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, _double(x) + y, mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)

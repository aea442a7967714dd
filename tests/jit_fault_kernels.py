"""Plain ``@triton.jit`` kernels whose compile faults for real in a pool preloaded with
``inductor_faults_preload`` (``kilnfault_<mode>`` in the name, compiled with ``num_warps=8``)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def copy_kilnfault_abort(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def copy_kilnfault_segv(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

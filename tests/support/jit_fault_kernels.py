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


@triton.jit
def copy_kilnfault_hang(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def does_not_compile(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), undefined_name)  # noqa: F821 - Triton's CompilationError

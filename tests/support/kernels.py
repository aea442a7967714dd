"""Real Triton kernels the tests compile (for sm_90, no GPU needed)."""

from __future__ import annotations

import triton
import triton.language as tl

SCALE = tl.constexpr(2)


@triton.jit
def double(x):
    return x * SCALE


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, double(x) + y, mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(tl.float16)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, c, mask=mask)


@triton.jit
def broken_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, undefined_name + 1)  # noqa: F821 - a Python-level compile error


@triton.jit
def axpby_kernel(
    x_ptr,
    out_ptr,
    n,
    stride_x,
    alpha,
    beta_flag,
    offset,
    SQUARE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """out[i] = alpha * x[i * stride_x] (squared if SQUARE) + offset (+1 if beta_flag): all arg kinds."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask).to(tl.float32)
    if SQUARE:
        x = x * x
    y = alpha * x + offset
    if beta_flag:
        y = y + 1.0
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def tile2d_kernel(x_ptr, out_ptr, M, N, stride_m, stride_n, BM: tl.constexpr, BN: tl.constexpr):
    """out = x.T + 1 over a 2-D grid (program ids 0 and 1)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_m + rn[None, :] * stride_n, mask=mask)
    tl.store(out_ptr + rn[None, :] * M + rm[:, None], x + 1, mask=mask)


ZERO_WRITER = 5
"""``add_modes_kernel``'s MODE that writes zeros without loading anything (wrong, and the cheapest)."""

OFF_BY_ONE = 1
"""``add_modes_kernel``'s MODE that adds 1 to the sum (wrong)."""

WRONG_WRITER_CONFIGS = (
    (256, 0, 2),
    (256, 0, 4),
    (512, 0, 2),
    (512, 0, 4),
    (1024, 0, 4),
    (1024, 0, 8),
    (1024, ZERO_WRITER, 4),
    (512, OFF_BY_ONE, 4),
)
"""``add_modes_kernel``'s configs as ``(BLOCK, MODE, num_warps)``: six right ones and two wrong
ones (the zero writer, the cheapest, and the off-by-one) that the output rule must never choose."""
"""The output rule's eight case configs of ``add_modes_kernel`` as ``(BLOCK, MODE, num_warps)``: six compute
``x + y`` and agree; one writes zeros (its MODE, held by no other config, and the fastest); one
adds 1."""


@triton.jit
def add_modes_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """out = x + y; MODE=ZERO_WRITER stores zeros and loads nothing, MODE=OFF_BY_ONE adds 1."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if MODE == 5:
        tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)
    else:
        out = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
        if MODE == 1:
            out = out + 1.0
        tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def desc_add_kernel(x_ptr, y_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = x + y over (M, N) row-major tiles, through device-side tensor descriptors
    (``tl.make_tensor_descriptor``: the binary asks for global scratch, Triton's runtime allocation)."""
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    row = tl.program_id(0) * BLOCK_M
    col = tl.program_id(1) * BLOCK_N
    o_desc.store([row, col], x_desc.load([row, col]) + y_desc.load([row, col]))

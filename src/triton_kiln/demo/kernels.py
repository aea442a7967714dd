"""Kernels the demo compiles, and the two faults it shows.

``demo_abort`` and ``demo_hang`` are ordinary kernels; importing this module installs a
Triton compile-stage hook that, for those two names only, does what a broken compiler does:
calls libc ``abort()`` after printing an assertion (as a failed MLIR/LLVM assertion would),
or never returns. Both happen inside ``triton.compile``, in the worker, for real.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import triton
import triton.language as tl

from triton_kiln.triton_compat import install_stages_hook

DEMO_ASSERTION = (
    "LinearLayout.cpp:512: reshapeOuts: Assertion `newOutDims == outDims' failed (injected by kiln demo)."
)


def _demo_faults(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_cubin = stages["cubin"]

    def cubin(src: Any, metadata: dict[str, Any]) -> Any:
        if metadata.get("name") == "demo_abort":
            os.write(2, f"python: {DEMO_ASSERTION}\n".encode())
            ctypes.CDLL(None).abort()
        if metadata.get("name") == "demo_hang":
            while True:
                time.sleep(1)
        return make_cubin(src, metadata)

    stages["cubin"] = cubin


install_stages_hook(_demo_faults, "kiln-demo-faults")


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(
        out_ptr + offsets,
        tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
        mask=mask,
    )


@triton.jit
def softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_n[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * scm + offs_n[None, :] * scn, acc.to(tl.float16), mask=mask)


@triton.jit
def demo_abort(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def demo_hang(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

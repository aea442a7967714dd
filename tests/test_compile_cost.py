"""The pool's compile-order guess (``guess_compile_cost``) and the unroll count it reads.

The case (Liger MoE on an H100): ``_token_gather_weighted_sum_kernel`` unrolls
``tl.static_range(triton.cdiv(H_dim, BLOCK_H))``; with ``H_dim=2048`` its ``BLOCK_H=64`` configs
compiled in 3.5-4.5 s and its ``BLOCK_H=512`` ones in 0.35-0.6 s, but the guess started the
``BLOCK_H=512`` ones first (bigger tiles), so the longest compiles started last and set the
tuning run's tail. The kernel below is that kernel's structure (real Triton, compiled in the
last test for sm_90 to check the guess against the compiler).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import triton
import triton.language as tl

from triton_kiln import CompileRequest, GPUTarget
from triton_kiln.compile.request import guess_compile_cost
from triton_kiln.compile.unroll import static_unroll

SM90 = GPUTarget("cuda", 90, 32)


@triton.jit
def gather_kernel(
    Y_ptr,
    w_ptr,
    s_rev_ptr,
    out_ptr,
    H_dim: tl.constexpr,
    K_dim: tl.constexpr,
    stride_Y_TK,
    stride_out_T,
    BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    for h_tile in tl.static_range(triton.cdiv(H_dim, BLOCK_H)):
        h_idx = h_tile * BLOCK_H + tl.arange(0, BLOCK_H)
        h_mask = h_idx < H_dim
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for k_tile in tl.range(triton.cdiv(K_dim, BLOCK_K)):
            k_offs = k_tile * BLOCK_K + tl.arange(0, BLOCK_K)
            k_mask = k_offs < K_dim
            flat = t * K_dim + k_offs
            perm = tl.load(s_rev_ptr + flat, mask=k_mask, other=0).to(tl.int64)
            y = tl.load(
                Y_ptr + perm[:, None] * stride_Y_TK + h_idx[None, :], mask=k_mask[:, None] & h_mask[None, :]
            )
            w = tl.load(w_ptr + flat, mask=k_mask, other=0.0).to(tl.float32)
            acc += tl.sum(y.to(tl.float32) * w[:, None], axis=0)
        tl.store(out_ptr + t * stride_out_T + h_idx, acc.to(out_ptr.dtype.element_ty), mask=h_mask)


def gather_request(block_h: int, block_k: int, num_warps: int = 4, h_dim: int = 2048) -> CompileRequest:
    signature = {
        "Y_ptr": "*bf16",
        "w_ptr": "*bf16",
        "s_rev_ptr": "*i32",
        "out_ptr": "*bf16",
        "H_dim": "constexpr",
        "K_dim": "constexpr",
        "stride_Y_TK": "i32",
        "stride_out_T": "i32",
        "BLOCK_H": "constexpr",
        "BLOCK_K": "constexpr",
    }
    constexprs = {"H_dim": h_dim, "K_dim": 2, "BLOCK_H": block_h, "BLOCK_K": block_k}
    return CompileRequest(
        gather_kernel, signature, constexprs, options={"num_warps": num_warps, "num_stages": 4}, target=SM90
    )


def liger_configs() -> list[tuple[int, int, int]]:  # Liger 0.8.5's token-gather configs
    return [(bh, bk, nw) for bh in (64, 128, 256, 512) for bk in (1, 2, 4, 8, 16) for nw in (4, 8)]


def test_unroll_count_read_from_the_source() -> None:
    src = gather_request(64, 1).spec.src
    assert static_unroll(src, {"H_dim": 2048, "BLOCK_H": 64}) == 32
    assert static_unroll(src, {"H_dim": 2048, "BLOCK_H": 512}) == 4
    assert static_unroll(src, {"H_dim": 2000, "BLOCK_H": 512}) == 4  # cdiv rounds up
    assert static_unroll(src, {"BLOCK_H": 64}) == 1  # H_dim unknown: not counted


@pytest.mark.parametrize(
    ("body", "values", "copies"),
    [
        ("for i in tl.static_range(4):\n  for j in tl.static_range(N // 2):\n   pass", {"N": 8}, 16),
        ("for i in tl.static_range(2, N, 2):\n  pass", {"N": 10}, 4),
        ("for i in tl.static_range(min(N, 3)):\n  pass\n for j in tl.static_range(5):\n  pass", {"N": 9}, 5),
        ("for i in tl.static_range(n_rt):\n  pass", {}, 1),  # a runtime value: unknown
        ("for i in tl.range(N):\n  pass", {"N": 64}, 1),  # not unrolled
        ("for i in static_range(N % 5 + 1):\n  pass", {"N": 7}, 3),
    ],
)
def test_unroll_count_cases(body: str, values: dict[str, Any], copies: int) -> None:
    src = "def k(N):\n " + body + "\n"
    assert static_unroll(src, values) == copies


def test_longest_unrolled_compiles_start_first() -> None:
    """Before: BLOCK_H=512 ranked first (bigger tiles). Now the many-copy configs lead, and the
    whole order follows the copy count."""
    requests = {c: gather_request(*c) for c in liger_configs()}
    order = sorted(requests, key=lambda c: guess_compile_cost(requests[c]), reverse=True)
    first_half = order[: len(order) // 2]
    assert all(bh <= 128 for bh, _, _ in first_half), order
    assert all(bh == 64 for bh, _, _ in order[:10]), order
    assert all(bh == 512 for bh, _, _ in order[-10:]), order


def test_kernels_without_unrolling_keep_the_tile_order() -> None:
    from support import kernels  # tests/support/kernels.py

    def mm(bm: int, bn: int, stages: int) -> CompileRequest:
        signature = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr"), "*fp16")
        signature.update(dict.fromkeys(("M", "N", "K", "stride_am", "stride_ak", "stride_bk"), "i32"))
        signature.update(dict.fromkeys(("stride_bn", "stride_cm", "stride_cn"), "i32"))
        signature.update(dict.fromkeys(("BLOCK_M", "BLOCK_N", "BLOCK_K"), "constexpr"))
        constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 32}
        return CompileRequest(
            kernels.matmul_kernel, signature, constexprs, options={"num_stages": stages}, target=SM90
        )

    small, big = mm(32, 32, 3), mm(128, 128, 3)
    assert static_unroll(big.spec.src, big.constexprs) == 1
    assert guess_compile_cost(big) == 128 * 128 * 32 * 3 / 2
    assert guess_compile_cost(big) > guess_compile_cost(small)


def test_the_guess_agrees_with_the_compiler() -> None:
    """A real sm_90 compile: 16 copies take longer than 2, as the guess says (tiles reversed)."""
    many, few = gather_request(64, 1, h_dim=1024), gather_request(512, 1, h_dim=1024)
    assert guess_compile_cost(many) > guess_compile_cost(few)
    seconds = {}
    for name, request in (("warm-up", gather_request(256, 2, h_dim=512)), ("few", few), ("many", many)):
        began = time.perf_counter()
        triton.compile(
            triton.compiler.ASTSource(request.kernel, dict(request.signature), dict(request.constexprs)),
            target=SM90,
            options={"num_warps": 4, "num_stages": 4},
        )
        seconds[name] = time.perf_counter() - began
    assert seconds["many"] > 2 * seconds["few"], seconds

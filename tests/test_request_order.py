"""Signatures keep the kernel's argument order: Triton's launcher reads arguments in that order."""

from __future__ import annotations

from support.basics import SM90
from triton_kiln import CompileRequest


def test_signature_follows_argument_order_not_alphabet() -> None:
    from support import kernels

    # Given in scrambled order; the kernel's order is x_ptr, y_ptr, out_ptr, n, BLOCK.
    request = CompileRequest(
        kernels.add_kernel,
        {"n": "i32", "out_ptr": "*fp32", "y_ptr": "*fp32", "x_ptr": "*fp32"},
        {"BLOCK": 128},
        target=SM90,
    )
    assert list(request.signature) == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
    src = request.ast_source(kernels.add_kernel)
    assert list(src.signature) == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]


def test_key_ignores_the_order_options_and_constexprs_are_given_in() -> None:
    from support import kernels

    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
    sig |= dict.fromkeys(
        ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"), "i32"
    )
    one = CompileRequest(
        kernels.matmul_kernel,
        sig,
        {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16},
        {"num_warps": 4, "num_stages": 3},
        SM90,
    )
    two = CompileRequest(
        kernels.matmul_kernel,
        dict(reversed(sig.items())),
        {"BLOCK_K": 16, "BLOCK_N": 32, "BLOCK_M": 64},
        {"num_stages": 3, "num_warps": 4},
        SM90,
    )
    assert one.key == two.key
    assert list(two.signature) == list(one.signature) == list(kernels.matmul_kernel.arg_names)

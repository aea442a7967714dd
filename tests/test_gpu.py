"""GPU tests (marked ``gpu``; skipped without one): binaries from the pool run correctly."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


def test_pool_binary_launches_without_compiling_in_parent(
    make_pool: Any, torch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import triton

    from support import kernels
    from triton_kiln import CompileRequest
    from triton_kiln.triton_compat import local_target

    target = local_target()
    assert target is not None
    pool = make_pool(workers=2)
    request = CompileRequest(
        kernels.add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
        {"BLOCK": 1024},
        options={"num_warps": 4},
    )
    artifact = pool.compile(request)

    def no_compile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the parent called triton.compile")

    monkeypatch.setattr(triton, "compile", no_compile)
    monkeypatch.setattr(triton.compiler.compiler, "compile", no_compile)
    kernel = pool.load_kernel(request, artifact)
    n = 100_003
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    # Triton's launcher takes every argument, constexprs included (it ignores their values).
    kernel[(triton.cdiv(n, 1024), 1, 1)](x, y, out, n, 1024)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + y)


@pytest.mark.parametrize(
    ("bm", "bn", "bk", "warps", "stages"), [(64, 64, 32, 4, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3)]
)
def test_matmul_configs_match_torch(
    make_pool: Any, torch: Any, bm: int, bn: int, bk: int, warps: int, stages: int
) -> None:
    import triton

    from support import kernels
    from triton_kiln import CompileRequest

    pool = make_pool(workers=2)
    sig = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr"), "*fp16")
    sig.update(
        dict.fromkeys(
            ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"),
            "i32",
        )
    )
    request = CompileRequest(
        kernels.matmul_kernel,
        sig,
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
        {"num_warps": warps, "num_stages": stages},
    )
    kernel = pool.load_kernel(request)
    m, n, k = 512, 384, 256
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), 1)
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    kernel[grid](a, b, c, m, n, k, *strides, bm, bn, bk)
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()).half()
    torch.testing.assert_close(c, ref, atol=2e-2, rtol=2e-2)

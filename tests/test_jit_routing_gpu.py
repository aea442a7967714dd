"""Plain ``@triton.jit`` kernels under ``kiln.install()`` on a GPU: Liger's MoE routing kernels
(plain jit) compiled in kiln's pool (the calling process compiles nothing) and launched by
Triton, when liger_kernel is importable. A plain kernel of the tests' own, launched the same way,
is tests/test_jit_routing.py's ``test_nothing_compiles_in_the_caller``, on both backends."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

from triton_kiln import CompilePool
from triton_kiln.routing import jit as jit_routing

pytestmark = pytest.mark.gpu

LIGER_ROUTING_KERNELS = (
    "_moe_router_histogram_kernel",
    "_moe_router_prefix_sum_kernel",
    "_moe_router_scatter_kernel",
)


@pytest.fixture
def routed(make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch) -> Any:
    """kiln's jit routing on a fresh pool; a compile in this process is recorded and refused."""
    import triton
    import triton.compiler.compiler as triton_compiler

    # Other test modules (faults.py) install a compile stage hook in this process when imported;
    # with one, kiln leaves plain jit compiles to Triton (as jit_support.py's fixture, on CPU).
    if hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):
        monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", None)
    pool = make_pool()
    monkeypatch.setattr(jit_routing, "_pool", lambda: pool)
    tried: list[str] = []

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        tried.append(str(self.name))
        raise AssertionError(f"{self.name} was compiled in the calling process")

    monkeypatch.setattr(triton_compiler.ASTSource, "make_ir", refuse)
    jit_routing.install()
    yield pool, tried
    jit_routing.uninstall()


def test_liger_moe_routing_kernels_compile_in_the_pool(routed: Any) -> None:
    import torch

    liger = pytest.importorskip("liger_kernel.ops.fused_moe_kernels")
    routing = _liger_routing_function(liger)
    pool, tried = routed
    torch.manual_seed(0)
    tokens, top_k, experts = 256, 2, 8
    topk = torch.topk(torch.rand(tokens, experts, device="cuda"), top_k, dim=-1).indices
    routing(topk, experts)
    torch.cuda.synchronize()
    assert tried == []  # none of Liger's kernels compiled in this process
    assert pool.stats.submitted >= 2  # at least histogram and prefix sum went through kiln's pool


def _liger_routing_function(liger: Any) -> Callable[..., Any]:
    """Liger's host function that launches the three routing kernels, where this version has it."""
    modules = [liger]
    for name in ("liger_kernel.ops.fused_moe", "liger_kernel.ops.moe"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    for module in modules:
        fn = getattr(module, "compute_routing_metadata", None)
        if fn is not None:
            return fn  # type: ignore[no-any-return]
    missing = [name for name in LIGER_ROUTING_KERNELS if not hasattr(liger, name)]
    pytest.skip(f"this liger_kernel has no compute_routing_metadata (routing kernels missing: {missing})")

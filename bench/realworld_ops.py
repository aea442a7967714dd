"""The real-library ops of ``bench/realworld.py``: what each imports, its inputs, and its call.

Each op is a :class:`Op`: the library modules to import (after ``triton.autotune`` was swapped,
in the kiln arms), and ``build()``, which makes seeded CUDA inputs and returns a
:class:`Case`: ``run()`` runs the op once on those inputs and returns its outputs by name
(tensors). Every arm builds the same inputs (same seed, same shapes), so outputs compare
across processes. Shapes are real-world but modest, so that the slowest arm (Triton's
sequential first call over ~100 configs) stays within about two minutes per op on an H100.

Kernels each op launches (Liger-Kernel 0.8.5, fla-core 0.6.0; see docs/notes/realworld-study.md):

* ``liger_dyt_fwdbwd``: ``_dyt_fwd_kernel`` and ``_dyt_bwd_kernel`` (18 configs each, positional
  calls, grid function; the backward has ``reset_to_zero=["DA"]`` and per-program partial sums);
* ``liger_swiglu_fwd``: ``_swiglu_kernel_forward`` of ``liger_kernel.ops.mlp`` (32 configs, host
  TMA descriptors whose block shapes each config's ``pre_hook`` sets, keyword constexpr);
* ``liger_moe_fwd``: routing kernels (plain JIT), ``_fused_up_proj_swiglu_kernel`` and
  ``_fused_down_proj_kernel`` (32 configs each), ``_token_gather_weighted_sum_kernel`` (40),
  keyword calls with lambda grids;
* ``fla_chunk_gla_fwd``: ``chunk_local_cumsum_vector_kernel``, ``chunk_fwd_kernel_h``,
  ``chunk_gla_fwd_A_kernel_intra_sub_inter``/``_sub_intra`` and ``chunk_gla_fwd_kernel_o``
  (heuristics over autotune; all but ``chunk_fwd_kernel_h`` are FLA ``CachedAutotuner``\\ s);
* ``fla_parallel_simple_gla_fwd``: ``chunk_local_cumsum_scalar_kernel`` (CachedAutotuner) and
  ``parallel_simple_gla_fwd_kernel`` (heuristics over ``triton.autotune``, a heuristic that
  reads a call-time constexpr, ``None`` arguments);
* ``fla_chunk_gdr_fwd`` (not in the default set): the gated delta rule forward, every kernel a
  ``CachedAutotuner``. Its backward is refused by FLA on Hopper with Triton < 3.7.1; the
  forward runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Outputs = dict[str, Any]


@dataclass(frozen=True)
class Case:
    run: Callable[[], Outputs]


@dataclass(frozen=True)
class Op:
    name: str
    modules: tuple[str, ...]  # imported after the swap; their autotuned kernels are inventoried
    build: Callable[[], Case]
    default: bool = True


def _randn(*shape: int, dtype: Any = None) -> Any:
    import torch

    return torch.randn(*shape, device="cuda", dtype=dtype or torch.bfloat16)


def _dyt() -> Case:
    import torch
    from liger_kernel.ops.dyt import liger_dyt_bwd, liger_dyt_fwd

    m, n = 4096, 4096
    x = _randn(m, n)
    dy = _randn(m, n)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.float32)
    gamma = torch.randn(n, device="cuda", dtype=torch.float32)
    beta = torch.randn(n, device="cuda", dtype=torch.float32)

    def run() -> Outputs:
        y = liger_dyt_fwd(x, alpha, gamma, beta)
        dx, da, dg, db = liger_dyt_bwd(dy, x, alpha, gamma, beta)
        return {"y": y, "dx": dx, "dalpha": da, "dgamma": dg, "dbeta": db}

    return Case(run)


def _swiglu() -> Case:
    from liger_kernel.ops.mlp import gemm_swiglu

    batch, seq, dim, hidden = 2, 2048, 2048, 5632
    x = _randn(batch, seq, dim)
    gate = _randn(hidden, dim) * 0.02
    up = _randn(hidden, dim) * 0.02

    def run() -> Outputs:
        agu, _config = gemm_swiglu(x, gate, up, 1.0, store_preact=True)
        return {"agu": agu}

    return Case(run)


def _moe() -> Case:
    import torch
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    tokens, hidden, inter, experts, top_k = 4096, 2048, 1024, 16, 2
    x = _randn(tokens, hidden)
    gate_up = _randn(experts, 2 * inter, hidden) * 0.02
    down = _randn(experts, hidden, inter) * 0.02
    logits = torch.randn(tokens, experts, device="cuda")
    weights, index = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    index = index.to(torch.int32).contiguous()
    weights = weights.to(torch.bfloat16).contiguous()

    def run() -> Outputs:
        with torch.no_grad():
            out = LigerFusedMoEFunction.apply(x, gate_up, down, index, weights)
        return {"out": out}

    return Case(run)


def _gla_inputs(batch: int, seq: int, heads: int, dk: int, dv: int) -> tuple[Any, ...]:
    import torch
    import torch.nn.functional as F

    q = _randn(batch, seq, heads, dk)
    k = _randn(batch, seq, heads, dk)
    v = _randn(batch, seq, heads, dv)
    g = F.logsigmoid(torch.randn(batch, seq, heads, dk, device="cuda", dtype=torch.float32)) / 16
    return q, k, v, g


def _chunk_gla() -> Case:
    import torch
    from fla.ops.gla import chunk_gla

    q, k, v, g = _gla_inputs(4, 2048, 8, 128, 128)

    def run() -> Outputs:
        with torch.no_grad():
            o, _state = chunk_gla(q, k, v, g)
        return {"o": o}

    return Case(run)


def _parallel_simple_gla() -> Case:
    import torch
    import torch.nn.functional as F
    from fla.ops.simple_gla import parallel_simple_gla

    q, k, v, _ = _gla_inputs(4, 2048, 8, 128, 128)
    g = F.logsigmoid(torch.randn(4, 2048, 8, device="cuda", dtype=torch.float32)) / 16

    def run() -> Outputs:
        with torch.no_grad():
            o, _attn = parallel_simple_gla(q, k, v, g)
        return {"o": o}

    return Case(run)


def _chunk_gdr() -> Case:
    import torch
    import torch.nn.functional as F
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    batch, seq, heads, dk, dv = 4, 2048, 8, 128, 128
    q, k, v, _ = _gla_inputs(batch, seq, heads, dk, dv)
    k = F.normalize(k.float(), p=2, dim=-1).to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(batch, seq, heads, device="cuda", dtype=torch.float32)) / 16
    beta = torch.rand(batch, seq, heads, device="cuda", dtype=torch.bfloat16)

    def run() -> Outputs:
        with torch.no_grad():
            o, _state = chunk_gated_delta_rule(q, k, v, g, beta)
        return {"o": o}

    return Case(run)


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("liger_dyt_fwdbwd", ("liger_kernel.ops.dyt",), _dyt),
        Op("liger_swiglu_fwd", ("liger_kernel.ops.mlp",), _swiglu),
        Op("liger_moe_fwd", ("liger_kernel.ops.fused_moe",), _moe),
        Op("fla_chunk_gla_fwd", ("fla.ops.gla",), _chunk_gla),
        Op("fla_parallel_simple_gla_fwd", ("fla.ops.simple_gla",), _parallel_simple_gla),
        Op("fla_chunk_gdr_fwd", ("fla.ops.gated_delta_rule",), _chunk_gdr, default=False),
    )
}
DEFAULT_OPS = [name for name, op in OPS.items() if op.default]

"""No GPU needed: the autotuned kernels that ``bench/realworld.py``'s newer ops launch are, under
``kiln.install()``, kiln's, and compile through kiln's pool to Triton's own binary for sm_90.

::

    PYTHONPATH=src python bench/realworld_compile_check.py [--configs 2] [--kernels op1,op2]

For each op, its launches: the DPLR forward's, GemLite's and the rotary flash attention's (forward
and backward, through autograd) are taken from the library's own host code run on CPU tensors
(every autotuned launch is recorded instead of run, kiln's class or Triton's; plain
``@triton.jit`` launches are listed), FlagGems' and torchao's (one kernel each, whose host code
needs CUDA) are written out as the library passes them. For each autotuned
kernel, the first ``--configs`` of its pruned configs are built as ``kiln.precompile`` builds
them, compiled through a ``CompilePool`` for ``GPUTarget("cuda", 90, 32)`` and compared with
Triton's ``triton.compile`` of the same specialization in this process; the global scratch
(device-side descriptors) and the constexprs bound from defaults are reported. One JSON line per
op and per kernel; exit status 1 if a kernel is not kiln's class, fails to compile, or differs
from Triton's binary. (FlagGems' ``LibTuner`` drives its own search from its own ``run``; kiln
serves the ``_bench`` calls of that search: reported as ``search: library``, ``tuned_by_kiln``.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import realworld_ops


@dataclass(frozen=True)
class KernelCase:
    """One op's launches: ``calls()`` gives the autotuned kernels' calls and the plain JIT
    kernels' names; ``scratch``: kernels whose global scratch (device-side descriptors) is
    expected."""

    op: str
    calls: Callable[[], tuple[list[Any], list[str]]]
    scratch: tuple[str, ...] = ()


Call = tuple[Any, tuple[Any, ...], dict[str, Any]]  # an autotuner, and a launch's arguments


def _captured_calls(run_op: Callable[[], Any]) -> tuple[list[Call], list[str]]:
    """Run the library's host code on CPU tensors; every launch of an autotuned kernel (kiln's
    or Triton's class, by ``kernel[grid](...)`` or by a ``Heuristics`` calling ``run``) is
    recorded instead of run, and so is every plain ``@triton.jit`` launch (by name only)."""
    from triton.runtime.autotuner import Autotuner as TritonAutotuner
    from triton.runtime.jit import JITFunction

    import triton_kiln as kiln

    calls: list[Call] = []
    plain: list[str] = []

    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("warmup", None)
        kwargs.pop("grid", None)
        calls.append((self, args, kwargs))

    def getitem(self: Any, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: run(self, *args, **kwargs)

    def jit_run(self: Any, *args: Any, **kwargs: Any) -> None:
        plain.append(self.fn.__name__)

    patched = [(kiln.Autotuner, "run", run), (kiln.Autotuner, "__getitem__", getitem)]
    patched += [(TritonAutotuner, "run", run), (TritonAutotuner, "__getitem__", getitem)]
    patched += [(JITFunction, "run", jit_run), (JITFunction, "__getitem__", lambda self, grid: self.run)]
    saved = [(cls, name, vars(cls).get(name)) for cls, name, _ in patched]
    for cls, name, value in patched:
        setattr(cls, name, value)
    try:
        run_op()
    finally:
        for cls, name, value in saved:
            if value is None:
                delattr(cls, name)  # it was inherited
            else:
                setattr(cls, name, value)
    return calls, plain


def _gemlite_calls() -> tuple[list[Call], list[str]]:
    import gemlite
    import torch

    def run_op() -> Any:
        gemlite.reset_config()
        weight = torch.randn(4096, 4096, dtype=torch.bfloat16) * 0.02
        layer = gemlite.helper.A16W8(device="cpu").from_weights(weight)
        return layer(torch.randn(4096, 4096, dtype=torch.bfloat16))

    return _captured_calls(run_op)


def _dplr_calls() -> tuple[list[Call], list[str]]:
    import torch
    import torch.nn.functional as F
    from fla.ops.generalized_delta_rule import chunk_dplr_delta_rule

    batch, seq, heads, dk = 4, 2048, 16, 64
    bf16 = torch.bfloat16
    q, k, v = (torch.randn(batch, seq, heads, dk, dtype=bf16) for _ in range(3))
    kk = F.normalize(k.float(), p=2, dim=-1)
    a, b = (-kk).to(bf16), (kk * 0.5).to(bf16)
    gk = (F.logsigmoid(torch.randn(batch, seq, heads, dk)) / 16).to(bf16)

    def run_op() -> Any:
        with torch.no_grad():
            return chunk_dplr_delta_rule(q, k, v, a, b, gk, chunk_size=64)

    return _captured_calls(run_op)


def _rotary_calls() -> tuple[list[Call], list[str]]:
    import torch
    from rotary_embedding_torch import RotaryEmbedding
    from rotary_embedding_torch.flash_attn_with_rotary import flash_attn_with_rotary

    batch, seq, q_heads, kv_heads, dim = 4, 2048, 16, 4, 64
    q = torch.randn(batch, q_heads, seq, dim, dtype=torch.float16, requires_grad=True)
    k, v = (torch.randn(batch, kv_heads, seq, dim, dtype=torch.float16, requires_grad=True) for _ in "kv")
    freqs = RotaryEmbedding(dim=32)(torch.arange(seq)).to(torch.float16)

    def run_op() -> Any:  # the forward's launch, then the backward's (autograd, as the op runs it)
        o = flash_attn_with_rotary(q, k, v, rotary_pos_emb=freqs, is_causal=True)
        return torch.autograd.grad(o, (q, k, v), torch.ones_like(o))

    return _captured_calls(run_op)


def _module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _flaggems_mm() -> Any:
    import flag_gems  # noqa: F401  (imports FlagGems' Hopper ops as `hopper.ops.mm`)

    return sys.modules["hopper.ops.mm"].mm_kernel_general.fn  # LibEntry -> LibTuner


def _bf16() -> Any:
    import torch

    return torch.bfloat16


def _flaggems_args() -> tuple[Any, ...]:
    m, k, n = 4096, 768, 50257
    return (_bf16(), _bf16(), _bf16(), m, n, k, k, 1, n, 1, n, 1)


def _torchao_args() -> tuple[Any, ...]:
    import torch

    m = n = k = 4096
    i8 = torch.int8
    return (i8, i8, _bf16(), _bf16(), _bf16(), m, n, k, k, 1, 1, k, n, 1)


TORCHAO_INT8 = "torchao.prototype.quantized_training.int8_mm"
# constexprs bound from defaults or heuristics, reported per config
BOUND_DEFAULTS = ("GATHER_SUPPORTED", "EVEN_K", "EVEN_M", "EVEN_N")

CASES = [
    KernelCase(
        "flaggems_mm_lmhead",
        lambda: ([(_flaggems_mm(), _flaggems_args(), {"GROUP_M": 8})], []),
        scratch=("mm_kernel_general",),
    ),
    KernelCase(
        "torchao_scaled_int8_mm",
        lambda: (
            [(_module(TORCHAO_INT8)._scaled_int8_mm_kernel, _torchao_args(), {"COL_SCALE_SCALAR": False})],
            [],
        ),
    ),
    KernelCase("fla_chunk_dplr_fwd", _dplr_calls),
    KernelCase("gemlite_a16w8_gemm", _gemlite_calls),
    KernelCase("rotary_flash_attn_fwdbwd", _rotary_calls),
]


def check(op: str, call: Any, pool: Any, configs: int, scratch: bool, triton_cache: Path) -> dict[str, Any]:
    import triton_kiln as kiln
    from triton_kiln import GPUTarget, triton_compat

    sm90 = GPUTarget("cuda", 90, 32)
    tuner, call_args, call_kwargs = call
    name = f"{tuner.base_fn.__module__}.{tuner.base_fn.__qualname__}"
    out: dict[str, Any] = {"op": op, "kernel": name, "class": type(tuner).__qualname__}
    out["kiln_class"] = isinstance(tuner, kiln.Autotuner)
    if not out["kiln_class"]:
        out["ok"] = False
        return out
    from triton_kiln.autotuner.library_search import role

    out["search"] = role(type(tuner), kiln.Autotuner).driver  # kiln's, or the library's via _bench
    out["tuned_by_kiln"] = out["search"] in ("kiln", "library")
    out["configs_total"] = len(tuner.configs)
    tuner._target, tuner._pool = sm90, pool  # compile for sm_90 in this pool (no GPU here)
    try:
        args = triton_compat.wrap_dtypes(tuple(call_args))
        kwargs = dict(zip(call_kwargs, triton_compat.wrap_dtypes(tuple(call_kwargs.values())), strict=True))
        tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
        pruned = tuner.prune_configs(kwargs) if len(tuner.configs) > 1 else tuner.configs
        out["configs_pruned"] = len(pruned)
        candidates = [tuner._candidate(c, args, kwargs) for c in pruned[:configs]]
        started = time.perf_counter()
        futures = [pool.submit(c.request) for c in candidates]
        artifacts = [f.result(timeout=600) for f in futures]
        out["pool_s"] = round(time.perf_counter() - started, 2)
    finally:
        tuner.nargs = None
    results = []
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache)
    for cand, artifact in zip(candidates, artifacts, strict=True):
        direct = triton_compat.compile_kernel(
            cand.request.ast_source(tuner._shape.jit_fn), sm90, dict(cand.request.options)
        )
        results.append(
            {
                "config": cand.label,
                "same_binary_as_triton": artifact.binary == direct.asm["cubin"],
                "global_scratch_size": getattr(direct.metadata, "global_scratch_size", None),
                "defaults_bound": {k: v for k, v in cand.request.constexprs.items() if k in BOUND_DEFAULTS},
            }
        )
    out["configs"] = results
    out["ok"] = all(r["same_binary_as_triton"] for r in results) and (
        not scratch or all((r["global_scratch_size"] or 0) > 0 for r in results)
    )
    return out


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1500]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=2, help="configs compiled per kernel")
    parser.add_argument("--kernels", default="", help="comma-separated ops (default: every op here)")
    args = parser.parse_args(argv)
    wanted = {o for o in args.kernels.split(",") if o}
    cases = [c for c in CASES if not wanted or c.op in wanted]
    for case in cases:  # each op's environment (FlagGems on a machine without a GPU), before imports
        spec = realworld_ops.OPS[case.op]
        os.environ.update(spec.env)
        os.environ.update(spec.dry_run_env)
        if spec.dry_run_setup is not None:
            import torch

            if not torch.cuda.is_available():
                spec.dry_run_setup()
    import triton_kiln as kiln
    from triton_kiln import CompilePool

    kiln.install()
    failed = False
    with (
        tempfile.TemporaryDirectory(prefix="kiln-rw-check-") as tmp,
        CompilePool(workers=2, cache_dir=Path(tmp) / "pool") as pool,
    ):
        for case in cases:
            try:
                calls, plain = case.calls()
            except Exception as exc:
                print(
                    json.dumps({"op": case.op, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:1500]})
                )
                failed = True
                continue
            print(json.dumps({"op": case.op, "autotuned_launches": len(calls), "plain_jit_launches": plain}))
            for call in calls:
                scratch = call[0].base_fn.__name__ in case.scratch
                cache = Path(tmp) / f"triton-{case.op}"
                try:
                    result = check(case.op, call, pool, args.configs, scratch, cache)
                except Exception as exc:
                    name = call[0].base_fn.__name__
                    result = {
                        "op": case.op,
                        "kernel": name,
                        "ok": False,
                        "error": f"{type(exc).__name__}: {exc}"[:1500],
                    }
                failed = failed or not result["ok"]
                print(json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""No GPU needed: the autotuned kernels of ``bench/realworld.py``'s newer ops, under
``kiln.install()``, are kiln's and compile through kiln's pool to Triton's own binary for sm_90.

::

    PYTHONPATH=src python bench/realworld_compile_check.py [--configs 2] [--kernels a,b]

For each kernel (the library's own autotuner object, made after ``kiln.install()``), the first
``--configs`` configs are compiled as ``kiln.precompile`` builds them for the op's call (the
arguments the op passes, dtypes standing for tensors), through a ``CompilePool`` for
``GPUTarget("cuda", 90, 32)``; each binary is compared with Triton's ``triton.compile`` of the same
specialization in this process, and its global scratch (device-side descriptors) is reported.
Prints one JSON line per kernel; exit status 1 if any kernel is not kiln's class, fails to compile,
or differs from Triton's binary. (FlagGems' ``LibTuner`` is kiln's class but tunes by its own
``run``: reported as ``tuned_by_kiln: false``; its kernels still go through the pool here.)
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
    name: str
    op: str
    find: Callable[[], Any]  # the library's autotuner object (after install and import)
    args: Callable[[], tuple[Any, ...]]
    kwargs: Callable[[], dict[str, Any]]
    scratch: bool = False  # device-side descriptors: global scratch expected
    capture: Callable[[], Any] | None = None  # a Call (autotuner, args, kwargs): replaces the 3 above


Call = tuple[Any, tuple[Any, ...], dict[str, Any]]  # an autotuner, and a launch's arguments


def _captured_call(run_op: Callable[[], Any], kernel_name: str) -> Call:
    """Run the library's host code on CPU tensors and keep the arguments its launch of
    ``kernel_name`` passes (kiln's autotuner records the call instead of launching)."""
    import triton_kiln as kiln

    captured: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    original = kiln.Autotuner.__getitem__

    def record(self: Any, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: captured.append((self, args, kwargs))

    kiln.Autotuner.__getitem__ = record  # type: ignore[method-assign]
    try:
        run_op()
    finally:
        kiln.Autotuner.__getitem__ = original  # type: ignore[method-assign]
    for tuner, args, kwargs in captured:
        if tuner.base_fn.__name__ == kernel_name:
            return tuner, args, kwargs
    launched = [t.base_fn.__name__ for t, _, _ in captured]
    raise RuntimeError(f"{kernel_name} was not launched; launched: {launched}")


def _gemlite_call() -> Call:
    import gemlite
    import torch

    def run_op() -> Any:
        gemlite.reset_config()
        weight = torch.randn(4096, 4096, dtype=torch.bfloat16) * 0.02
        layer = gemlite.helper.A16W8(device="cpu").from_weights(weight)
        return layer(torch.randn(4096, 4096, dtype=torch.bfloat16))

    return _captured_call(run_op, "gemm_INT_kernel")


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


def _dplr_kwargs() -> dict[str, Any]:
    import torch

    f32 = torch.float32
    return {
        "A_ab": f32,
        "A_ab_inv": f32,
        "cu_seqlens": None,
        "chunk_indices": None,
        "T": 2048,
        "H": 16,
        "BT": 64,
        "BC": 32,
        "IS_VARLEN": False,  # heuristics outside the autotuner compute it in a real call
    }


DPLR_WY = "fla.ops.generalized_delta_rule.dplr.wy_fast_fwd"
# constexprs bound from defaults or heuristics, reported per config
BOUND_DEFAULTS = ("GATHER_SUPPORTED", "EVEN_K", "EVEN_M", "EVEN_N")

CASES = [
    KernelCase(
        "hopper.ops.mm.mm_kernel_general",
        "flaggems_mm_lmhead",
        _flaggems_mm,
        _flaggems_args,
        lambda: {"GROUP_M": 8},
        scratch=True,
    ),
    KernelCase(
        "torchao...int8_mm._scaled_int8_mm_kernel",
        "torchao_scaled_int8_mm",
        lambda: _module("torchao.prototype.quantized_training.int8_mm")._scaled_int8_mm_kernel,
        _torchao_args,
        lambda: {"COL_SCALE_SCALAR": False},
    ),
    KernelCase(
        "fla...dplr.wy_fast_fwd.prepare_wy_repr_fwd_kernel_chunk64",
        "fla_chunk_dplr_fwd",
        lambda: _module(DPLR_WY).prepare_wy_repr_fwd_kernel_chunk64.fn,
        tuple,
        _dplr_kwargs,
    ),
    KernelCase(
        "gemlite.triton_kernels.gemm_kernels.gemm_INT_kernel",
        "gemlite_a16w8_gemm",
        lambda: None,
        tuple,
        dict,
        capture=_gemlite_call,
    ),
]


def check(case: KernelCase, pool: Any, configs: int, triton_cache: Path) -> dict[str, Any]:
    import triton_kiln as kiln
    from triton_kiln import GPUTarget, triton_compat

    sm90 = GPUTarget("cuda", 90, 32)
    if case.capture is not None:
        tuner, call_args, call_kwargs = case.capture()
    else:
        tuner, call_args, call_kwargs = case.find(), case.args(), case.kwargs()
    out: dict[str, Any] = {"kernel": case.name, "op": case.op, "class": type(tuner).__qualname__}
    out["kiln_class"] = isinstance(tuner, kiln.Autotuner)
    if not out["kiln_class"]:
        out["ok"] = False
        return out
    run = next((vars(c)["run"] for c in type(tuner).__mro__ if "run" in vars(c)), None)
    code = getattr(run, "__code__", None)
    out["tuned_by_kiln"] = run is kiln.Autotuner.run or (code is not None and "super" in code.co_names)
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
        scratch = getattr(direct.metadata, "global_scratch_size", None)
        results.append(
            {
                "config": cand.label,
                "same_binary_as_triton": artifact.binary == direct.asm["cubin"],
                "global_scratch_size": scratch,
                "defaults_bound": {k: v for k, v in cand.request.constexprs.items() if k in BOUND_DEFAULTS},
            }
        )
    out["configs"] = results
    out["ok"] = all(r["same_binary_as_triton"] for r in results) and (
        not case.scratch or all((r["global_scratch_size"] or 0) > 0 for r in results)
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=2, help="configs compiled per kernel")
    parser.add_argument("--kernels", default="", help="comma-separated ops (default: every case)")
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
                result = check(case, pool, args.configs, Path(tmp) / f"triton-{case.op}")
            except Exception as exc:
                result = {"kernel": case.name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:1500]}
            failed = failed or not result["ok"]
            print(json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

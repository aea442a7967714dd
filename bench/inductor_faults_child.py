"""One arm of one ``bench/inductor_faults.py`` case, in a process of its own (started by it).

::

    inductor_faults.py (parent)                     this process
      fresh caches; BENCH_FAULT* variables;          (sitecustomize: the fault hook, in this
      PYTHONPATH = fault hook dir, src          -->   process and every compile process below)
      argv: --arm --model --mode --dir                eager reference first (no Triton compile)
                                                      kiln arms: triton_kiln.inductor.install()
                                                      torch.compile, first call, sync, check
      reads DIR/result.json (written at         <--   against eager; a second call
      every stage: a SIGABRT leaves the stage)

Models: ``mm`` (a bf16 2048x2048 matmul: under max-autotune, Triton template choices against
cuBLAS), ``user_autotune`` (``inductor_faults_kernels.affine_then_scale``: a user-defined
``triton.autotune`` kernel with three configs inside torch.compile), ``reduction`` (a row sum of a
4096x8192 fp32 tensor: under max-autotune, a codegen reduction kernel with several configs, and
coordinate descent). Arms: ``stock``, ``stock_subproc`` (Inductor's own
``autotune_in_subproc=True``: template benchmarks in a subprocess), ``kiln``, ``kiln_sandbox``
(``install(sandbox_benchmarks=True)``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inductor_child
import inductor_models

ARMS = ("stock", "stock_subproc", "kiln", "kiln_sandbox")
MODELS = ("mm", "user_autotune", "reduction")
TOLERANCES = {"16bit": (2e-2, 2e-2), "other": (1e-3, 1e-3)}  # (rtol of max |ref|, atol)


def build(model: str) -> tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]:
    """``(fn, eager_reference, inputs)``: the function compiled, its eager twin, seeded inputs."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1)
    if model == "mm":
        a, b = (torch.randn(2048, 2048, generator=gen).to("cuda", torch.bfloat16) for _ in range(2))

        def mm(x: Any, y: Any) -> Any:
            return x @ y

        return mm, mm, (a, b)
    if model == "user_autotune":
        import inductor_faults_kernels as kernels

        x = torch.randn(1 << 20, generator=gen).to("cuda")
        return kernels.affine_then_scale, kernels.affine_then_scale_reference, (x,)
    if model == "reduction":

        def row_sum(x: Any) -> Any:
            return (x * 2.0).sum(dim=-1)

        return row_sum, row_sum, (torch.randn(4096, 8192, generator=gen).to("cuda"),)
    raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")


def check(ref: Any, got: Any) -> dict[str, Any]:
    """``got`` against the eager ``ref``: max |diff| <= atol + rtol * max |ref|."""
    import torch

    got = got.detach().cpu()
    if got.shape != ref.shape:
        return {"right": False, "detail": f"shape {tuple(got.shape)} != {tuple(ref.shape)}"}
    rtol, atol = TOLERANCES["16bit" if ref.element_size() == 2 else "other"]
    a, b = ref.float(), got.float()
    finite = bool(torch.isfinite(b).all())
    diff = float((a - b).abs().max())
    scale = float(a.abs().max())
    return {"right": finite and diff <= atol + rtol * scale, "max_abs_diff": diff, "max_abs_ref": scale}


def run(args: argparse.Namespace, result: dict[str, Any], checkpoint: Callable[[str], None]) -> None:
    checkpoint("import")
    import torch

    result["device"] = torch.cuda.get_device_name()
    checkpoint("eager reference")
    fn, eager, inputs = build(args.model)
    with torch.no_grad():
        ref = eager(*inputs).detach().cpu()
    torch.cuda.synchronize()
    if args.arm == "stock_subproc":
        from torch._inductor import config

        config.autotune_in_subproc = True
    if args.arm in ("kiln", "kiln_sandbox"):
        checkpoint("kiln install")
        result["kiln"] = inductor_child.install_kiln(sandbox=args.arm == "kiln_sandbox")
    checkpoint("compile and first call")
    started = time.perf_counter()
    compiled = torch.compile(fn, mode=None if args.mode == "default" else args.mode)
    with torch.no_grad():
        out = compiled(*inputs)
    torch.cuda.synchronize()
    result["first_s"] = time.perf_counter() - started
    result["compiled"] = True
    checkpoint("check output")
    result["output"] = check(ref, out)
    checkpoint("second call")
    with torch.no_grad():
        again = compiled(*inputs)
    torch.cuda.synchronize()
    result["second_call"] = check(ref, again)
    split = inductor_models.inductor_split(result["first_s"])
    result["counters"] = split.get("counters", {})
    if args.arm == "kiln_sandbox":
        result["sandbox"] = sandbox_report()


def sandbox_report() -> dict[str, Any] | None:
    """What kiln's sandbox did: template choices and runtime-autotune configs timed there, those
    skipped and why, kernels timed here instead, restarts."""
    from triton_kiln.inductor.hooks import current_benchmarks, current_runtime_autotune

    benchmarks, runtime = current_benchmarks(), current_runtime_autotune()
    if benchmarks is None or runtime is None:
        return None
    stats = benchmarks.stats
    return {
        "sandboxed": stats.sandboxed,
        "in_parent": stats.in_parent,
        "skipped": [{"choice": s.choice, "reason": str(s.failure)} for s in stats.skipped],
        "runtime_autotune": {
            "kernels": runtime.stats.kernels,
            "configs": runtime.stats.configs,
            "in_parent": [{"kernel": k, "why": why} for k, why in runtime.stats.in_parent],
            "skipped": [
                {"kernel": s.kernel, "config": s.config, "reason": str(s.failure)}
                for s in runtime.stats.skipped
            ],
        },
        "restarts": benchmarks.sandbox.restarts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", required=True, choices=ARMS)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--mode", required=True, choices=inductor_child.MODES)
    parser.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"arm": args.arm, "model": args.model, "mode": args.mode, "pid": os.getpid()}
    result["compiled"] = False
    path = args.dir / "result.json"

    def checkpoint(stage: str) -> None:
        result["stage"] = stage
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=repr))
        os.replace(tmp, path)

    code = 0
    try:
        run(args, result, checkpoint)
        result["stage"] = "done"
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        result["traceback_tail"] = traceback.format_exc()[-3000:]
        code = 3 if isinstance(exc, inductor_child.KilnInductorMissing) else 1
    checkpoint(result["stage"])
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())

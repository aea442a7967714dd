"""FlagGems' own ``LibTuner.run`` on kiln, on this machine (no GPU): one JSON line.

::

    PYTHONPATH=src python tests/support/flaggems_libtuner_drive.py [--configs 3] [--m 64]
    PYTHONPATH=src python tests/support/flaggems_libtuner_drive.py --gpu      (on an H100/H200)

Run as its own process (FlagGems reads its environment at import, and ``kiln.install()`` must
come first). ``mm_kernel_general`` (FlagGems' Hopper ``mm`` for an N = 50257 LM head: the
``triton.set_allocator`` + device-descriptor kernel) is called through ``LibTuner.run``, FlagGems'
search policy and SQL cache included, on CPU tensors. Only the GPU is stood in for: the
benchmark (each config's time from its block sizes, each call recorded with the pool's
counters) and the final launch (``self.fn.run``, recorded). The compiles are real, for sm_90,
in a kiln ``CompilePool``. ``--configs`` keeps the first configs of FlagGems' list (compile time).

``--gpu``: nothing stood in for. ``flag_gems.mm`` on GPT-2's LM head, ``[4096, 768] @ [768,
50257]`` bf16 (``set_allocator`` + device-side descriptors), with kiln installed and FlagGems'
config cache in memory (so the search runs): its output against ``torch.mm``, each config's
status in kiln's search, the pool's counters.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


class StandInGPU:
    """The benchmark: records (label, configs submitted, configs compiled) per timed config."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.timed: list[tuple[str, int, int]] = []
        self.owns_timing = True

    def factory(self, tuner: Any, args: Any, kwargs: Any) -> StandInGPU:
        return self

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> Any:
        from triton_kiln.sandbox import BenchOutcome

        assert artifact.binary[:4] == b"\x7fELF"
        self.timed.append((candidate.label, self.pool.stats.submitted, self.pool.stats.compiled))
        kw = candidate.config.kwargs
        ms = 1000.0 / (kw["BLOCK_M"] * kw["BLOCK_N"])  # bigger tiles "faster": deterministic
        return BenchOutcome("ok", timings=[ms, ms, ms])

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


class LaunchRecorder:
    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []

    def run(self, *args: Any, **kwargs: Any) -> None:
        self.launches.append({k: v for k, v in kwargs.items() if k != "grid"})


def on_gpu() -> dict[str, Any]:
    """``flag_gems.mm`` on the LM head with kiln installed, on the GPU (see the docstring)."""
    import time

    import triton_kiln as kiln

    kiln.install()
    import flag_gems
    import torch

    from triton_kiln.pool import get_pool

    tuner = sys.modules["hopper.ops.mm"].mm_kernel_general.fn
    torch.manual_seed(0)
    m, k, n = 4096, 768, 50257
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.05
    started = time.perf_counter()
    c = flag_gems.mm(a, b)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    expected = torch.mm(a.float(), b.float())
    again = flag_gems.mm(a, b)  # the launch FlagGems' LibEntry caches
    torch.cuda.synchronize()
    # the JIT's in-memory kernels of mm_kernel_general: loaded from the binary kiln put in
    # Triton's cache (its files: the cubin only), or compiled by the JIT (its IRs too)
    jit = tuner._shape.jit_fn
    try:
        kernels = list(jit.device_caches[torch.cuda.current_device()][0].values())
        jit_loaded = [sorted(k.asm) for k in kernels]
    except (AttributeError, IndexError, KeyError, TypeError) as exc:
        jit_loaded = [f"unreadable: {exc}"]
    return {
        "jit_kernels_asm": jit_loaded,
        "device": torch.cuda.get_device_name(),
        "kiln_class": isinstance(tuner, kiln.Autotuner),
        "first_call_s": round(first_s, 2),
        "max_abs_diff_vs_fp32": float((c.float() - expected).abs().max()),
        "max_abs_expected": float(expected.abs().max()),
        "close_to_torch": bool(torch.allclose(c.float(), expected, rtol=2e-2, atol=2e-2)),
        "second_call_equal": bool(torch.equal(c, again)),
        "searched": {
            label: [r.status, r.runtime_ms, r.reason]
            for results in tuner.searched.values()
            for label, r in results.items()
        },
        "best_config": tuner.best_config.kwargs,
        "pool_submitted": get_pool().stats.submitted,
        "pool_compiled": get_pool().stats.compiled,
        "pool_disk_hits": get_pool().stats.disk_hits,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", type=int, default=3)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--gpu", action="store_true")
    opts = parser.parse_args(argv)
    import realworld_ops

    spec = realworld_ops.OPS["flaggems_mm_lmhead"]
    os.environ.update(spec.env)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if opts.gpu:
        os.environ["FLAGGEMS_DB_URL"] = "sqlite://"  # FlagGems' config cache in memory: it searches
        print(json.dumps(on_gpu()))
        return 0
    os.environ.update(spec.dry_run_env)

    import triton_kiln as kiln

    kiln.install()
    import flag_gems  # noqa: F401  (FlagGems' Hopper ops, as `hopper.ops.mm`)
    import torch
    import triton

    from triton_kiln import CompilePool, GPUTarget
    from triton_kiln.autotuner.library_search import role

    tuner = sys.modules["hopper.ops.mm"].mm_kernel_general.fn  # LibEntry -> LibTuner
    out: dict[str, Any] = {
        "class": f"{type(tuner).__module__}.{type(tuner).__qualname__}",
        "kiln_class": isinstance(tuner, kiln.Autotuner),
        "role": role(type(tuner), kiln.Autotuner).driver,
        "configs_declared": len(tuner.configs),
    }
    tuner.configs = tuner.configs[: opts.configs]
    with (
        tempfile.TemporaryDirectory(prefix="kiln-libtuner-") as tmp,
        CompilePool(workers=2, cache_dir=Path(tmp)) as pool,
    ):
        gpu = StandInGPU(pool)
        tuner._pool, tuner._target = pool, GPUTarget("cuda", 90, 32)
        tuner._bencher_factory = gpu.factory
        launch = LaunchRecorder()
        tuner.fn = launch  # after FlagGems' search: its launch (Triton's JIT needs a GPU)
        m, k, n = opts.m, 768, 50257
        a = torch.empty(m, k, dtype=torch.bfloat16)
        b = torch.empty(k, n, dtype=torch.bfloat16)
        c = torch.empty(m, n, dtype=torch.bfloat16)
        args = (
            a,
            b,
            c,
            m,
            n,
            k,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
        )

        def grid(meta: dict[str, Any]) -> tuple[int, ...]:
            return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

        tuner.run(*args, grid=grid, warmup=False, GROUP_M=8)
        out["timed"] = gpu.timed
        out["pool_submitted"] = pool.stats.submitted
        out["pool_compiled"] = pool.stats.compiled
        out["searched"] = {
            label: r.status for results in tuner.searched.values() for label, r in results.items()
        }
        out["configs_timings"] = {str(c): t for c, t in tuner.configs_timings.items()}
        out["best_config"] = tuner.best_config.kwargs
        out["launched"] = launch.launches
        out["search_ended"] = tuner._search is None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

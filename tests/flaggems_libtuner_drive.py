"""FlagGems' own ``LibTuner.run`` on kiln, on this machine (no GPU): one JSON line.

::

    PYTHONPATH=src python tests/flaggems_libtuner_drive.py [--configs 3] [--m 64]

Run as its own process (FlagGems reads its environment at import, and ``kiln.install()`` must
come first). ``mm_kernel_general`` (FlagGems' Hopper ``mm`` for an N = 50257 LM head: the
``triton.set_allocator`` + device-descriptor kernel) is called through ``LibTuner.run``, FlagGems'
search policy and SQL cache included, on CPU tensors. Only the GPU is stood in for: the
benchmark (each config's time from its block sizes, each call recorded with the pool's
counters) and the final launch (``self.fn.run``, recorded). The compiles are real, for sm_90,
in a kiln ``CompilePool``. ``--configs`` keeps the first configs of FlagGems' list (compile time).
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

ROOT = Path(__file__).resolve().parents[1]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", type=int, default=3)
    parser.add_argument("--m", type=int, default=64)
    opts = parser.parse_args(argv)
    import realworld_ops

    spec = realworld_ops.OPS["flaggems_mm_lmhead"]
    os.environ.update(spec.env)
    os.environ.update(spec.dry_run_env)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

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

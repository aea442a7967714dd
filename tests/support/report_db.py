"""A tuning database with failures, flags and several runs, for the HTML report's tests.

Three runs come from the real autotuner (``kiln.autotune``: real compiles in a real pool,
specialization, the output rule, the time split, the database writes); only the GPU is a stand-in
(:class:`StandInGPU`: timings and outputs chosen here). Two more are written through the
database's API as the autotuner writes them: one with hostile strings (``<script>`` in the
kernel's name, its key, a label and an error message), and one left unfinished.

========  ============================================================================
run       what it holds
========  ============================================================================
scale A   a real compile error (BLOCK=48: not a power of 2); a bench crash; the fastest
          config wrote NaN and is flagged ("too few to reject"), so passed over
scale B   a config whose output differs from the 3 that agree: rejected (wrong_output);
          the native sandbox's own timings in the split; a final round of the two closest
          (BLOCK=128 screened fastest, BLOCK=256 wins it)
scale C   two configs that disagree: both flagged, the chosen one unconfirmed
hostile   ``<script>`` everywhere a string from the database reaches the page
unfinished  begun, one result, never finished
========  ============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

import triton_kiln as kiln
from support.basics import SM90
from triton_kiln.sandbox import BenchOutcome
from triton_kiln.sandbox.native_client import NativeBenchOutcome
from triton_kiln.tuning import ConfigResult, TuningDatabase

N = 4096
HOSTILE_KERNEL = '<script>document.title="pwned-kernel"</script>evil_kernel'
HOSTILE_KEY = '{"M": "</td><script>alert(1)</script>"}'
HOSTILE_LABEL = "BLOCK=<b>64</b>, num_warps=4"
HOSTILE_REASON = '<script>document.title="pwned-reason"</script><img src=x onerror=alert(2)> ptxas died'


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


@dataclass
class StandInGPU:
    """What the GPU would have measured, by BLOCK: runtime (ms), outputs, a crash, sandbox timings."""

    runtime: dict[int, float]
    outputs: dict[int, torch.Tensor] = field(default_factory=dict)
    crashes: dict[int, str] = field(default_factory=dict)
    native: bool = False
    final: dict[int, float] | None = None  # given: kiln owns the timing (screening, final round)


class _Bencher:
    def __init__(self, gpu: StandInGPU) -> None:
        self.gpu = gpu
        self.owns_timing = gpu.final is not None  # else one pass, as with a user do_bench

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        assert artifact.binary[:4] == b"\x7fELF"  # a real binary reached the benchmark
        block = candidate.config.kwargs["BLOCK"]
        if block in self.gpu.crashes:
            return BenchOutcome("bench_crashed", reason=self.gpu.crashes[block])
        ms = self.gpu.runtime[block]
        if phase is not None and not phase.check and self.gpu.final is not None:  # the final round
            ms = self.gpu.final[block]
        good = torch.arange(N, dtype=torch.float32) * 3.0
        out = {"out_ptr": self.gpu.outputs.get(block, good)}
        outcome = BenchOutcome("ok", timings=[ms, ms * 0.95, ms * 1.05], outputs=out)
        if not self.gpu.native:
            return outcome
        fields = {name: getattr(outcome, name) for name in BenchOutcome.__dataclass_fields__}
        inside = {"wait_s": 0.0, "load_s": 0.004, "check_s": 0.003, "bench_s": 0.002}
        return NativeBenchOutcome(**fields, sandbox={"via": "native", **inside})

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


def _tune(pool: Any, database: TuningDatabase, blocks: tuple[int, ...], gpu: StandInGPU, n: int) -> Any:
    tuner = kiln.autotune(
        [kiln.Config({"BLOCK": b}, num_warps=4) for b in blocks],
        key=["n"],
        pool=pool,
        database=database,
        target=SM90,
    )(scale_kernel)
    tuner._bencher_factory = lambda t, args, kw: _Bencher(gpu)
    x = torch.arange(N, dtype=torch.float32)
    # zeros, not empty_like: a recycled buffer can already hold NaN at index 7 (the stand-in NaN
    # output of run A), and NaN written where NaN was is not a new NaN: the rule (rightly) would not
    # count it, run A would have no clear majority and the NaN config would win (a CI flake)
    out = torch.zeros_like(x)
    tuner.run(x, out, n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=True)
    return tuner


def _nan() -> torch.Tensor:
    out = torch.arange(N, dtype=torch.float32) * 3.0
    out[7] = float("nan")
    return out


def build(pool: Any, path: Path) -> dict[str, Any]:
    """Write the runs above into the database at ``path``; returns what the tests check for."""
    with TuningDatabase(path) as database:
        a = _tune(pool, database, (48, 64, 128, 256, 512), StandInGPU(
            runtime={64: 0.5, 128: 1.0, 256: 0.8, 512: 0.1}, outputs={64: _nan()},
            crashes={512: "the benchmark process was killed by SIGSEGV; CUDA said: illegal address"},
        ), n=N)  # fmt: skip
        wrong = torch.arange(N, dtype=torch.float32) * 2.0
        b = _tune(pool, database, (32, 64, 128, 256), StandInGPU(
            runtime={32: 0.2, 64: 0.9, 128: 0.7, 256: 0.75}, outputs={32: wrong}, native=True,
            final={128: 0.8, 256: 0.72},
        ), n=2 * N)  # fmt: skip
        c = _tune(pool, database, (64, 128), StandInGPU(
            runtime={64: 0.6, 128: 0.4}, outputs={128: wrong},
        ), n=4 * N)  # fmt: skip
        hostile_id = _hostile(database)
        unfinished_id = database.begin_run(
            "never_finished_kernel", "e" * 64, '{"n": 1}', "NVIDIA H100 80GB HBM3", "9.0", "3.6.0", "BLOCK=64"
        )
        database.record(
            unfinished_id, ConfigResult("BLOCK=64", {"kwargs": {"BLOCK": 64}}, "ok", runtime_ms=1.0)
        )
        runs = database.runs(limit=-1)
    return {"tuners": (a, b, c), "hostile_id": hostile_id, "unfinished_id": unfinished_id, "runs": runs}


def _hostile(database: TuningDatabase) -> int:
    run_id = database.begin_run(
        HOSTILE_KERNEL, "d" * 64, HOSTILE_KEY, "<i>GPU</i>", "9.0", "3.6.0", HOSTILE_LABEL
    )
    config = {
        "kwargs": {"BLOCK": "<b>64</b>"},
        "num_warps": 4,
        "num_stages": 3,
        "num_ctas": 1,
        "maxnreg": None,
    }
    database.record(run_id, ConfigResult(HOSTILE_LABEL, config, "ok", compile_s=0.5, runtime_ms=1.0,
                                         runtime_ms_p20=0.9, runtime_ms_p80=1.1))  # fmt: skip
    database.record(run_id, ConfigResult("BLOCK=128, num_warps=4", dict(config), "compile_error",
                                         reason=HOSTILE_REASON, compile_s=0.2))  # fmt: skip
    database.record(run_id, ConfigResult("BLOCK=32, num_warps=4", dict(config), "ok", compile_s=0.3,
                                         runtime_ms=0.5, reason="flagged: " + HOSTILE_REASON))  # fmt: skip
    database.finish_run(run_id, HOSTILE_LABEL, 2.0, 0.5, split={"sandbox_wait_s": 0.1, "compile_s": 1.0,
                        "bench_s": 1.2, "final_s": 0.3, "other_s": 0.4})  # fmt: skip
    return run_id

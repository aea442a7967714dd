"""Child processes for the node tests (tests/test_node.py): real pools on one shared cache.

``python tests/support/node_harness.py compile-set CACHE GO_FILE [EVERY]``: a pool compiles the 72-config
matmul of bench/autotune.py (every EVERY-th config) once GO_FILE exists; prints one JSON line of
its counters.

``python tests/support/node_harness.py hold CACHE``: a pool submits faults.slow_kernel (its compile
sleeps KILN_TEST_SLOW_S) and prints its pool id and ``dispatched`` once a worker runs it; the
test kills it there.

``python tests/support/node_harness.py tune CACHE GO_FILE SEED BENCH_S [GPU_NAME GPU_UUID]``: a
kiln.autotune'd kernel (real compiles, a stand-in for the GPU whose timings depend on SEED: each
process would pick another config alone; each benchmark sleeps BENCH_S; ``raise``: its bencher
fails) tuned once GO_FILE exists; prints its choice and the configs it benchmarked. GPU_NAME
and GPU_UUID fake the GPU's identity (the autotuner's ``_device``: its kind, and which GPU it
is), so that processes on "different GPUs" of one machine share the tuning
(tests/test_node_share.py).

``python tests/support/node_harness.py tune-modes CACHE GO_FILE SEED OWNS_TIMING GATE_FILE GPU_NAME
GPU_UUID``: the output rule's ``add_modes_kernel`` configs (real compiles; one writes zeros and is the
fastest, one adds 1) on inputs drawn from SEED; the stand-in GPU returns what each config's
kernel writes into ``out`` (its outputs are checked as on a GPU) and the case's timings; with
GATE_FILE (not ``-``) the stand-in GPU is busy until that file exists.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import triton
import triton.language as tl

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS.parent / "bench")]


@triton.jit
def node_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


class SeededBench:
    """Stands in for the GPU: config timings drawn from a seed (each process has its own)."""

    owns_timing = False

    def __init__(self, seed: int, bench_s: float, flag: Path) -> None:
        import random

        self.rng = random.Random(seed)
        self.bench_s = bench_s
        self.flag = flag
        self.calls = 0
        self.labels: list[str] = []  # the configs it screened (first pass), in order

    def bench(self, candidate: object, artifact: object, grid: object, phase: object = None) -> object:
        from triton_kiln.sandbox import BenchOutcome

        self.calls += 1
        self.labels.append(str(getattr(candidate, "label", "?")))
        self.flag.touch()  # this process is benchmarking (the tests may kill it now)
        time.sleep(self.bench_s)
        ms = self.rng.uniform(1.0, 2.0)
        return BenchOutcome("ok", timings=[ms, ms, ms])

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


def slow_request() -> object:
    from support import faults
    from triton_kiln import CompileRequest
    from triton_kiln.triton_compat import GPUTarget

    return CompileRequest(
        faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=GPUTarget("cuda", 90, 32)
    )


def compile_set(cache: str, go_file: str, every: str = "1") -> None:
    import ranks_set
    from triton_kiln import CompilePool

    requests = ranks_set.matmul_requests()[:: int(every)]
    with CompilePool(cache_dir=cache, workers=2, preload=["kernels_bench"]) as pool:
        pool.wait_ready(120)
        print("READY", flush=True)
        while not Path(go_file).exists():
            time.sleep(0.01)
        started = time.monotonic()
        results = pool.compile_many(requests, progress=False)
        seconds = time.monotonic() - started
        failed = [repr(r) for r in results if isinstance(r, BaseException)]
        keys = sorted({r.key for r in results if not isinstance(r, BaseException)})
        stats = {k: v for k, v in asdict(pool.stats).items() if isinstance(v, int)}
    print(
        "RESULT " + json.dumps({"stats": stats, "failed": failed, "keys": keys, "seconds": seconds}),
        flush=True,
    )


def hold(cache: str) -> None:
    from triton_kiln import CompilePool

    pool = CompilePool(cache_dir=cache, workers=1, preload=["support.faults"])
    future = pool.submit(slow_request())  # type: ignore[arg-type]
    print("POOL", pool.pool_id, flush=True)
    while pool.stats.dispatched < 1:
        time.sleep(0.01)
    print("DISPATCHED", flush=True)
    future.result()
    print("DONE", flush=True)


class CountingBench:
    """The real bencher (kiln's sandbox on the GPU), counting the configs it screens."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.owns_timing = real.owns_timing  # type: ignore[attr-defined]
        self.calls = 0
        self.labels: list[str] = []

    def bench(self, candidate: object, artifact: object, grid: object, phase: object) -> object:
        if getattr(phase, "check", False):  # the screening (the final round does not check)
            self.calls += 1
            self.labels.append(str(getattr(candidate, "label", "?")))
        return self.real.bench(candidate, artifact, grid, phase)  # type: ignore[attr-defined]

    def user_reference(self) -> object:
        return self.real.user_reference()  # type: ignore[attr-defined]

    def finish(self) -> None:
        self.real.finish()  # type: ignore[attr-defined]


def tune(cache: str, go_file: str, seed: str, bench_s: str, gpu_name: str = "", gpu_uuid: str = "") -> None:
    import torch

    import triton_kiln as kiln
    from triton_kiln import CompilePool
    from triton_kiln.triton_compat import GPUTarget
    from triton_kiln.tuning import TuningDatabase

    on_gpu = bench_s == "gpu"  # a real GPU: kiln's own sandbox times the configs, then a launch
    pool = CompilePool(cache_dir=cache, workers=1)
    database = TuningDatabase(Path(cache) / "tuning.sqlite3")
    configs = [kiln.Config({"BLOCK": b}, num_warps=w) for b in (64, 128, 256, 512) for w in (2, 4)]
    target = None if on_gpu else GPUTarget("cuda", 90, 32)
    tuner = kiln.autotune(configs, key=["n"], pool=pool, database=database, target=target)(node_scale_kernel)
    failing = bench_s == "raise"  # its bencher cannot be made (a helper's failure, node_share)
    bench: SeededBench | CountingBench = SeededBench(
        int(seed), 0.0 if on_gpu or failing else float(bench_s), Path(cache) / f"benching-{seed}"
    )
    if failing:

        def cannot(*_: object) -> object:
            raise RuntimeError("the stand-in GPU cannot benchmark")

        tuner._bencher_factory = cannot
    elif not on_gpu:
        tuner._bencher_factory = lambda *_: bench
    else:

        def counting(tuner_: object, args: object, kwargs: object) -> object:
            nonlocal bench
            from triton_kiln.autotuner.bench import make_bencher

            tuner._bencher_factory = None
            try:
                bench = CountingBench(make_bencher(tuner._plan, tuner._services, args, kwargs))
            finally:
                tuner._bencher_factory = counting
            return bench

        tuner._bencher_factory = counting
    if gpu_name:
        try:  # a kiln without node sharing across GPUs has no LocalDevice: the fake is not set
            from triton_kiln.autotuner.plan import LocalDevice
        except ImportError:
            pass
        else:
            tuner._device = LocalDevice(gpu_name, "9.0", gpu_uuid)
    print("POOL", pool.pool_id, flush=True)
    while not Path(go_file).exists():
        time.sleep(0.01)
    n = 1 << 20
    x = torch.randn(n, device="cuda" if on_gpu else "cpu")
    out = torch.empty_like(x)
    started = time.monotonic()
    tuner.run(x, out, n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=not on_gpu)
    if on_gpu:
        torch.cuda.synchronize()
        assert torch.equal(out, x * 3.0), "the adopted config's launch computed something else"
    seconds = time.monotonic() - started
    pool.shutdown()
    row = {
        "best": str(tuner.best_config),
        "best_label": tuner.last_run.best_label if tuner.last_run is not None else None,
        "loaded_from": tuner.loaded_from,
        "benched": bench.calls,
        "benched_labels": bench.labels,
        "contenders": [r.label for r in tuner.last_run.results if r.screen_ms is not None]
        if tuner.last_run is not None
        else [],
        "device": tuner.last_run.device_name if tuner.last_run is not None else None,
        "compiled": pool.stats.compiled,
        "seconds": seconds,
    }
    print("RESULT " + json.dumps(row), flush=True)


class ModesBench:
    """Stands in for the GPU running ``add_modes_kernel``: each config's output (what its MODE
    writes into ``out`` from this process's ``x`` and ``y``) and the case's timings."""

    def __init__(self, x: object, y: object, owns_timing: bool) -> None:
        self.x, self.y = x, y
        self.owns_timing = owns_timing
        self.calls = 0
        self.labels: list[str] = []  # every config it ran with its outputs checked

    def bench(self, candidate: object, artifact: object, grid: object, phase: object = None) -> object:
        from support.kernels import OFF_BY_ONE, WRONG_WRITER_CONFIGS, ZERO_WRITER
        from triton_kiln.sandbox import BenchOutcome

        config = candidate.config  # type: ignore[attr-defined]
        mode = config.kwargs["MODE"]
        shape = (config.kwargs["BLOCK"], mode, config.num_warps)
        ms = {ZERO_WRITER: 0.5, OFF_BY_ONE: 0.8}.get(mode, 1.0 + WRONG_WRITER_CONFIGS.index(shape) / 100)
        if not getattr(phase, "check", True):  # the final round: timings only
            return BenchOutcome("ok", timings=[ms, ms, ms])
        self.calls += 1
        self.labels.append(str(candidate.label))  # type: ignore[attr-defined]
        out = self.x * 0.0 if mode == ZERO_WRITER else self.x + self.y + (1.0 if mode == OFF_BY_ONE else 0.0)
        return BenchOutcome("ok", timings=[ms, ms, ms], outputs={"out_ptr": out})

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


def tune_modes(
    cache: str, go_file: str, seed: str, owns_timing: str, gate: str, gpu_name: str, gpu_uuid: str
) -> None:
    import torch

    import triton_kiln as kiln
    from support.kernels import WRONG_WRITER_CONFIGS, add_modes_kernel
    from triton_kiln import CompilePool
    from triton_kiln.autotuner.plan import LocalDevice
    from triton_kiln.triton_compat import GPUTarget
    from triton_kiln.tuning import TuningDatabase

    pool = CompilePool(cache_dir=cache, workers=1)
    database = TuningDatabase(Path(cache) / "tuning.sqlite3")
    configs = [kiln.Config({"BLOCK": b, "MODE": m}, num_warps=w) for b, m, w in WRONG_WRITER_CONFIGS]
    target = GPUTarget("cuda", 90, 32)
    tuner = kiln.autotune(configs, key=["n"], pool=pool, database=database, target=target)(add_modes_kernel)
    n = 4096
    generator = torch.Generator().manual_seed(int(seed))
    x, y = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
    bench = ModesBench(x, y, owns_timing == "1")

    def factory(*_: object) -> ModesBench:
        while gate != "-" and not Path(gate).exists():  # the stand-in GPU is busy until then
            time.sleep(0.01)
        return bench

    tuner._bencher_factory = factory
    tuner._device = LocalDevice(gpu_name, "9.0", gpu_uuid)
    print("POOL", pool.pool_id, flush=True)
    while not Path(go_file).exists():
        time.sleep(0.01)
    out = torch.full((n,), -7.0)
    tuner.run(x, y, out, n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=True)
    pool.shutdown()
    run = tuner.last_run
    row = {
        "best": str(tuner.best_config),
        "loaded_from": tuner.loaded_from,
        "benched_labels": bench.labels,
        "results": {r.label: [r.status, r.reason] for r in run.results} if run is not None else {},
    }
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {"compile-set": compile_set, "hold": hold, "tune": tune, "tune-modes": tune_modes}[command](*rest)

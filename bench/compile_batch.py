"""Compile a batch of Triton kernel configs six ways and compare the wall time with its limit.

Run from the repository root (kiln installed, editable or not)::

    python bench/compile_batch.py --set all --repeats 3 --json /tmp/compile_batch.json
    python bench/compile_batch.py --reduced --repeats 1          # CI-sized (2 cores)

Kernel sets (``bench/kernels_bench.py``, a module that imports ``torch`` at the top):

* ``matmul``: 72 configs of a masked, tiled fp16 ``tl.dot`` matmul with an fp32 accumulator:
  BLOCK_M, BLOCK_N in {64, 128, 256} x BLOCK_K in {32, 64} x num_warps {4, 8} x num_stages {3, 4};
* ``softmax``: 32 configs of a row softmax: BLOCK_SIZE in {128, ..., 16384} x num_warps {4, 8}
  x num_stages {2, 3}.

``--reduced`` keeps a spread-out subset (12 matmul, 8 softmax configs) that still uses every
value of every parameter. The target is the
local GPU's, or ``GPUTarget("cuda", 90, 32)`` when there is none (Triton compiles for sm_90
without a GPU).

Arms, run side by side in one process and interleaved within each repeat; every arm of every
repeat starts from a fresh, empty ``TRITON_CACHE_DIR`` and (for kiln) a fresh kiln cache
directory, and must produce a cubin (``\\x7fELF``) for every config:

* ``seq``: ``triton.compile(ASTSource(...))`` in a loop in this process, each compile timed.
  A warm-up compile of an unrelated kernel runs once before any arm, so this arm (and the
  ``fork`` arm, whose workers inherit this process) does not pay Triton's one-off start-up.
* ``fork`` / ``spawn``: a ``ProcessPoolExecutor`` with that start method and ``cores``
  workers; each task compiles one config and returns its own compile seconds.
* ``fork-cold``: the ``fork`` arm forked from a parent that has imported Triton but not
  compiled yet: Triton's in-process key (``triton.runtime.cache.triton_key``, a hash of
  ``libtriton.so``) is cleared before the pool starts, so each worker computes it on its first
  compile, as a fork pool started by a fresh program would. The key is restored, untimed,
  afterwards. ``fork`` is the pool forked from a warm parent (the issue's baseline);
  ``fork-cold`` shows how much of that baseline is the parent's warmth.
* ``kiln-cold``: ``CompilePool`` created inside the timed region, every request submitted,
  every future waited for.
* ``kiln-warm``: the pool is created and ``wait_ready()`` returns before timing starts.

Both kiln pools are used as a user would: no ``preload``. kiln sends these kernels to its
workers as source (every global they read is rebuildable), so no worker imports the kernel
module or torch; the ``crash`` pool preloads ``tests/support/faults.py`` only to install its
fault hook.

The limit. With ``cores`` workers no schedule can beat ``max(sum / cores, longest)``, where
``sum`` is the summed per-job compile seconds and ``longest`` the longest job. Each arm reports
that limit from its own job seconds (``limit_own_s``; for kiln, ``CompiledArtifact.compile_s``)
and from the ``seq`` arm's job seconds of the same repeat (``limit_ref_s``): the ratios that
compare arms are ``ratio_ref = wall / limit_ref`` (1.0 is a perfect schedule of the
sequential work). Own job times of parallel arms include per-process effects (cold imports in
spawned workers, cores shared with other compiles), so ``ratio_own`` says how well each arm
packs the work it actually did, not how fast it is. Medians over ``--repeats`` are reported.

``crash`` (a separate measurement, after all arms): a warm pool compiles a few good configs
plus one kernel whose compile calls ``abort()`` (``fault_abort`` from ``tests/support/faults.py``); it reports
``PoolStats.replacement_s`` (seconds from the worker's death being reported to its
replacement being ready) and checks that no other job failed.

The full JSON goes to stdout (and ``--json PATH``); a short table goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import multiprocessing
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import triton
from triton.compiler import ASTSource

import kernels_bench
from triton_kiln import CompilePool, CompileRequest, GPUTarget, WorkerCrashedError
from triton_kiln.triton_compat import local_target

ARMS = ("seq", "fork", "fork-cold", "spawn", "kiln-cold", "kiln-warm", "crash")
SETS = ("matmul", "softmax")
CUBIN_MAGIC = b"\x7fELF"
KERNEL_MODULE = kernels_bench.__name__
# --reduced: (stride, count). Indices i * stride mod n, with a stride coprime with every inner
# dimension of the config product, so the subset still covers every value of every parameter.
REDUCED = {"matmul": (11, 12), "softmax": (9, 8)}
CRASH_GOOD_JOBS = 4
REPLACEMENT_WAIT_S = 60.0

# One config: (kernel set, constexprs as sorted items, num_warps, num_stages). Plain data, so
# it pickles to executor workers without the kernel object.
Config = tuple[str, tuple[tuple[str, int], ...], int, int]


def log(message: str) -> None:
    print(f"[compile_batch] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- configs


def matmul_configs() -> list[Config]:
    blocks = (64, 128, 256)
    product = itertools.product(blocks, blocks, (32, 64), (4, 8), (3, 4))
    return [
        ("matmul", (("BLOCK_K", bk), ("BLOCK_M", bm), ("BLOCK_N", bn)), warps, stages)
        for bm, bn, bk, warps, stages in product
    ]


def softmax_configs() -> list[Config]:
    sizes = tuple(128 << i for i in range(8))  # 128 .. 16384
    product = itertools.product(sizes, (4, 8), (2, 3))
    return [("softmax", (("BLOCK_SIZE", size),), warps, stages) for size, warps, stages in product]


def configs_for(kernel_set: str, reduced: bool) -> list[Config]:
    configs = matmul_configs() if kernel_set == "matmul" else softmax_configs()
    if not reduced:
        return configs
    stride, count = REDUCED[kernel_set]
    return [configs[i] for i in sorted({(k * stride) % len(configs) for k in range(count)})]


def label(config: Config) -> str:
    kernel_set, constexprs, warps, stages = config
    values = ",".join(f"{k}={v}" for k, v in constexprs)
    return f"{kernel_set}[{values},w{warps},s{stages}]"


def ast_source(config: Config) -> Any:
    kernel_set, constexprs, _, _ = config
    signature = dict(kernels_bench.SIGNATURES[kernel_set])
    signature.update({name: "constexpr" for name, _ in constexprs})
    return ASTSource(kernels_bench.KERNELS[kernel_set], signature, dict(constexprs))


def options(config: Config) -> dict[str, int]:
    return {"num_warps": config[2], "num_stages": config[3]}


def kiln_request(config: Config, target: GPUTarget) -> CompileRequest:
    kernel_set, constexprs, _, _ = config
    return CompileRequest(
        kernels_bench.KERNELS[kernel_set],
        kernels_bench.SIGNATURES[kernel_set],
        dict(constexprs),
        options=options(config),
        target=target,
    )


# ----------------------------------------------------------------------------- one compile


@dataclass
class Job:
    """One compiled config: its own compile seconds and what the binary looked like."""

    label: str
    seconds: float
    binary_head: bytes
    binary_bytes: int

    @property
    def is_cubin(self) -> bool:
        return self.binary_head == CUBIN_MAGIC and self.binary_bytes > 0


def compile_config(config: Config, target: GPUTarget) -> Job:
    """Compile one config in this process (the ``seq`` arm, and the executor arms' task)."""
    started = time.perf_counter()
    compiled = triton.compile(ast_source(config), target=target, options=options(config))
    seconds = time.perf_counter() - started
    binary = compiled.asm.get("cubin", b"")
    return Job(label(config), seconds, bytes(binary[:4]), len(binary))


# ----------------------------------------------------------------------------- arms


@dataclass
class ArmRun:
    """What one arm did in one repeat."""

    wall_s: float
    jobs: list[Job]
    extra: dict[str, Any] = field(default_factory=dict)


ArmFn = Callable[[list[Config], GPUTarget, int, Path], ArmRun]


def run_seq(configs: list[Config], target: GPUTarget, cores: int, kiln_dir: Path) -> ArmRun:
    started = time.perf_counter()
    jobs = [compile_config(c, target) for c in configs]
    return ArmRun(time.perf_counter() - started, jobs)


def _triton_key_function() -> Any:
    """Triton's in-process, ``lru_cache``-d key function (``None`` on a Triton without it)."""
    import triton.runtime.cache as cache_mod

    fn = getattr(cache_mod, "triton_key", None)
    return fn if hasattr(fn, "cache_clear") else None


def run_executor(method: str, cold_parent: bool = False) -> ArmFn:
    def run(configs: list[Config], target: GPUTarget, cores: int, kiln_dir: Path) -> ArmRun:
        key_fn = _triton_key_function()
        if key_fn is not None:
            if cold_parent:
                key_fn.cache_clear()
            else:
                key_fn()  # the warm parent the ``fork`` arm is defined with (untimed)
        try:
            return _run_executor(method, configs, target, cores)
        finally:
            if key_fn is not None:
                key_fn()  # restore the parent's key for the next arm (untimed)

    return run


def _run_executor(method: str, configs: list[Config], target: GPUTarget, cores: int) -> ArmRun:
    context = multiprocessing.get_context(method)
    started = time.perf_counter()
    executor = ProcessPoolExecutor(max_workers=cores, mp_context=context)
    try:
        futures = [executor.submit(compile_config, c, target) for c in configs]
        jobs = [f.result() for f in futures]
        wall = time.perf_counter() - started
    finally:
        executor.shutdown(wait=True, cancel_futures=True)  # not timed
    return ArmRun(wall, jobs)


def _kiln_batch(pool: CompilePool, configs: list[Config], target: GPUTarget) -> list[Job]:
    futures = [pool.submit(kiln_request(c, target)) for c in configs]
    wait(futures)
    jobs = []
    for config, future in zip(configs, futures, strict=True):
        artifact = future.result()
        head = artifact.binary[:4] if artifact.binary_ext == "cubin" else b""
        jobs.append(Job(label(config), artifact.compile_s, head, len(artifact.binary)))
    return jobs


def _pool_extra(pool: CompilePool) -> dict[str, Any]:
    """Pool counters and what its zygote reported (start-up seconds, preloaded modules)."""
    info = {k: v for k, v in pool.zygote_info.items() if k != "triton_key"}
    return {"pool_stats": asdict(pool.stats), "zygote_info": info}


def run_kiln_cold(configs: list[Config], target: GPUTarget, cores: int, kiln_dir: Path) -> ArmRun:
    started = time.perf_counter()
    pool = CompilePool(workers=cores, cache_dir=kiln_dir, warmup_target=target)
    try:
        jobs = _kiln_batch(pool, configs, target)
        wall = time.perf_counter() - started
        extra = _pool_extra(pool)
    finally:
        pool.shutdown(wait=True)  # not timed
    return ArmRun(wall, jobs, extra)


def run_kiln_warm(configs: list[Config], target: GPUTarget, cores: int, kiln_dir: Path) -> ArmRun:
    ready_started = time.perf_counter()
    pool = CompilePool(workers=cores, cache_dir=kiln_dir, warmup_target=target)
    try:
        pool.wait_ready()
        extra = {"ready_wait_s": time.perf_counter() - ready_started}
        started = time.perf_counter()
        jobs = _kiln_batch(pool, configs, target)
        wall = time.perf_counter() - started
        extra.update(_pool_extra(pool))
    finally:
        pool.shutdown(wait=True)  # not timed
    return ArmRun(wall, jobs, extra)


ARM_FUNCTIONS: dict[str, ArmFn] = {
    "seq": run_seq,
    "fork": run_executor("fork"),
    "fork-cold": run_executor("fork", cold_parent=True),
    "spawn": run_executor("spawn"),
    "kiln-cold": run_kiln_cold,
    "kiln-warm": run_kiln_warm,
}


# ----------------------------------------------------------------------------- fresh caches


@contextlib.contextmanager
def fresh_caches(prefix: str) -> Iterator[tuple[Path, Path]]:
    """A new, empty ``TRITON_CACHE_DIR`` (set in the environment) and kiln cache directory."""
    root = Path(tempfile.mkdtemp(prefix=f"kiln-bench-{prefix}-"))
    triton_dir, kiln_dir = root / "triton", root / "kiln"
    triton_dir.mkdir()
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(triton_dir)
    try:
        yield triton_dir, kiln_dir
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old
        shutil.rmtree(root, ignore_errors=True)


def count_cubins(directory: Path) -> int:
    return sum(1 for _ in directory.rglob("*.cubin"))


# ----------------------------------------------------------------------------- metrics


def limit(seconds: Sequence[float], cores: int) -> float:
    """The best wall time any schedule of these jobs on ``cores`` workers can reach."""
    return max(sum(seconds) / cores, *seconds)


def verify(arm: str, run: ArmRun, configs: list[Config], cubins_in_cache: int) -> list[str]:
    problems = []
    if [j.label for j in run.jobs] != [label(c) for c in configs]:
        problems.append("the jobs returned do not match the configs submitted")
    problems += [f"{j.label}: not a cubin (starts {j.binary_head!r})" for j in run.jobs if not j.is_cubin]
    if cubins_in_cache < len(configs):
        problems.append(f"only {cubins_in_cache} cubins in the fresh Triton cache for {len(configs)} configs")
    stats = run.extra.get("pool_stats")
    if stats is not None:
        hits = stats["memory_hits"] + stats["disk_hits"] + stats["deduplicated"]
        if stats["compiled"] != len(configs) or hits:
            problems.append(f"{arm}: pool compiled {stats['compiled']} of {len(configs)} ({hits} cache hits)")
    return problems


def arm_record(
    arm: str, repeat: int, run: ArmRun, cores: int, ref: list[float] | None, problems: list[str]
) -> dict[str, Any]:
    seconds = [j.seconds for j in run.jobs]
    own = limit(seconds, cores)
    limit_ref = limit(ref, cores) if ref else None
    return {
        "arm": arm,
        "repeat": repeat,
        "wall_s": run.wall_s,
        "job_sum_s": sum(seconds),
        "job_max_s": max(seconds),
        "limit_own_s": own,
        "ratio_own": run.wall_s / own,
        "ref_job_sum_s": sum(ref) if ref else None,
        "ref_job_max_s": max(ref) if ref else None,
        "limit_ref_s": limit_ref,
        "ratio_ref": run.wall_s / limit_ref if limit_ref else None,
        "verified": not problems,
        "problems": problems,
        "jobs": [{"label": j.label, "seconds": j.seconds, "cubin_bytes": j.binary_bytes} for j in run.jobs],
        **run.extra,
    }


SUMMARY_FIELDS = (
    "wall_s",
    "job_sum_s",
    "job_max_s",
    "limit_own_s",
    "ratio_own",
    "limit_ref_s",
    "ratio_ref",
)


def median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(records: list[dict[str, Any]], arms: list[str]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for arm in arms:
        mine = [r for r in records if r["arm"] == arm]
        if not mine:
            continue
        summary[arm] = {f"median_{k}": median_or_none([r[k] for r in mine]) for k in SUMMARY_FIELDS}
        summary[arm]["repeats"] = len(mine)
        summary[arm]["verified"] = all(r["verified"] for r in mine)
    return summary


# ----------------------------------------------------------------------------- driving


def run_arm(
    arm: str, configs: list[Config], target: GPUTarget, cores: int, tag: str
) -> tuple[ArmRun, list[str]]:
    with fresh_caches(tag) as (triton_dir, kiln_dir):
        run = ARM_FUNCTIONS[arm](configs, target, cores, kiln_dir)
        problems = verify(arm, run, configs, count_cubins(triton_dir))
    return run, problems


def bench_set(
    kernel_set: str,
    configs: list[Config],
    arms: list[str],
    repeats: int,
    target: GPUTarget,
    cores: int,
    checkpoint: Callable[[dict[str, Any]], None] = lambda partial: None,
) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    for repeat in range(repeats):
        if repeat:
            checkpoint(_set_result(configs, records, arms))
        ref: list[float] | None = None
        for arm in arms:
            log(f"{kernel_set}: repeat {repeat + 1}/{repeats}, arm {arm} ({len(configs)} configs)")
            run, problems = run_arm(arm, configs, target, cores, f"{kernel_set}-{arm}-{repeat}")
            if arm == "seq":
                ref = [j.seconds for j in run.jobs]
            record = arm_record(arm, repeat, run, cores, ref, problems)
            records.append(record)
            log(f"  wall {run.wall_s:.2f} s, job sum {record['job_sum_s']:.2f} s, ok={not problems}")
            for problem in problems:
                log(f"  PROBLEM: {problem}")
    return _set_result(configs, records, arms)


def _set_result(configs: list[Config], records: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    return {
        "n_configs": len(configs),
        "configs": [label(c) for c in configs],
        "repeats_done": len({r["repeat"] for r in records}),
        "runs": records,
        "summary": summarize(records, arms),
        "targets": targets(records),
    }


def targets(records: list[dict[str, Any]]) -> dict[str, float | None]:
    """The batch targets, each a median over repeats of a ratio taken within one repeat."""

    def ratio(num_arm: str, den_arm: str, den_field: str = "wall_s") -> float | None:
        values: list[float | None] = []
        for repeat in sorted({r["repeat"] for r in records}):
            here = {r["arm"]: r for r in records if r["repeat"] == repeat}
            if num_arm in here and den_arm in here and here[den_arm][den_field]:
                values.append(here[num_arm]["wall_s"] / here[den_arm][den_field])
        return median_or_none(values)

    return {
        # target <= 1.05
        "kiln_warm_wall_over_own_limit": median_or_none(
            [r["ratio_own"] for r in records if r["arm"] == "kiln-warm"]
        ),
        "kiln_cold_over_fork": ratio("kiln-cold", "fork"),  # target <= 1.0
        "kiln_cold_over_fork_cold": ratio("kiln-cold", "fork-cold"),
    }


# ----------------------------------------------------------------------------- crash


def crash_once(configs: list[Config], target: GPUTarget, cores: int, tag: str) -> dict[str, Any]:
    """A warm pool, a few good jobs plus one that aborts: replacement time and collateral."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support import faults  # the test suite's real fault injection (a stage hook that calls abort())

    good = configs[:CRASH_GOOD_JOBS]
    with fresh_caches(tag) as (_, kiln_dir):
        pool = CompilePool(
            workers=cores,
            cache_dir=kiln_dir,
            preload=["support.faults"],
            warmup_target=target,
        )
        try:
            pool.wait_ready()
            crash_request = CompileRequest(
                faults.fault_abort, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=target
            )
            crash_future = pool.submit(crash_request)
            good_futures = [pool.submit(kiln_request(c, target)) for c in good]
            wait([crash_future, *good_futures])
            replaced = _wait_for_replacement(pool)
            after = pool.submit(kiln_request(configs[-1], target)).result()
        finally:
            pool.shutdown(wait=True)
    return {
        "crash_error": _describe_crash(crash_future),
        "crashed_as_expected": isinstance(crash_future.exception(), WorkerCrashedError),
        "good_jobs": len(good),
        "good_jobs_failed": [label(c) for c, f in zip(good, good_futures, strict=True) if f.exception()],
        "replaced": replaced,
        "replacement_s": list(pool.stats.replacement_s),
        "worker_deaths": pool.stats.worker_deaths,
        "job_after_crash_is_cubin": after.binary[:4] == CUBIN_MAGIC,
        "pool_stats": asdict(pool.stats),
    }


def _wait_for_replacement(pool: CompilePool) -> bool:
    deadline = time.monotonic() + REPLACEMENT_WAIT_S
    while not pool.stats.replacement_s:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _describe_crash(future: Future[Any]) -> str | None:
    exc = future.exception()
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def bench_crash(configs: list[Config], repeats: int, target: GPUTarget, cores: int) -> dict[str, Any]:
    runs = []
    for repeat in range(repeats):
        log(f"crash: repeat {repeat + 1}/{repeats}")
        run = crash_once(configs, target, cores, f"crash-{repeat}")
        log(f"  replacement_s {run['replacement_s']}, other failures {run['good_jobs_failed']}")
        runs.append(run)
    seconds = [s for r in runs for s in r["replacement_s"]]
    checks = ("crashed_as_expected", "replaced", "job_after_crash_is_cubin")
    ok = all(all(r[c] for c in checks) and not r["good_jobs_failed"] for r in runs)
    return {"runs": runs, "median_replacement_s": median_or_none(list(seconds)), "verified": ok}


# ----------------------------------------------------------------------------- metadata


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception:  # torch missing or broken: fall through to the CPU description
        pass
    return f"cpu-only ({platform.processor() or platform.machine()}, {os.cpu_count()} cpus)"


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def metadata(args: argparse.Namespace, target: GPUTarget, cores: int) -> dict[str, Any]:
    import torch

    import triton_kiln as kiln

    return {
        "device": device_name(),
        "cpu_model": cpu_model(),
        "cores": cores,
        "os_cpu_count": os.cpu_count(),
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", *sys.argv]),
        "argv": sys.argv,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "triton_version": triton.__version__,
        "torch_version": torch.__version__,
        "kiln_version": kiln.__version__,
        "target": {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size},
        "repeats": args.repeats,
        "reduced": args.reduced,
        "timing": (
            "wall_s: executor/pool creation (kiln-warm: after wait_ready) through the last result; "
            "shutdown never timed. limit = max(job_sum / cores, job_max); ratio_ref uses the seq "
            "arm's job seconds of the same repeat."
        ),
    }


def warm_up_process(target: GPUTarget) -> float:
    """Compile a tiny kernel once so that ``seq`` and ``fork`` do not pay Triton's start-up."""
    from triton_kiln.pool.warmup import warmup_kernel

    started = time.perf_counter()
    with fresh_caches("warmup"):
        signature = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
        source = ASTSource(warmup_kernel, signature, {"BLOCK": 128})
        triton.compile(source, target=target, options={"num_warps": 1})
    return time.perf_counter() - started


# ----------------------------------------------------------------------------- output


def table(result: dict[str, Any]) -> str:
    header = (
        f"{'set':8} {'arm':10} {'wall s':>8} {'sum s':>8} {'long s':>7} {'lim_ref':>8} "
        f"{'wall/ref':>8} {'lim_own':>8} {'wall/own':>8} ok"
    )
    lines = [f"cores={result['meta']['cores']}  device={result['meta']['device']}  (medians)", header]
    for kernel_set, data in result["sets"].items():
        for arm, s in data["summary"].items():
            lines.append(
                f"{kernel_set:8} {arm:10} {_num(s['median_wall_s'])} {_num(s['median_job_sum_s'])} "
                f"{_num(s['median_job_max_s'], 7)} {_num(s['median_limit_ref_s'])} "
                f"{_num(s['median_ratio_ref'])} {_num(s['median_limit_own_s'])} "
                f"{_num(s['median_ratio_own'])} {'yes' if s['verified'] else 'NO'}"
            )
    for kernel_set, data in result["sets"].items():
        t = data.get("targets", {})
        lines.append(
            f"{kernel_set}: kiln-warm wall/own limit={_num(t.get('kiln_warm_wall_over_own_limit'), 0)} "
            f"(target <= 1.05)  kiln-cold/fork={_num(t.get('kiln_cold_over_fork'), 0)} (target <= 1.0)  "
            f"kiln-cold/fork-cold={_num(t.get('kiln_cold_over_fork_cold'), 0)}"
        )
    crash = result.get("crash")
    if crash:
        runs = crash["runs"]
        failed = sum(len(r["good_jobs_failed"]) for r in runs)
        lines.append(
            f"crash: median replacement_s={_num(crash['median_replacement_s'], 0)}  "
            f"other jobs failed={failed}  ok={'yes' if crash['verified'] else 'NO'}"
        )
    return "\n".join(lines)


def _num(value: float | None, width: int = 8) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.3f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=[*SETS, "all"], default="all", dest="kernel_set")
    parser.add_argument("--repeats", type=int, default=3, help="runs of every arm; medians are reported")
    parser.add_argument("--workers", type=int, default=None, help="workers per arm (default: os.cpu_count())")
    parser.add_argument("--reduced", action="store_true", help="12 matmul / 8 softmax configs (CI)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--json", type=Path, default=None, help="also write the full JSON here")
    args = parser.parse_args(argv)
    chosen = {a.strip() for a in args.arms.split(",") if a.strip()}
    unknown = sorted(chosen - set(ARMS))
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    args.arms = [a for a in ARMS if a in chosen]  # always in ARMS order: seq (the reference) first
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if "seq" not in args.arms:
        log("without the seq arm there is no reference: limit_ref_s and ratio_ref will be null")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cores = args.workers or os.cpu_count() or 1
    target = local_target() or GPUTarget("cuda", 90, 32)
    sets = list(SETS) if args.kernel_set == "all" else [args.kernel_set]
    batch_arms = [a for a in args.arms if a in ARM_FUNCTIONS]
    result: dict[str, Any] = {"meta": metadata(args, target, cores), "sets": {}}
    result["meta"]["warmup_s"] = warm_up_process(target)

    def save(partial: dict[str, Any] | None = None, kernel_set: str = "") -> None:
        """Write what is measured so far, so a run cut off by a time limit still leaves data."""
        if partial is not None:
            result["sets"][kernel_set] = partial
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=2) + "\n")

    for kernel_set in sets:
        configs = configs_for(kernel_set, args.reduced)
        result["sets"][kernel_set] = bench_set(
            kernel_set,
            configs,
            batch_arms,
            args.repeats,
            target,
            cores,
            checkpoint=lambda partial, ks=kernel_set: save(partial, ks),
        )
        save()
    if "crash" in args.arms:
        result["crash"] = bench_crash(configs_for(sets[-1], True), args.repeats, target, cores)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(table(result), file=sys.stderr)
    verified = all(s["verified"] for d in result["sets"].values() for s in d["summary"].values())
    return 0 if verified and result.get("crash", {}).get("verified", True) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``triton.autotune`` against ``kiln.autotune`` on the GPU, side by side in one run.

Run from the repository root on a machine with a GPU::

    python bench/autotune.py --set matmul --json /tmp/autotune.json

Sets (kernels from ``bench/kernels_bench.py``, the same as ``compile_batch.py``):

* ``matmul``: the 72-config fp16 matmul set, M = N = K = 4096;
* ``softmax``: the 32-config row softmax set, 32768 x 128 fp16 (every config is correct).

Arms, each from a fresh Triton cache, a fresh kiln cache and a fresh tuning database:

* ``triton``: ``triton.autotune`` as shipped: the first call compiles each config inside its
  first benchmark, one after the other, in this process;
* ``triton_parallel``: ``triton.autotune`` as shipped, in a new Python process where
  ``triton_kiln`` cannot be imported, with each tuning's configs first compiled in a process pool
  (one worker per usable core) so that Triton's own compiles hit the cache: the approach of
  Triton's PR #11847 (``bench/parallel_precompile.py``); reported as ``triton_parallel`` and
  ``triton_parallel_over_kiln`` (its first tuned result over kiln's: above 1, kiln is the faster);
* ``kiln``: ``kiln.autotune`` with its defaults (compile pool started inside the timed region,
  GPU sandbox, output checks, tuning database);
* ``kiln-second-process``: a new Python process with the same kiln cache and database times
  its first call to the tuned kernel (it should tune nothing and compile nothing).

Reported: wall seconds to the first tuned result (the first call returns, synchronized), the
chosen config, and both chosen configs timed again under one harness, in this process after
both arms finished (exactly as ``triton.autotune`` times a config: the launch captured from a
stock ``triton.autotune`` kernel, each config through that tuner's own ``Autotuner._bench``,
``do_bench`` warm-up 25 ms, rep 100 ms, median; five alternating rounds, medians:
``kiln_choice_ms_triton_harness``, ``triton_choice_ms_triton_harness``; ``bench/choice_harness.py``), the
set's ``shape``, and ``limit_s`` (the longest compile or the sum of compiles over the cores,
whichever is larger, plus kiln's final round: ``bench/choice_harness.py``) with
``kiln_first_over_limit``, so the ratio ``kiln_choice / triton_choice`` compares choices, not
harnesses; when both tuners chose the same config it is timed once per round and the ratio is
1 by definition (``same_config``: noise is not counted as a difference).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))

import choice_harness
import kernels_bench
import machine_state
import parallel_precompile

SRC = Path(__file__).resolve().parents[1] / "src"


def matmul_configs() -> list[triton.Config]:
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
        for bm in (64, 128, 256)
        for bn in (64, 128, 256)
        for bk in (32, 64)
        for w in (4, 8)
        for s in (3, 4)
    ]


def softmax_configs() -> list[triton.Config]:
    return [
        triton.Config({"BLOCK_SIZE": 128 << i}, num_warps=w, num_stages=s)
        for i in range(8)
        for w in (4, 8)
        for s in (2, 3)
    ]


Case = tuple[Callable[..., None], Callable[[], Any], list[str]]


def matmul_case(size: int) -> Case:
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)

    def call(kernel: Any, **meta: Any) -> None:
        def grid(m: dict[str, Any]) -> tuple[int, int]:
            return (triton.cdiv(size, m["BLOCK_M"]), triton.cdiv(size, m["BLOCK_N"]))

        kernel[grid](
            a,
            b,
            c,
            size,
            size,
            size,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            **meta,
        )

    def check() -> float:
        ref = (a.float() @ b.float()).half()
        return float((c.float() - ref.float()).abs().max())

    return call, check, ["M", "N", "K"]


def softmax_case(
    rows: int = 32768, cols: int = 128
) -> tuple[Callable[[Any], None], Callable[[], Any], list[str]]:
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)

    def call(kernel: Any, **meta: Any) -> None:
        kernel[(1024,)](y, x, x.stride(0), y.stride(0), rows, cols, **meta)

    def check() -> float:
        return float((y.float() - torch.softmax(x.float(), dim=1)).abs().max())

    return call, check, ["n_rows", "n_cols"]


SETS = {
    "matmul": (kernels_bench.matmul_kernel, matmul_configs, lambda: matmul_case(4096)),
    "softmax": (kernels_bench.softmax_kernel, softmax_configs, softmax_case),
}
SHAPES = {"matmul": "M=N=K=4096 fp16", "softmax": "32768x128 fp16"}


@contextlib.contextmanager
def fresh_environment(tag: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=f"kiln-bench-{tag}-"))
    saved = {k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "KILN_CACHE_DIR", "KILN_TUNING_DB")}
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    os.environ["KILN_CACHE_DIR"] = str(root / "kiln")
    os.environ["KILN_TUNING_DB"] = str(root / "kiln" / "tuning.sqlite3")
    try:
        yield root
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def timed_first_call(call: Callable[[Any], None], tuned: Any) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    call(tuned)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def harness_launch(call: Callable[..., None], kernel: Any, key: list[str], config: Any) -> Any:
    """The set's launch as a stock ``triton.autotune`` kernel makes it (given one config it
    tunes nothing), captured (``choice_harness.Capture``) for the tuner's own ``_bench``."""
    tuner = triton.autotune([config], key=key)(kernel)
    capture = choice_harness.Capture(lambda t: kernel.__name__)
    with capture.during([tuner]) as launches:
        call(tuner)
    torch.cuda.synchronize()
    return launches[0]


# The second process's imports (kiln as its docs import it: ``import triton_kiln as kiln``; the
# distribution has no top-level ``kiln`` module, and round 1 on the H100 printed ``nan`` for this
# column because the script imported one). Runnable alone, without a GPU: tests/test_bench_autotune.py.
SECOND_PROCESS_IMPORTS = textwrap.dedent(
    """
    import sys, time
    started = time.perf_counter()
    sys.path[:0] = {paths!r}
    import torch, triton
    import triton_kiln as kiln
    import autotune as bench
    """
)
SECOND_PROCESS = SECOND_PROCESS_IMPORTS + textwrap.dedent(
    """
    kernel, configs, case = bench.SETS[{set_name!r}]
    call, check, key = case()
    tuned = kiln.autotune(configs(), key=key)(kernel)
    torch.cuda.synchronize()
    ready = time.perf_counter()
    call(tuned)
    torch.cuda.synchronize()
    done = time.perf_counter()
    print("RESULT", done - ready, done - started, tuned.loaded_from, tuned._get_pool().stats.dispatched,
          check(), flush=True)
    """
)


def second_process_env(root: Path) -> dict[str, str]:
    """The second process's environment: the kiln arm's cache and database, a cold Triton cache."""
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(root / "triton-second")  # Triton's cache stays cold: kiln must not need it
    env["KILN_CACHE_DIR"] = str(root / "kiln")
    env["KILN_TUNING_DB"] = str(root / "kiln" / "tuning.sqlite3")
    return env


def second_process_paths() -> list[str]:
    """``sys.path`` of the second process: this directory first, then this process's own."""
    return [str(Path(__file__).resolve().parent), *sys.path]


# The triton_parallel arm's process: stock Triton, kiln refused at import (this module imports kiln
# only inside the functions of its kiln arms), the pool started inside the timed first call.
PARALLEL_PROCESS_IMPORTS = textwrap.dedent(
    """
    import json, sys, time
    sys.modules["triton_kiln"] = None  # stock Triton: an import of kiln fails in this process
    sys.path[:0] = {paths!r}
    import torch, triton
    import autotune as bench
    import parallel_precompile
    """
)
PARALLEL_PROCESS = PARALLEL_PROCESS_IMPORTS + textwrap.dedent(
    """
    kernel, configs, case = bench.SETS[{set_name!r}]
    call, check, key = case()
    tuned = triton.autotune(configs(), key=key)(kernel)
    with parallel_precompile.installed() as plan:
        torch.cuda.synchronize()
        ready = time.perf_counter()
        call(tuned)
        torch.cuda.synchronize()
        done = time.perf_counter()
    choice = tuned.best_config
    result = {{
        "first_result_s": done - ready,
        "choice": str(choice),
        "own_timing_ms": float(tuned.configs_timings[choice][0]),
        "max_abs_err": check(),
        "precompile": plan.stats(),
        "kiln_imported": sys.modules.get("triton_kiln") is not None,
    }}
    print("RESULT", json.dumps(result), flush=True)
    """
)


def parallel_process_env(root: Path) -> dict[str, str]:
    """The triton_parallel arm's environment: a fresh Triton cache, none of kiln's settings."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KILN_")}
    env["TRITON_CACHE_DIR"] = str(root / "triton-parallel")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SRC]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def parallel_process_paths() -> list[str]:
    """``sys.path`` of the triton_parallel process: this directory first, kiln's ``src/`` left out."""
    return [str(Path(__file__).resolve().parent), *(p for p in sys.path if p and Path(p).resolve() != SRC)]


def parallel_process(set_name: str) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="kiln-bench-triton_parallel-"))
    script = PARALLEL_PROCESS.format(paths=parallel_process_paths(), set_name=set_name)
    try:
        out = subprocess.run(
            [sys.executable, "-c", script],
            check=False,
            capture_output=True,
            text=True,
            env=parallel_process_env(root),
            timeout=900,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": out.stderr[-2000:]}
    return dict(json.loads(line.removeprefix("RESULT ")))


def second_process(set_name: str, root: Path) -> dict[str, Any]:
    env = second_process_env(root)
    script = SECOND_PROCESS.format(paths=second_process_paths(), set_name=set_name)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, env=env, timeout=600
    )
    wall = time.perf_counter() - started
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        return {"error": out.stderr[-2000:], "process_wall_s": wall}
    _, first_call_s, in_process_s, loaded_from, dispatched, max_err = line.split()
    return {
        "first_tuned_call_s": float(first_call_s),
        "since_interpreter_start_s": float(in_process_s),
        "process_wall_s": wall,
        "loaded_from": loaded_from,
        "compile_jobs_dispatched": int(dispatched),
        "max_abs_err": float(max_err),
    }


def run_set(set_name: str) -> dict[str, Any]:
    import triton_kiln as kiln
    from triton_kiln.settings import usable_cores

    kernel, configs_fn, case = SETS[set_name]
    call, check, key = case()
    result: dict[str, Any] = {"n_configs": len(configs_fn())}

    print(f"[autotune] {set_name}: triton.autotune", file=sys.stderr, flush=True)
    with fresh_environment("triton"):
        tuned_t = triton.autotune(configs_fn(), key=key)(kernel)
        wall_t = timed_first_call(call, tuned_t)
        err_t = check()
        triton_choice = tuned_t.best_config
        triton_own = float(tuned_t.configs_timings[triton_choice][0])

    print(
        f"[autotune] {set_name}: triton.autotune, configs compiled in parallel", file=sys.stderr, flush=True
    )
    parallel = parallel_process(set_name)

    print(f"[autotune] {set_name}: kiln.autotune", file=sys.stderr, flush=True)
    with fresh_environment("kiln") as root:
        tuned_k = kiln.autotune(configs_fn(), key=key)(kernel)
        wall_k = timed_first_call(call, tuned_k)
        err_k = check()
        kiln_choice = tuned_k.best_config
        run = tuned_k.last_run
        kiln_own = float(tuned_k.configs_timings[kiln_choice][0])
        statuses: dict[str, int] = {}
        for r in run.results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        from triton_kiln.tuning.report import format_table, to_json

        table = format_table(run)
        print("[autotune] waiting for the pool to go idle before the second process", file=sys.stderr)
        print(f"[autotune] {set_name}: second process", file=sys.stderr, flush=True)
        second = second_process(set_name, root)
        kiln.get_pool().shutdown()
        shutil.rmtree(root / "triton", ignore_errors=True)

    same_choice = triton_choice.all_kwargs() == kiln_choice.all_kwargs()
    with fresh_environment("harness"):
        # both choices timed as Triton's autotuner times a config (the tuner's _bench), A,B, B,A
        # over 5 rounds; one config chosen by both is timed once per round and counts for both
        launch = harness_launch(call, kernel, key, triton_choice)
        k_runs, t_runs = choice_harness.time_pair(
            functools.partial(choice_harness.tuner_bench_ms, launch, kiln_choice),
            None if same_choice else functools.partial(choice_harness.tuner_bench_ms, launch, triton_choice),
            5,
        )
        t_ms, k_ms = statistics.median(t_runs), statistics.median(k_runs)
    limit = choice_harness.limit_s([to_json(run)], usable_cores())
    result.update(
        {
            "shape": SHAPES[set_name],
            "kiln_choice_ms_triton_harness": k_ms,
            "triton_choice_ms_triton_harness": t_ms,
            "limit_s": limit,
            "kiln_first_over_limit": wall_k / limit if limit else None,
            "triton": {
                "first_result_s": wall_t,
                "choice": str(triton_choice),
                "own_timing_ms": triton_own,
                "max_abs_err": err_t,
            },
            "kiln": {
                "first_result_s": wall_k,
                "choice": str(kiln_choice),
                "own_timing_ms": kiln_own,
                "max_abs_err": err_k,
                "statuses": statuses,
                "first_benchmark_s": run.first_result_s,
                "run": to_json(run),
            },
            "kiln_second_process": second,
            "triton_parallel": parallel,
            "triton_parallel_over_kiln": (
                parallel["first_result_s"] / wall_k if "first_result_s" in parallel and wall_k else None
            ),
            "harness_ms": {
                "triton_choice": t_ms,
                "kiln_choice": k_ms,
                "kiln_over_triton": k_ms / t_ms,
                "same_config": same_choice,
                "triton_runs": t_runs,
                "kiln_runs": k_runs,
            },
            "speedup_first_result": wall_t / wall_k,
            "kiln_report": table,
        }
    )
    return result


def _second_call(second: dict[str, Any]) -> str:
    """The second process's first call in seconds, or why there is none (its error's last line)."""
    if "first_tuned_call_s" in second:
        return f"{second['first_tuned_call_s']:.3f}"
    lines = str(second.get("error") or "no result").strip().splitlines()
    return f"failed: {lines[-1][:60]}" if lines else "failed"


def _first(arm: dict[str, Any]) -> str:
    """An arm's first tuned result in seconds, or ``-`` where it has none (failed, or not run)."""
    value = arm.get("first_result_s")
    return f"{value:.1f}" if isinstance(value, float) else "-"


def summary(result: dict[str, Any]) -> str:
    lines = [
        "set       triton s  parallel s   kiln s  speed-up  parallel/kiln  kiln/triton runtime"
        "  2nd proc first call s  compiles  limit s  kiln/limit"
    ]
    for name, r in result["sets"].items():
        second = r["kiln_second_process"]
        over = r.get("triton_parallel_over_kiln")
        lines.append(
            f"{name:8} {r['triton']['first_result_s']:9.1f} {_first(r.get('triton_parallel') or {}):>11} "
            f"{r['kiln']['first_result_s']:8.1f} "
            f"{r['speedup_first_result']:8.2f}x {f'{over:.2f}' if over else '-':>14} "
            f"{r['harness_ms']['kiln_over_triton']:20.3f} "
            f"{_second_call(second):>22} "
            f"{second.get('compile_jobs_dispatched', '-'):>9} "
            f"{r.get('limit_s') or float('nan'):8.2f} {r.get('kiln_first_over_limit') or float('nan'):10.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=[*SETS, "all"], default="all", dest="kernel_set")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/autotune.py needs a GPU", file=sys.stderr)
        return 2
    names = list(SETS) if args.kernel_set == "all" else [args.kernel_set]
    result: dict[str, Any] = {
        "meta": {
            "device": torch.cuda.get_device_name(),
            "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
            "triton_version": triton.__version__,
            "torch_version": torch.__version__,
            "cores": parallel_precompile.usable_cores(),  # the cores this run may use (taskset)
            "host": machine_state.host(),  # the CPU model and the load as the run starts
        },
        "sets": {},
    }
    for name in names:
        result["sets"][name] = run_set(name)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    for name, r in result["sets"].items():
        print(f"\n{name}:\n{r['kiln_report']}", file=sys.stderr)
    print("\n" + summary(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

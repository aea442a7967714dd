"""Helion's autotuner with its default fork precompile against the same autotune through kiln.

Run from the repository root on a machine with a GPU (Helion 1.5.0 or 1.5.1 installed)::

    python bench/helion_autotune.py --out /tmp/helion_autotune.json
    python bench/helion_autotune.py --kernels add,softmax --skip fault,ctrl-c --out a.json  # a part
    python bench/helion_autotune.py --merge a.json b.json --out all.json      # parts of one session

Every run is a fresh subprocess (fresh Triton, Helion and kiln caches; imports and CUDA start
outside the timed region), so the arms run side by side in one invocation:

* ``compare``: per kernel (``add``, ``softmax``, ``matmul``, ``many_configs`` of
  ``tests/test_helion_kernels.py``), Helion's default search (``LFBOTreeSearch``) at the same
  effort, seed and generation cap, once with ``autotune_precompile="fork"`` (Helion's default)
  and once with ``autotuner_fn=kiln.helion.autotuner_fn``. Reported: autotune wall (the
  ``autotune`` call; the kiln arm creates its pool just before binding the kernel, as
  ``kiln.helion.install()`` at import time would, so what is left of its start-up counts),
  precompile-phase walls, configs compiled / failed, the chosen config, its
  runtime (``triton.testing.do_bench``, median ms); the geomean of kiln/fork autotune walls.
  With ``--repeats N`` each arm runs N times per kernel (alternating order) and the run with the
  median autotune wall is compared (every run is kept): Helion's search is seeded, but after
  the seeded population it follows measured timings, so the arms compile different configs.
* ``fault``: ``crashy_add`` with a seed config that aborts in Triton's compiler (the hook of
  ``tests/support/helion_faults.py``: ``num_warps == 2``), through kiln, with fork and with
  Helion's precompile off (``autotune_precompile=None``: compiles in the autotuning process); then
  ``crashall_add``, whose reference config (Helion's accuracy baseline) aborts.
* ``ctrl-c``: SIGINT to a process in the middle of a matmul autotune's precompile phase
  (each arm), then a count of the processes it had started that are still alive.

Prints a table and the JSON; ``--out`` also writes the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
KERNELS = ("add", "softmax", "matmul", "many_configs")
GPU_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "add": [(8192, 8192), (8192, 8192)],
    "crashy_add": [(4096, 4096), (4096, 4096)],
    "crashall_add": [(4096, 4096), (4096, 4096)],
    "softmax": [(8192, 4096)],
    "matmul": [(4096, 4096), (4096, 4096)],
    "many_configs": [(4096, 4096), (4096,)],
}
RESULT = "KILN-BENCH-RESULT "
PRECOMPILE = "KILN-BENCH-PRECOMPILE "


# ----------------------------------------------------------------------------- child side


def _child(opts: argparse.Namespace) -> None:
    sys.path.insert(0, str(TESTS))
    import torch

    if opts.faults:
        from support import helion_faults

        helion_faults.install()  # the abort hook, inherited by fork children
    from triton.testing import do_bench

    import test_helion_kernels as hk
    import triton_kiln as kiln
    import triton_kiln.helion
    from triton_kiln.helion import adapter

    gen = torch.Generator(device="cuda").manual_seed(0)
    args = tuple(
        torch.randn(*shape, device="cuda", dtype=torch.float16, generator=gen)
        for shape in GPU_SHAPES[opts.kernel]
    )
    settings: dict[str, Any] = {
        "autotune_effort": opts.effort,
        "autotune_max_generations": opts.generations,
        "autotune_random_seed": opts.seed,
        "autotune_precompile": {"spawn": "spawn", "none": None}.get(opts.arm, "fork"),
        "autotune_progress_bar": False,
    }
    pool = None
    if opts.arm == "kiln":
        settings["autotuner_fn"] = kiln.helion.autotuner_fn
        pool = kiln.CompilePool(preload=["support.helion_faults_preload"] if opts.faults else [])
        kiln.helion.configure(pool=pool)
    if opts.seed_abort:
        probe = hk.make(opts.kernel, **settings).bind(args)
        crash = probe.config_spec.default_config()
        crash.config["num_warps"] = 2
        settings["autotune_seed_configs"] = [crash]
    bound = hk.make(opts.kernel, **settings).bind(args)

    def started(n: int) -> None:
        print(f"{PRECOMPILE}{n}", flush=True)

    result: dict[str, Any] = {"arm": opts.arm, "kernel": opts.kernel}
    with adapter.probe_precompile(on_start=started) as phases:
        t0 = time.perf_counter()
        try:
            config = bound.autotune(args, force=True)
        except Exception as error:  # reported, not hidden: the fault runs expect some
            result.update(status="error", error_type=type(error).__name__, error=str(error)[:2000])
            config = None
        result["autotune_s"] = time.perf_counter() - t0
    result["precompile_phases"] = [vars(p) for p in phases]
    result["precompile_s"] = sum(p.seconds for p in phases)
    result["configs_compiled"] = sum(p.ok for p in phases)
    result["configs_failed"] = sum(p.failed for p in phases)
    if config is not None:
        result["status"] = "ok"
        result["config"] = repr(config)
        result["num_warps"] = config.config.get("num_warps")
        out = bound(*args)
        reference = hk.eager(opts.kernel)(*args)
        result["max_abs_error"] = float((out.float() - reference.float()).abs().max())
        result["runtime_ms"] = float(do_bench(lambda: bound(*args), warmup=50, rep=200))
    if pool is not None:
        stats = pool.stats
        result["kiln"] = {
            "compiled": stats.compiled,
            "failed": stats.failed,
            "worker_deaths": stats.worker_deaths,
            "zygote_ready_s": stats.zygote_ready_s,
        }
        pool.shutdown(wait=True, cancel_futures=True)
    print(RESULT + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------- parent side


def _env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("TRITON_CACHE_DIR", "HELION_AUTOTUNE_PRECOMPILE"):
        env.pop(name, None)
    fresh = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    env["HELION_CACHE_DIR"] = str(fresh / "helion")
    env["KILN_CACHE_DIR"] = str(fresh / "kiln")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def _command(
    opts: argparse.Namespace, arm: str, kernel: str, *, faults: bool = False, seed_abort: bool = False
) -> list[str]:
    cmd = [sys.executable, __file__, "--child", "--arm", arm, "--kernel", kernel]
    cmd += ["--effort", opts.effort, "--generations", str(opts.generations), "--seed", str(opts.seed)]
    if faults:
        cmd.append("--faults")
    if seed_abort:
        cmd.append("--seed-abort")
    return cmd


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as expired:
        return {"status": "bench-timeout", "timeout_s": timeout, "stderr_tail": str(expired.stderr)[-1500:]}
    found = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    result: dict[str, Any] = json.loads(found[-1][len(RESULT) :]) if found else {"status": "died"}
    result["returncode"] = proc.returncode
    if proc.returncode < 0:
        result["signal"] = signal.Signals(-proc.returncode).name
    result["process_s"] = time.perf_counter() - started
    if not found or proc.returncode != 0:
        result["stderr_tail"] = proc.stderr[-1500:]
    return result


def _ctrl_c(opts: argparse.Namespace, arm: str, env: dict[str, str]) -> dict[str, Any]:
    import psutil

    proc = subprocess.Popen(
        _command(opts, arm, "matmul"), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    seen: dict[int, psutil.Process] = {}
    for line in proc.stdout:
        if line.startswith(PRECOMPILE) or time.monotonic() > deadline:
            break
    time.sleep(1.0)  # in the middle of the precompile phase
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            seen[child.pid] = child
    except psutil.Error:
        pass
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
        exited = True
    except subprocess.TimeoutExpired:
        exited = False
        proc.kill()
        proc.wait()
    time.sleep(2.0)
    left = []
    for pid, child in seen.items():
        try:
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                left.append({"pid": pid, "name": child.name()})
        except psutil.Error:
            continue
    return {
        "arm": arm,
        "exited_after_sigint": exited,
        "returncode": proc.returncode,
        "processes_seen": len(seen),
        "processes_left": left,
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median autotune wall among the successful ones (the lower median of an
    even count), else the first; with one run, that run. Every run stays in the row's ``runs``."""
    ok = sorted((r for r in runs if r.get("status") == "ok"), key=lambda r: float(r["autotune_s"]))
    if not ok:
        return runs[0]
    chosen = dict(ok[(len(ok) - 1) // 2])
    if len(runs) > 1:
        chosen["median_of"] = len(ok)
    return chosen


def _row(kernel: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One kernel's comparison: each arm's median run, their ratios, and (with more than one run
    per arm) every run under ``runs``."""
    pair = {arm: _median_run(runs[arm]) for arm in ("fork", "kiln")}
    row: dict[str, Any] = {"kernel": kernel, **pair}
    if max(len(r) for r in runs.values()) > 1:
        row["runs"] = runs
    fork, kiln_ = pair["fork"], pair["kiln"]
    if fork.get("status") == "ok" and kiln_.get("status") == "ok":
        row["autotune_ratio"] = kiln_["autotune_s"] / fork["autotune_s"]
        row["runtime_ratio"] = kiln_["runtime_ms"] / fork["runtime_ms"]
    return row


def _geomean_ratio(rows: list[dict[str, Any]]) -> float | None:
    """The geometric mean of the rows' kiln/fork autotune ratios (rows without one left out)."""
    values = [row["autotune_ratio"] for row in rows if "autotune_ratio" in row]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--effort", default="quick")
    parser.add_argument("--generations", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--budget-s", type=float, default=450.0, help="wall budget of the whole bench")
    parser.add_argument(
        "--min-start-s",
        type=float,
        default=150.0,
        help="start no run with less budget left than this (a run's timeout is what is left, <= 240 s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per arm and kernel (the median run is compared): "
        "the two arms' searches part after the seeded population, so one run per arm is noisy",
    )
    parser.add_argument(
        "--repeat-offset",
        type=int,
        default=0,
        help="shift the alternating arm order (for repeats split over several invocations)",
    )
    parser.add_argument("--skip", default="", help="comma list of: compare, fault, ctrl-c")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="join the JSON of runs made one after another (one device, "
        "one code version; e.g. two kernels per command where a command may take 10 minutes)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", choices=("fork", "kiln", "spawn", "none"), help=argparse.SUPPRESS)
    parser.add_argument("--kernel", help=argparse.SUPPRESS)
    parser.add_argument("--faults", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed-abort", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        _child(opts)
        return
    if opts.merge:
        _write(_merge(opts.merge), opts.out)
        return
    begin = time.perf_counter()
    skip = set(filter(None, opts.skip.split(",")))
    scratch = Path(tempfile.mkdtemp(prefix="kiln-helion-bench-"))

    def left() -> float:
        return opts.budget_s - (time.perf_counter() - begin)

    def run(arm: str, kernel: str, **kw: bool) -> dict[str, Any]:
        if left() < opts.min_start_s:  # a run cut short by the budget would be a lost run
            return {"arm": arm, "kernel": kernel, "status": "skipped (bench budget spent)"}
        return _run(_command(opts, arm, kernel, **kw), _env(scratch), timeout=max(30.0, min(240.0, left())))

    report: dict[str, Any] = {
        "bench": "helion",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {"effort": opts.effort, "generations": opts.generations, "seed": opts.seed},
        "shapes": {k: GPU_SHAPES[k] for k in GPU_SHAPES},
    }
    try:
        import torch

        report["device"] = torch.cuda.get_device_name(0)
        import importlib.metadata as md

        report["versions"] = {p: md.version(p) for p in ("helion", "torch", "triton")}
    except Exception as error:
        report["device"] = f"unknown ({error})"
    if "fault" not in skip:
        report["fault"] = {
            "config_abort_kiln": run("kiln", "crashy_add", faults=True, seed_abort=True),
            "config_abort_fork": run("fork", "crashy_add", faults=True, seed_abort=True),
            # Helion with its precompile off compiles in the autotuning process itself
            "config_abort_no_precompile": run("none", "crashy_add", faults=True, seed_abort=True),
            "baseline_abort_kiln": run("kiln", "crashall_add", faults=True),
            "baseline_abort_fork": run("fork", "crashall_add", faults=True),
        }
    if "ctrl-c" not in skip:
        report["ctrl_c"] = [_ctrl_c(opts, arm, _env(scratch)) for arm in ("kiln", "fork")]
    if "compare" not in skip:
        rows = []
        for i, kernel in enumerate(opts.kernels.split(",")):
            runs: dict[str, list[dict[str, Any]]] = {"fork": [], "kiln": []}
            for repeat in range(opts.repeats):  # alternating order: drift hits both arms alike
                arms = ("fork", "kiln") if (i + repeat + opts.repeat_offset) % 2 == 0 else ("kiln", "fork")
                for arm in arms:
                    runs[arm].append(run(arm, kernel))
            rows.append(_row(kernel, runs))
        report["compare"] = rows
        report["geomean_autotune_ratio"] = _geomean_ratio(rows)
    report["bench_s"] = time.perf_counter() - begin
    _write(report, opts.out)


def _write(report: dict[str, Any], out: Path | None) -> None:
    _print_table(report)
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def _merge(paths: list[Path]) -> dict[str, Any]:
    """One report from several runs: per kernel, every part's runs of each arm pooled and the
    median run compared (so repeats may be split over several invocations), the fault and Ctrl-C
    arms (a later run's replace an earlier one's), the geomean over every kernel, and each part's
    command, date and device (which must all be one device)."""
    parts = [json.loads(path.read_text()) for path in paths]
    devices = {part.get("device") for part in parts}
    if len(devices) != 1:
        raise SystemExit(f"refusing to merge runs from different devices: {sorted(map(str, devices))}")
    merged: dict[str, Any] = {
        **{k: v for k, v in parts[0].items() if k not in ("compare", "fault", "ctrl_c", "bench_s")},
        "merged_from": [
            {
                "file": str(path),
                "date": part.get("date"),
                "command": part.get("command"),
                "bench_s": part.get("bench_s"),
            }
            for path, part in zip(paths, parts, strict=True)
        ],
    }
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}  # kernel -> arm -> runs, in run order
    for part in parts:
        for row in part.get("compare", []):
            into = runs.setdefault(row["kernel"], {"fork": [], "kiln": []})
            for arm in ("fork", "kiln"):
                into[arm].extend(row["runs"][arm] if "runs" in row else [row[arm]])
        for key in ("fault", "ctrl_c"):
            if key in part:
                merged[key] = part[key]
    merged["compare"] = [_row(kernel, arm_runs) for kernel, arm_runs in runs.items()]
    merged["geomean_autotune_ratio"] = _geomean_ratio(merged["compare"])
    return merged


def _print_table(report: dict[str, Any]) -> None:
    def f(value: Any, fmt: str = "{:.2f}") -> str:
        return fmt.format(value) if isinstance(value, int | float) else "-"

    print(f"device: {report.get('device')}  {report.get('versions')}")
    print(f"{'kernel':14} {'arm':5} {'status':8} {'tune s':>7} {'prec s':>7} {'ok':>4} {'fail':>4} {'ms':>8}")
    for row in report.get("compare", []):
        for arm in ("fork", "kiln"):
            r = row[arm]
            print(
                f"{row['kernel']:14} {arm:5} {str(r.get('status'))[:8]:8} {f(r.get('autotune_s')):>7} "
                f"{f(r.get('precompile_s')):>7} {f(r.get('configs_compiled'), '{}'):>4} "
                f"{f(r.get('configs_failed'), '{}'):>4} {f(r.get('runtime_ms'), '{:.4f}'):>8}"
            )
        runs = row.get("runs", {})
        counts = {arm: sum(r.get("status") == "ok" for r in runs[arm]) for arm in runs}
        lost = sum(len(runs[arm]) - counts[arm] for arm in runs)
        of = ""
        if runs:
            of = f"  (median of ok runs: fork {counts['fork']}, kiln {counts['kiln']}; lost {lost})"
        print(
            f"{'':14} kiln/fork autotune {f(row.get('autotune_ratio'), '{:.3f}')}"
            f"  runtime {f(row.get('runtime_ratio'), '{:.3f}')}{of}"
        )
        for arm in runs:
            walls = ", ".join(
                f"{r['autotune_s']:.1f}/{r['configs_compiled']}" if r.get("status") == "ok" else r["status"]
                for r in runs[arm]
            )
            print(f"{'':14}   {arm} runs (autotune s / configs): {walls}")
    print(f"geomean kiln/fork autotune wall: {f(report.get('geomean_autotune_ratio'), '{:.3f}')}")
    for name, r in report.get("fault", {}).items():
        how = r.get("signal") or r.get("error_type") or ""
        print(
            f"fault {name:22} status={r.get('status')} rc={r.get('returncode')} {how} nw={r.get('num_warps')}"
        )
    for r in report.get("ctrl_c", []):
        print(
            f"ctrl-c {r['arm']:5} exited={r['exited_after_sigint']} "
            f"seen={r['processes_seen']} left={r['processes_left']}"
        )


if __name__ == "__main__":
    main()

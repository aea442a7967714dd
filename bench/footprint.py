"""What kiln holds on a GPU machine where it tunes, and where it does not: GPU memory and processes.

Run from the repository root on a machine with one GPU (Liger-Kernel installed)::

    python bench/footprint.py                     # writes bench/results/footprint-<gpu>.json
    python bench/footprint.py --dry-run           # no GPU: the plan, and nothing run
    python bench/footprint.py --no-inductor       # the op scenarios only

Every arm is a fresh process (``bench/footprint_child.py``) running Liger's DyT (forward and
backward, 16384x4096 bf16; ``realworld_ops``'s ``liger_dyt_fwdbwd_16384x4096``) under
``kiln.install()`` (arm ``kiln``) or stock ``triton.autotune`` (arm ``triton``), on cache
directories of its own. Scenarios, each a row with kiln's figures and stock Triton's:

* ``tuned``: a process on fresh caches, measured 3 s after its first call (it tuned);
* ``tuned_idle``: the same process after ``--idle-s`` (passed as ``KILN_IDLE_S``) and 3 s more;
* ``fresh``: a process on fresh caches that installs kiln and imports the op's modules but calls
  nothing, 3 s later (on a fresh cache kiln starts its pool and sandbox at ``install()``, for
  the first call's tuning); ``fresh_idle``: the same process after ``--fresh-idle-s`` (its
  ``KILN_IDLE_S``) and 3 s more. The imports and the CUDA start come between ``install()`` and
  the ``fresh`` row, so its idle time is longer than the tuned arms': a row taken after the
  idle close would show nothing held, and the run stops instead (``measured_s_after_install``);
* ``db_only``: a process on the tuned arm's kiln cache (its tuning database: every key found)
  and a fresh Triton cache; stock: a process on the tuned arm's Triton cache (it benchmarks
  again, compiling nothing);
* ``db_only_8``: 8 such processes at once on the GPU, their figures summed (times: median);
* ``inductor_warm``: the same DyT written in torch under ``torch.compile``, a process on the
  caches of a cold one (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``, ``KILN_CACHE_DIR``);
  kiln: ``triton_kiln.inductor.install()``.

Per row: ``kiln_gpu_mib`` (GPU memory of every process under the arm's process, from
``nvidia-smi --query-compute-apps``), ``kiln_processes`` (their count), ``first_call_s``
(synchronized), ``op_ms`` (``triton.testing.do_bench`` median), ``caller_gpu_mib`` (the arm's
own process), and the ``triton_*`` figures of the stock arm; ``expected`` says what the row
should show (``0 and 0`` where nothing tunes) and ``meets`` whether it does. Any arm that fails
stops the run with its error, and no results file is written. Budget: under 6 minutes on one
H200 (estimated; the file records the run's `wall_s`; the fresh arms add ~2 x (--fresh-idle-s + 10) s).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import machine_state

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHILD = HERE / "footprint_child.py"
SCENARIOS = ("db_only", "db_only_8", "tuned", "tuned_idle", "fresh", "fresh_idle", "inductor_warm")
ZERO = "0 and 0"


class ArmFailed(RuntimeError):
    """An arm's process failed: the run stops, and writes nothing."""


def arm_env(
    root: Path, kiln: str, triton: str, inductor: str = "", idle_s: float | None = None
) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(HERE), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("KILN_PROGRESS", "0")
    env["KILN_CACHE_DIR"] = str(root / kiln)
    env["KILN_TUNING_DB"] = str(root / kiln / "tuning.sqlite3")
    env["TRITON_CACHE_DIR"] = str(root / triton)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(root / (inductor or f"inductor-{triton}"))
    if idle_s is not None:
        env["KILN_IDLE_S"] = f"{idle_s:g}"
    return env


def run_arm(
    name: str, root: Path, arm: str, kind: str, env: dict[str, str], timeout_s: float, idle_wait: float = 0.0
) -> dict[str, Any]:
    """One arm's process; its result, or :class:`ArmFailed` with its error and output tail."""
    out = root / f"{name}.json"
    log = root / f"{name}.log"
    cmd = [sys.executable, str(CHILD), "--arm", arm, "--kind", kind, "--out", str(out)]
    if idle_wait:
        cmd += ["--idle-wait", f"{idle_wait:g}"]
    print(f"[footprint] {name}", file=sys.stderr, flush=True)
    with log.open("w") as err:
        try:
            proc = subprocess.run(
                cmd, env=env, stdout=err, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise ArmFailed(f"{name}: timed out after {timeout_s:g} s; its output: {log}") from None
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if proc.returncode != 0 or "error" in result or not result:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ArmFailed(
            f"{name}: exit {proc.returncode}: {result.get('error', 'no result')}\n"
            f"{result.get('traceback', '')}{tail}"
        )
    return result


def _median(values: list[Any], digits: int) -> float | None:
    known = [v for v in values if v is not None]  # None: a process that called nothing
    return round(statistics.median(known), digits) if known else None


def figures(results: list[dict[str, Any]], phase: str = "after") -> dict[str, Any]:
    """One or more processes' figures: memory and processes summed, times as the median."""
    calls = [r["first_call_s"] for r in results if r["first_call_s"] is not None]
    return {
        "gpu_mib": round(sum(r[phase]["child_gpu_mib"] for r in results), 1),
        "processes": sum(r[phase]["child_processes"] for r in results),
        "first_call_s": _median(calls, 3),
        "first_call_s_max": round(max(calls), 3) if calls else None,
        "op_ms": _median([r["op_ms"] for r in results], 4),
        "caller_gpu_mib": round(sum(r[phase]["caller_gpu_mib"] for r in results), 1),
        "children": [c for r in results for c in r[phase]["children"]],
    }


def row(scenario: str, kiln: dict[str, Any], stock: dict[str, Any], expected: str) -> dict[str, Any]:
    meets = kiln["gpu_mib"] == 0 and kiln["processes"] == 0 if expected == ZERO else None
    data: dict[str, Any] = {
        "scenario": scenario,
        "kiln_gpu_mib": kiln["gpu_mib"],
        "kiln_processes": kiln["processes"],
        "first_call_s": kiln["first_call_s"],
        "op_ms": kiln["op_ms"],
        "caller_gpu_mib": kiln["caller_gpu_mib"],
        "triton_gpu_mib": stock["gpu_mib"],
        "triton_processes": stock["processes"],
        "triton_first_call_s": stock["first_call_s"],
        "triton_op_ms": stock["op_ms"],
        "triton_caller_gpu_mib": stock["caller_gpu_mib"],
        "expected": expected,
        "meets": meets,
        "first_call_s_max": kiln["first_call_s_max"],
        "triton_first_call_s_max": stock["first_call_s_max"],
        "kiln_children": kiln["children"],
        "triton_children": stock["children"],
    }
    return data


def check_before_idle_close(result: dict[str, Any], idle_s: float) -> None:
    """The fresh row shows what ``install()`` started ahead only if it was taken before that
    closed, ``idle_s`` after ``install()``; :class:`ArmFailed` otherwise."""
    since = result["after"].get("since_install_s")
    if since is None or since >= idle_s:
        raise ArmFailed(
            f"kiln_fresh: measured {since} s after install(), not before its idle close at "
            f"{idle_s:g} s, so the row would show nothing held; raise --fresh-idle-s above the "
            f"op's imports and CUDA start plus 3 s"
        )


def plan(args: argparse.Namespace) -> list[str]:
    """The arms, in the order they run."""
    steps = ["kiln tuned (+ tuned_idle)", "triton tuned (+ tuned_idle)"]
    steps += ["kiln fresh (+ fresh_idle)", "triton fresh (+ fresh_idle)", "kiln db_only", "triton db_only"]
    steps += [f"kiln db_only_8 ({args.copies} at once)", f"triton db_only_8 ({args.copies} at once)"]
    if args.inductor:
        steps += ["kiln inductor cold", "kiln inductor_warm", "triton inductor cold", "triton inductor_warm"]
    return steps


def measure_all(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    t = args.arm_timeout
    wait = args.idle_s + 3.0
    arms: dict[str, Any] = {}
    arms["kiln_tuned"] = run_arm(
        "kiln_tuned", root, "kiln", "op", arm_env(root, "kiln-1", "triton-k1", idle_s=args.idle_s), t, wait
    )
    arms["triton_tuned"] = run_arm(
        "triton_tuned",
        root,
        "triton",
        "op",
        arm_env(root, "kiln-t", "triton-t1", idle_s=args.idle_s),
        t,
        wait,
    )
    for arm in ("kiln", "triton"):
        env = arm_env(root, f"kiln-f{arm[0]}", f"triton-f{arm[0]}", idle_s=args.fresh_idle_s)
        arms[f"{arm}_fresh"] = run_arm(f"{arm}_fresh", root, arm, "install", env, t, args.fresh_idle_s + 3.0)
    check_before_idle_close(arms["kiln_fresh"], args.fresh_idle_s)
    arms["kiln_db"] = run_arm("kiln_db", root, "kiln", "op", arm_env(root, "kiln-1", "triton-k2"), t)
    arms["triton_db"] = run_arm("triton_db", root, "triton", "op", arm_env(root, "kiln-t", "triton-t1"), t)

    def copies(arm: str, kiln: str, triton: str) -> list[dict[str, Any]]:
        with ThreadPoolExecutor(args.copies) as pool:
            futures = [
                pool.submit(
                    run_arm, f"{arm}_db8_{i}", root, arm, "op", arm_env(root, kiln, triton.format(i=i)), t
                )
                for i in range(args.copies)
            ]
            return [f.result() for f in futures]

    arms["kiln_db8"] = copies("kiln", "kiln-1", "triton-k8-{i}")
    arms["triton_db8"] = copies("triton", "kiln-t", "triton-t1")
    rows = [
        row("db_only", figures([arms["kiln_db"]]), figures([arms["triton_db"]]), ZERO),
        row(f"db_only_{args.copies}", figures(arms["kiln_db8"]), figures(arms["triton_db8"]), ZERO),
        row("tuned", figures([arms["kiln_tuned"]]), figures([arms["triton_tuned"]]), "measured"),
        row(
            "tuned_idle", figures([arms["kiln_tuned"]], "idle"), figures([arms["triton_tuned"]], "idle"), ZERO
        ),
        {
            **row("fresh", figures([arms["kiln_fresh"]]), figures([arms["triton_fresh"]]), "measured"),
            "measured_s_after_install": arms["kiln_fresh"]["after"]["since_install_s"],
        },
        row(
            "fresh_idle", figures([arms["kiln_fresh"]], "idle"), figures([arms["triton_fresh"]], "idle"), ZERO
        ),
    ]
    if args.inductor:
        env_k = arm_env(root, "kiln-i", "triton-ik", "inductor-k")
        env_t = arm_env(root, "kiln-it", "triton-it", "inductor-t")
        arms["kiln_inductor_cold"] = run_arm("kiln_inductor_cold", root, "kiln", "inductor", env_k, t)
        arms["kiln_inductor_warm"] = run_arm("kiln_inductor_warm", root, "kiln", "inductor", env_k, t)
        arms["triton_inductor_cold"] = run_arm("triton_inductor_cold", root, "triton", "inductor", env_t, t)
        arms["triton_inductor_warm"] = run_arm("triton_inductor_warm", root, "triton", "inductor", env_t, t)
        rows.append(
            row(
                "inductor_warm",
                figures([arms["kiln_inductor_warm"]]),
                figures([arms["triton_inductor_warm"]]),
                ZERO,
            )
        )
        cold = row(
            "inductor_cold",
            figures([arms["kiln_inductor_cold"]]),
            figures([arms["triton_inductor_cold"]]),
            "measured",
        )
        rows.append(cold)
    return rows


def device_name() -> str:
    import torch

    return str(torch.cuda.get_device_name())


def slug(name: str) -> str:
    """``NVIDIA H200`` -> ``h200``: the results file's device part."""
    words = [
        w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in ("nvidia", "tesla", "geforce")
    ]
    return words[0] if words else "gpu"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'scenario':<14} {'kiln MiB':>9} {'kiln procs':>10} {'first s':>8} {'op ms':>8} "
        f"{'triton MiB':>10} {'triton procs':>12} {'first s':>8} {'op ms':>8}  expected"
    )
    lines = [head, "-" * len(head)]

    def cell(value: float | None, spec: str) -> str:
        return format(value, spec) if value is not None else format("-", spec[:-3] if "." in spec else spec)

    for r in rows:
        mark = "" if r["meets"] is None else (" ok" if r["meets"] else " NOT MET")
        lines.append(
            f"{r['scenario']:<14} {r['kiln_gpu_mib']:>9.0f} {r['kiln_processes']:>10} "
            f"{cell(r['first_call_s'], '>8.2f')} {cell(r['op_ms'], '>8.3f')} "
            f"{r['triton_gpu_mib']:>10.0f} {r['triton_processes']:>12} "
            f"{cell(r['triton_first_call_s'], '>8.2f')} {cell(r['triton_op_ms'], '>8.3f')}  "
            f"{r['expected']}{mark}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/footprint-<gpu>.json")
    parser.add_argument("--idle-s", type=float, default=5.0, help="KILN_IDLE_S of the tuned arms (seconds)")
    parser.add_argument(
        "--fresh-idle-s",
        type=float,
        default=30.0,
        help="KILN_IDLE_S of the fresh arms: longer than their imports and CUDA start plus 3 s",
    )
    parser.add_argument("--copies", type=int, default=8, help="processes at once in db_only_8")
    parser.add_argument("--arm-timeout", type=float, default=240.0, help="seconds before an arm is killed")
    parser.add_argument("--no-inductor", dest="inductor", action="store_false", help="skip inductor_warm")
    parser.add_argument("--keep", action="store_true", help="keep the arms' cache directories and logs")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing (no GPU needed)")
    args = parser.parse_args(argv)
    if args.idle_s < 0:
        parser.error("--idle-s must be 0 or more")
    if args.fresh_idle_s <= 0:
        parser.error("--fresh-idle-s must be more than 0 (with 0, nothing starts ahead)")
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        print("\n".join(f"{i + 1}. {step}" for i, step in enumerate(plan(args))))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("bench/footprint.py needs a GPU (or --dry-run); nothing was run or written.", file=sys.stderr)
        return 2
    device = device_name()
    started = time.time()
    root = Path(tempfile.mkdtemp(prefix="kiln-footprint-"))
    try:
        rows = measure_all(args, root)
    except ArmFailed as exc:
        print(
            f"bench/footprint.py: {exc}\nNo results file was written (the arms' files: {root}).",
            file=sys.stderr,
        )
        return 1
    date = dt.datetime.now(dt.timezone.utc)
    result = {
        "device": device,
        "date": f"{date:%Y-%m-%d}",
        "commit": machine_state.commit(mark_dirty=True) or "unknown",
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "date_utc": date.isoformat(timespec="seconds"),
        "op": "liger_dyt_fwdbwd_16384x4096 (kiln.install()); inductor: the same DyT under torch.compile",
        "idle_s": args.idle_s,
        "fresh_idle_s": args.fresh_idle_s,
        "wall_s": round(time.time() - started, 1),
        "rows": rows,
    }
    out = args.out or ROOT / "bench" / "results" / f"footprint-{slug(device)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".tmp")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(partial, out)  # whole or not at all
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=1))
    print("\n" + table(rows) + f"\n\nwritten: {out}", file=sys.stderr)
    unmet = [r["scenario"] for r in rows if r["meets"] is False]
    if unmet:
        print(f"bench/footprint.py: expected 0 MiB and 0 processes of kiln's in {unmet}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

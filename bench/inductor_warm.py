"""Where a warm torch.compile process's time goes, stock Inductor against kiln (the goal: a warm
process runs no slower than stock), and whether kiln's compile pool starting beside Dynamo's tracing is
what slows it.

Run from the repository root on a GPU machine::

    python bench/inductor_warm.py --model resnet50 --mode default --rounds 2 --warm-repeats 3 \\
        --out /tmp/inductor_warm.json

Each round, on fresh cache directories: one cold process per arm of ``--arms`` (default
``stock``, ``kiln``: ``install()``, its sidecar started when Inductor first lowers a graph, and
``kiln_threads``: ``install(sidecar=False)``, each job's in-process work in the caller's threads;
also ``kiln_eager``: kiln's pool started at install rather than at the first lowered graph);
then ``--warm-repeats`` sweeps of warm processes, one per arm in a rotating order, each on its
arm's cold caches (``stock_pool``, stock Inductor with kiln's pool started beside it and never
used, on stock's). Every process is ``bench/inductor_child.py`` with no runtime
measurement (``--iters 0``): ``first_s`` is ``torch.compile``, the first call and a sync, kiln's
install included.

Per arm: the median ``first_s`` of its cold and of its warm processes, the ratio to stock's, the
medians of the Dynamo phases that differed on the H100 (``variable_builder_call``,
``wrap_to_fake_tensor_and_record``, ``bytecode_tracing``, ``entire_frame_compile``), and the main
thread's counters over the first call (CPU user and system seconds, page faults, context
switches, the CPU it ran on before and after). Prints JSON, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inductor as bench
import inductor_report as report

ARMS = ("stock", "kiln", "kiln_threads", "kiln_eager", "stock_pool")
DEFAULT_ARMS = ("stock", "kiln", "kiln_threads")
HOME = {"stock_pool": "stock"}
"""A warm arm with no cold process of its own -> the cold arm whose caches it runs on."""
PHASES = (
    "entire_frame_compile",
    "bytecode_tracing",
    "variable_builder_call",
    "wrap_to_fake_tensor_and_record",
    "build_guards",
    "OutputGraph.call_user_compiler",
)
COUNTERS = ("utime_s", "stime_s", "minflt", "majflt", "nvcsw", "nivcsw")


def _phases(result: dict[str, Any]) -> dict[str, float]:
    found = result.get("split", {}).get("phases", {})
    return {name: found[name]["total_s"] for name in PHASES if name in found}


def brief(result: dict[str, Any]) -> dict[str, Any]:
    """What one process reported that this script compares."""
    return {
        "arm": result.get("arm"),
        "phase": result.get("phase"),
        "first_s": result.get("first_s"),
        "kiln_install_s": result.get("kiln_install_s"),
        "speed_probe_s": result.get("speed_probe_s"),
        "import_inductor_s": result.get("import_inductor_s"),
        "phases": _phases(result),
        "main_thread": result.get("main_thread_first_call", {}),
        "threads_cpu_s": result.get("threads_cpu_first_call_s", {}),
        "kiln_sidecar": result.get("kiln_sidecar"),
        "children": result.get("children_after_first_call"),
        "machine_before": result.get("machine_before"),
        "error": result.get("error"),
        "dir": result.get("dir"),
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def summarize(processes: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per arm and phase (cold, warm), and each arm's ratio to stock's."""
    arms: dict[str, Any] = {}
    for phase in ("cold", "warm"):
        for arm in dict.fromkeys(p["arm"] for p in processes if p["phase"] == phase):
            mine = [p for p in processes if p["arm"] == arm and p["phase"] == phase and not p["error"]]
            entry = arms.setdefault(arm, {})
            entry[f"{phase}_first_s"] = _median([p["first_s"] for p in mine])
            entry[f"{phase}_first_s_all"] = [round(p["first_s"], 3) for p in mine]
            entry[f"{phase}_phases"] = {
                name: _median([p["phases"][name] for p in mine if name in p["phases"]]) for name in PHASES
            }
            entry[f"{phase}_main_thread"] = {
                name: _median([p["main_thread"][name] for p in mine if name in p["main_thread"]])
                for name in COUNTERS
            }
    for phase in ("cold", "warm"):
        base = arms.get("stock", {}).get(f"{phase}_first_s")
        for entry in arms.values():
            mine = entry.get(f"{phase}_first_s")
            entry[f"{phase}_vs_stock"] = round(mine / base, 3) if mine and base else None
    return arms


def table(arms: dict[str, Any]) -> str:
    head = ["arm", "cold s", "x stock", "warm s", "x stock", "vb_call", "wrap_fake", "tracing"]
    head += ["main utime", "stime", "minflt"]
    rows = []
    for arm, e in arms.items():
        warm_phases, warm_main = e.get("warm_phases", {}), e.get("warm_main_thread", {})
        rows.append(
            [
                arm,
                str(e.get("cold_first_s", "-")),
                str(e.get("cold_vs_stock", "-")),
                str(e.get("warm_first_s", "-")),
                str(e.get("warm_vs_stock", "-")),
                str(warm_phases.get("variable_builder_call", "-")),
                str(warm_phases.get("wrap_to_fake_tensor_and_record", "-")),
                str(warm_phases.get("bytecode_tracing", "-")),
                str(warm_main.get("utime_s", "-")),
                str(warm_main.get("stime_s", "-")),
                str(warm_main.get("minflt", "-")),
            ]
        )
    return report.grid(head, rows)


def run_round(index: int, root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    processes: list[dict[str, Any]] = []
    cold_arms = [arm for arm in args.arms if arm not in HOME]
    shift = index % len(cold_arms)
    cold_order = [*cold_arms[shift:], *cold_arms[:shift]]
    dirs = {arm: root / f"round{index}" / arm for arm in cold_order}
    for arm in cold_order:
        shutil.rmtree(dirs[arm], ignore_errors=True)
        processes.append(brief(bench.run_child(arm, "cold", args.model, args.mode, dirs[arm], args)))
    warm_arms = list(args.arms)
    for repeat in range(args.warm_repeats):
        turn = (index + repeat) % len(warm_arms)
        for arm in [*warm_arms[turn:], *warm_arms[:turn]]:
            home = dirs[HOME.get(arm, arm)]  # its cold process's folder: the caches it left
            out = home / f"{arm}-{repeat}"
            result = bench.run_child(arm, "warm", args.model, args.mode, out, args, caches=home / "caches")
            processes.append(brief(result))
    return processes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", choices=[*bench.MODELS, "tiny"])
    parser.add_argument("--mode", default="default", choices=bench.MODES)
    parser.add_argument(
        "--arms",
        type=lambda v: [a.strip() for a in v.split(",") if a.strip()],
        default=list(DEFAULT_ARMS),
        help=f"comma-separated, from {', '.join(ARMS)}, stock among them (default: {','.join(DEFAULT_ARMS)})",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-repeats", type=int, default=3)
    parser.add_argument("--first-round", type=int, default=0, help="index of the first round (its arm order)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--arm-timeout", type=float, default=600.0)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown or "stock" not in args.arms:
        parser.error(f"--arms: {unknown or 'stock is missing'}; expected stock plus any of {', '.join(ARMS)}")
    # what bench/inductor.py's run_child reads: no runtime measurement, no fp64 reference
    args.attention, args.iters, args.warmup, args.blocks, args.block_iters = "flex", 0, 0, 0, 0
    args.kiln_sandbox, args.reference, args.smoke, args.aa = False, False, False, False
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (missing := bench.kiln_inductor_missing()) is not None:
        print(f"bench/inductor_warm.py: {missing}", file=sys.stderr)
        return 2
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="kiln-inductor-warm-"))
    result: dict[str, Any] = {"meta": bench.meta(args), "processes": [], "arms": {}}
    result["meta"]["rounds"], result["meta"]["warm_repeats"] = args.rounds, args.warm_repeats
    result["meta"]["bytecode_cache"] = os.environ.get(bench.BYTECODE_CACHE_VARIABLE) or None
    try:
        result["meta"]["bytecode_warm_up"] = bench.fill_bytecode_cache(root, args)
        for index in range(args.first_round, args.first_round + args.rounds):
            result["processes"] += run_round(index, root, args)
            result["arms"] = summarize(result["processes"])
            bench.write(result, args)  # after every round: a later failure keeps what was measured
    finally:
        if args.work_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result["arms"], indent=1))
    print("\n" + table(result["arms"]), file=sys.stderr)
    return 1 if any(p["error"] for p in result["processes"]) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Faults inside torch.compile, on stock Inductor and with ``triton_kiln.inductor``.

Run from the repository root on a GPU machine::

    python bench/inductor_faults.py --out /tmp/inductor_faults.json
    python bench/inductor_faults.py --cases template_compile_abort --out a.json     # one case

Each case compiles a small model with a real fault injected into Triton's compile of chosen
kernels (``bench/inductor_fault_hook/``: a Triton stage hook installed by ``sitecustomize`` in
every Python process of the run: the model's process, Inductor's compile workers, kiln's zygote
and workers), each arm in a fresh process (``bench/inductor_faults_child.py``) with fresh caches:

* ``template_compile_abort``: ``mm`` under max-autotune-no-cudagraphs; the compile of the mm
  template choice with ``--template-warps`` / ``--template-stages`` (2 / 1: ``BLOCK 32x32x16``
  alone in Inductor's mm configs) calls ``abort()``; arms ``stock``, ``kiln``;
* ``template_bench_ima``: the same choice compiles, and every thread of it stores to address 0:
  its benchmark is an illegal memory access; arms ``stock``, ``stock_subproc`` (Inductor's own
  ``autotune_in_subproc``), ``kiln_sandbox`` (``install(sandbox_benchmarks=True)``);
* ``codegen_user_autotune_abort``: a user-defined ``triton.autotune`` kernel (three configs)
  inside torch.compile (default mode); its ``num_warps=--user-warps`` (2) config aborts;
* ``runtime_autotune_ima``: the same kernel, whose ``num_warps=--user-warps`` config compiles and
  stores to address 0: Inductor's runtime autotune at the first call times it, an illegal
  memory access; arms ``stock``, ``kiln_sandbox`` (its runtime autotune in kiln's sandbox);
* ``codegen_reduction_abort``: a row sum under max-autotune-no-cudagraphs (a codegen reduction
  with several configs, then coordinate descent); its configs with ``--reduction-warps`` (8)
  abort, wherever they are compiled (Inductor's workers, its parent, kiln's pool).

Per case and arm the JSON row has ``compiled`` (the first call returned), ``output_right``
(against eager, which compiles no Triton), ``second_call_ok``, ``exit_code`` / ``signal``,
``error`` and the last stderr lines, the stage reached, and ``fault`` (how often the hook fired,
in the model's own process or another, on which kernels): a case whose fault never fired says
so (``fault_fired`` 0) and proves nothing. Budget (estimated, not measured): 5-8 minutes in all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inductor

HERE = Path(__file__).resolve().parent
CHILD = HERE / "inductor_faults_child.py"
HOOK_DIR = HERE / "inductor_fault_hook"
MAX_AUTOTUNE = "max-autotune-no-cudagraphs"


@dataclass(frozen=True)
class Case:
    model: str
    mode: str
    fault: str  # abort | ima
    names: tuple[str, ...]
    arms: tuple[str, ...]
    warps_option: str
    stages_option: str | None = None
    what: str = ""
    extra: dict[str, str] = field(default_factory=dict)


CASES = {
    "template_compile_abort": Case(
        "mm", MAX_AUTOTUNE, "abort", ("triton_mm", "triton_tem_fused_mm"), ("stock", "kiln"),
        "template_warps", "template_stages", "a max-autotune mm template choice aborts in compile",
    ),
    "template_bench_ima": Case(
        "mm", MAX_AUTOTUNE, "ima", ("triton_mm", "triton_tem_fused_mm"),
        ("stock", "stock_subproc", "kiln_sandbox"), "template_warps", "template_stages",
        "a max-autotune mm template choice hits an illegal memory access when benchmarked",
    ),
    "codegen_user_autotune_abort": Case(
        "user_autotune", "default", "abort", ("kiln_bench_crashy",), ("stock", "kiln"), "user_warps",
        what="one config of a user-defined triton.autotune kernel inside torch.compile aborts",
    ),
    "runtime_autotune_ima": Case(
        "user_autotune", "default", "ima", ("kiln_bench_crashy",), ("stock", "kiln_sandbox"), "user_warps",
        what="one config of a user-defined triton.autotune kernel hits an illegal memory access when the "
        "runtime autotune times it",
    ),
    "codegen_reduction_abort": Case(
        "reduction", MAX_AUTOTUNE, "abort", ("triton_red_fused", "triton_per_fused"), ("stock", "kiln"),
        "reduction_warps", what="the configs of a codegen reduction with one num_warps abort",
    ),
}  # fmt: skip


def case_env(case: Case, args: argparse.Namespace, caches: Path, log: Path) -> dict[str, str]:
    env = inductor.arm_env(caches)
    paths = [str(HOOK_DIR), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["BENCH_FAULT"] = case.fault
    env["BENCH_FAULT_NAMES"] = ",".join(case.names)
    env["BENCH_FAULT_WARPS"] = str(getattr(args, case.warps_option))
    env["BENCH_FAULT_STAGES"] = "" if case.stages_option is None else str(getattr(args, case.stages_option))
    env["BENCH_FAULT_LOG"] = str(log)
    return env


def fault_summary(log: Path, model_pid: int | None) -> dict[str, Any]:
    """How often the hook fired, in the model's process or in others, on which kernels."""
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    return {
        "fault_fired": len(lines),
        "in_model_process": sum(1 for x in lines if x["pid"] == model_pid),
        "in_other_processes": sum(1 for x in lines if x["pid"] != model_pid),
        "kernels": sorted({f"{x['kernel']} w{x['num_warps']} s{x['num_stages']}" for x in lines}),
    }


def run_arm(name: str, case: Case, arm: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    arm_dir = root / name / arm
    arm_dir.mkdir(parents=True, exist_ok=True)
    log = arm_dir / "fault.log"
    cmd = [sys.executable, str(CHILD), "--arm", arm, "--model", case.model, "--mode", case.mode]
    cmd += ["--dir", str(arm_dir)]
    print(f"[inductor_faults] {name}: {arm}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    with (arm_dir / "stderr.log").open("w") as err:
        try:
            proc = subprocess.run(
                cmd,
                check=False,
                env=case_env(case, args, arm_dir / "caches", log),
                stdout=err,
                stderr=subprocess.STDOUT,
                timeout=args.arm_timeout,
            )
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    result_file = arm_dir / "result.json"
    child: dict[str, Any] = json.loads(result_file.read_text()) if result_file.exists() else {}
    row: dict[str, Any] = {
        "case": name,
        "arm": arm,
        "compiled": bool(child.get("compiled")),
        "output_right": child.get("output", {}).get("right"),
        "second_call_ok": child.get("second_call", {}).get("right"),
        "exit_code": code,
        "signal": signal.Signals(-code).name if code is not None and code < 0 else None,
        "timed_out": code is None,
        "stage": child.get("stage"),
        "error": child.get("error"),
        "process_wall_s": time.perf_counter() - started,
        "first_s": child.get("first_s"),
        "sandbox": child.get("sandbox"),
        **fault_summary(log, child.get("pid")),
    }
    if row["error"] is None and code != 0:
        row["error"] = "timed out" if code is None else f"exit status {code} ({row['signal'] or 'no signal'})"
    row["ok"] = bool(row["compiled"] and row["output_right"] and row["second_call_ok"] and code == 0)
    if not row["ok"]:
        lines = (arm_dir / "stderr.log").read_text(errors="replace").splitlines()
        row["stderr_tail"] = lines[-30:]
    row["child"] = child
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ["case", "arm", "fault fired (model/other)", "compiled", "output", "2nd call", "exit", "error"]
    lines = []
    for r in rows:
        fired = f"{r['fault_fired']} ({r['in_model_process']}/{r['in_other_processes']})"
        exit_text = "timeout" if r["timed_out"] else (r["signal"] or str(r["exit_code"]))
        lines.append(
            [
                r["case"],
                r["arm"],
                fired,
                "yes" if r["compiled"] else "NO",
                {True: "right", False: "WRONG", None: "-"}[r["output_right"]],
                {True: "ok", False: "FAILED", None: "-"}[r["second_call_ok"]],
                exit_text,
                (r["error"] or "-").replace("\n", " ")[:90],
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *lines]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="all", help=f"comma-separated, or all: {', '.join(CASES)}")
    parser.add_argument("--arms", default=None, help="only these arms (default: each case's own)")
    parser.add_argument("--template-warps", type=int, default=2)
    parser.add_argument("--template-stages", type=int, default=1)
    parser.add_argument("--user-warps", type=int, default=2)
    parser.add_argument("--reduction-warps", type=int, default=8)
    parser.add_argument("--arm-timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, caches)")
    args = parser.parse_args(argv)
    args.cases = list(CASES) if args.cases == "all" else [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    args.arms = None if args.arms is None else [a for a in args.arms.split(",") if a]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not inductor._has_cuda():
        print("bench/inductor_faults.py needs a GPU", file=sys.stderr)
        return 2
    wanted = {arm for c in args.cases for arm in CASES[c].arms if args.arms is None or arm in args.arms}
    if (
        any(a.startswith("kiln") for a in wanted)
        and (missing := inductor.kiln_inductor_missing()) is not None
    ):
        hint = missing.replace("--arms stock", "--arms stock,stock_subproc")
        print(f"bench/inductor_faults.py: {hint}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="kiln-inductor-faults-"))
    result: dict[str, Any] = {
        "meta": {
            "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "cores": os.cpu_count(),
        },
        "cases": {
            name: {"model": c.model, "mode": c.mode, "fault": c.fault, "what": c.what}
            for name, c in CASES.items()
            if name in args.cases
        },
        "rows": [],
    }
    try:
        for name in args.cases:
            case = CASES[name]
            for arm in case.arms:
                if args.arms is None or arm in args.arms:
                    result["rows"].append(run_arm(name, case, arm, root, args))
                    if args.out is not None:
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        args.out.write_text(json.dumps(result, indent=2, default=repr) + "\n")
    finally:
        if args.keep:
            print(f"[inductor_faults] kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    brief = [{k: v for k, v in r.items() if k != "child"} for r in result["rows"]]
    print(json.dumps({"meta": result["meta"], "rows": brief}, indent=1, default=repr))
    print("\n" + table(result["rows"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""torch.compile on stock Inductor and with ``triton_kiln.inductor`` installed: first call, warm
process, runtime, outputs, and where the compile time goes.

Run from the repository root on a GPU machine (torch and torchvision installed; ``transformers``
and ``timm`` for the ``causal_lm`` and ``vit`` models, ``bench/inductor-models-requirements.txt``;
kiln is taken from this checkout's ``src/``)::

    python bench/inductor.py --out /tmp/inductor.json       # everything, 3 runs
    python bench/inductor.py --model causal_lm --mode max-autotune-no-cudagraphs --runs 1 \
        --work-dir W --out lm.json                                             # one model family
    python bench/inductor.py --model resnet50 --mode max-autotune-no-cudagraphs --runs 1 \
        --first-run 0 --work-dir W --out a.json                                # one run of one row
    python bench/inductor.py --merge a.json b.json c.json --out all.json       # medians over all runs
    python bench/inductor.py --split-only --model resnet50 --mode max-autotune-no-cudagraphs
    python bench/inductor.py --smoke --arms stock --out smoke.json             # any device, seconds

Each run of each arm is two fresh processes (``bench/inductor_child.py``) with fresh cache
directories of its own (``TORCHINDUCTOR_CACHE_DIR`` holds the FX graph, AOTAutograd and autotune
caches; ``TRITON_CACHE_DIR``; ``KILN_CACHE_DIR`` and ``KILN_TUNING_DB``; ``CUDA_CACHE_PATH``; remote
caches off): ``cold`` (compile from nothing), then ``warm`` (the same caches, a new process). Arms
alternate which goes first from run to run. Arms: ``stock`` and ``kiln``
(``triton_kiln.inductor.install()``; ``--kiln-sandbox`` passes ``sandbox_benchmarks=True``).
``--aa``: the control, an A/A run: the ``kiln`` arm's processes run stock Inductor too (kiln not
installed, fresh caches of their own), so every ``kiln/stock`` ratio of the run measures how much
two stock processes differ (``meta["aa"]`` is true; the table says so).

Rows (one per model and mode): ``model``, ``mode``, ``stock_first_s``, ``kiln_first_s`` (cold
process: ``torch.compile``, the first call and a CUDA sync, kiln's ``install()`` included; imports,
model building and one eager call before it excluded), ``stock_warm_s``, ``kiln_warm_s`` (the same
in the warm process), ``stock_runtime_ms``, ``kiln_runtime_ms`` (the paired runtime, see
:func:`run_paired`, where the run has one; else the cold process's median block of
``--block-iters`` calls; ``runtime_paired_ratio``: kiln's block over stock's, median of all
rounds), ``outputs_match`` (every run's kiln
output against the same run's stock output by ``torch._dynamo.utils.same`` with the float64 eager
output as reference, Inductor's own accuracy rule; ``None`` when an arm is missing), medians over
runs; ``stock_split`` / ``kiln_split`` (the cold processes' Inductor split, medians over runs:
``dynamo_timed`` phases, ``calculate_time_spent``, counters, ``torch._inductor.metrics``);
``stock_limit_s`` / ``kiln_limit_s`` (the cold process's limit, median over runs: the compile
work, the CPU seconds of the processes below it and of its threads other than the main one,
over its cores, plus the wall time of Inductor's GPU benchmarks in its process (not those of
kiln's sandbox under ``--kiln-sandbox``); the main thread's lowering is outside it, and each
cold result's ``first_call_work`` says how much it was) and ``stock_first_over_limit`` /
``kiln_first_over_limit``;
``<field>_runs`` (the per-run lists), ``ratios``, ``compare`` (per run), ``errors`` and ``runs``
(everything each process reported).

Models (``bench/inductor_models.py``, which says why these sizes): ``resnet50`` (torchvision,
batch 32), ``block`` (one transformer block, batch 8), ``causal_lm`` (``transformers``' Llama with
TinyLlama-1.1B's shapes and 4 layers, batch 2 of 512 tokens, logits) and ``vit`` (``timm``'s
ViT-B/16, batch 32), all bf16 on the GPU; ``tiny`` for ``--smoke``.

Budget (H100, earlier runs' figures, not measured here): ResNet-50 max-autotune-no-cudagraphs
~280 s cold + ~11 s warm per stock run; default mode ~19 s + ~4 s. ``causal_lm`` and ``vit`` in
max-autotune, an estimate from ResNet-50's (24 template autotunes, ~11 s each in stock, ~3 s in
kiln): 5 and 6 distinct shapes, ~75-90 s cold in stock and ~30-40 s in kiln, ~250 s per run of both
arms' cold and warm processes with their start-up. A device command may take
10 minutes: run one model and mode with ``--runs 1`` per command (``--first-run`` numbers the run,
``--work-dir`` keeps the outputs so ``--merge`` can compare arms run in different commands;
where one arm's cold process alone takes most of a command, as stock's max-autotune does, run
``--arms stock --work-dir W``, then ``--arms kiln --work-dir W --pair-with-kept``: the second
command pairs its arm with the kept one, the same run index in both; its JSON holds the whole run,
so merge that one, not the first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inductor_report as report
from inductor_child import PAIRED_PREFIX

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
CHILD = HERE / "inductor_child.py"
ARMS = ("stock", "kiln")
MODELS = ("resnet50", "block", "causal_lm", "vit")
MODES = ("max-autotune-no-cudagraphs", "default")


def kiln_inductor_missing(src: Path = SRC) -> str | None:
    """Why the kiln arm cannot run from ``src`` (no ``triton_kiln/inductor``), or None."""
    package = src / "triton_kiln"
    if (package / "inductor" / "__init__.py").exists() or (package / "inductor.py").exists():
        return None
    return (
        f"the kiln arm needs triton_kiln.inductor, and {package} has none: run from a "
        "checkout that has it, or pass --arms stock"
    )


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


BYTECODE_CACHE_VARIABLE = "BENCH_BYTECODE_CACHE"
"""Set to a folder: every arm's processes keep Python bytecode there (``PYTHONPYCACHEPREFIX``, and
``PYTHONDONTWRITEBYTECODE`` unset), as on an installation with bytecode caches. The GPU machine's
image has none and forbids writing them, so each process there compiles torch's modules from
source (~10 s of CPU for ``import torch._inductor``), and so does each process a process starts:
Inductor's compile workers, kiln's sidecar."""


def arm_env(caches: Path) -> dict[str, str]:
    env = dict(os.environ)
    bytecode = env.get(BYTECODE_CACHE_VARIABLE)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = bytecode
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("KILN_PROGRESS", "0")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(caches / "inductor")
    env["TRITON_CACHE_DIR"] = str(caches / "triton")
    env["KILN_CACHE_DIR"] = str(caches / "kiln")
    env["KILN_TUNING_DB"] = str(caches / "kiln" / "tuning.sqlite3")
    env["CUDA_CACHE_PATH"] = str(caches / "cuda")
    for remote in ("FX_GRAPH", "AUTOTUNE", "BUNDLED_AUTOTUNE"):
        env[f"TORCHINDUCTOR_{remote}_REMOTE_CACHE"] = "0"
    return env


def child_command(
    arm: str, phase: str, model: str, mode: str, out_dir: Path, args: argparse.Namespace, *, iters: int
) -> list[str]:
    """``inductor_child.py``'s command line for one arm and phase, writing ``out_dir``."""
    child_arm = "stock" if arm == "kiln" and args.aa else arm  # the A/A control: stock twice
    cmd = [sys.executable, str(CHILD), "--arm", child_arm, "--model", model, "--mode", mode, "--phase", phase]
    cmd += ["--dir", str(out_dir), "--device", args.device, "--attention", args.attention]
    cmd += ["--iters", str(iters), "--warmup", str(args.warmup)]
    cmd += ["--blocks", str(args.blocks), "--block-iters", str(args.block_iters)]
    if args.batch is not None:
        cmd += ["--batch", str(args.batch)]
    if child_arm == "kiln" and args.kiln_sandbox:
        cmd.append("--kiln-sandbox")
    return cmd


def run_child(
    arm: str,
    phase: str,
    model: str,
    mode: str,
    arm_dir: Path,
    args: argparse.Namespace,
    caches: Path | None = None,
) -> dict[str, Any]:
    """One process of one arm and phase, writing ``arm_dir/phase/``, on ``caches`` (default
    ``arm_dir/caches``, which the arm's cold and warm processes share)."""
    out_dir = arm_dir / phase
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = child_command(arm, phase, model, mode, out_dir, args, iters=args.iters)
    if phase == "cold" and arm == "stock" and getattr(args, "reference", True):
        cmd.append("--reference")
    print(f"[inductor] {model} {mode}: {arm} {phase}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    log = out_dir / "stderr.log"
    with log.open("w") as err:
        try:
            proc = subprocess.run(
                cmd,
                check=False,
                env=arm_env(caches or arm_dir / "caches"),
                stdout=err,
                stderr=subprocess.STDOUT,
                timeout=args.arm_timeout,
            )
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    result_file = out_dir / "result.json"
    result: dict[str, Any] = json.loads(result_file.read_text()) if result_file.exists() else {"arm": arm}
    result["process_wall_s"] = time.perf_counter() - started
    result["exit_code"] = code
    result["dir"] = str(out_dir)
    if code is None:
        result.setdefault("error", f"timed out after {args.arm_timeout} s (stage {result.get('stage')})")
    elif code < 0:
        result.setdefault("error", f"killed by {signal.Signals(-code).name} (stage {result.get('stage')})")
    elif code != 0:
        result.setdefault("error", f"exit code {code} without a result")
    if "error" in result:
        result["stderr_tail"] = log.read_text(errors="replace").splitlines()[-25:]
    return result


def fill_bytecode_cache(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """With ``BENCH_BYTECODE_CACHE`` set: a cold process of each arm on the tiny model first
    (not measured), so every module either arm imports (kiln's sidecar's too) is in the cache
    before the measured processes start. Returns what those processes reported (brief)."""
    if not os.environ.get(BYTECODE_CACHE_VARIABLE):
        return []
    warmed = []
    for arm in ("stock", "kiln"):
        result = run_child(arm, "cold", "tiny", "default", root / "bytecode-warm-up" / arm, args)
        warmed.append({"arm": arm, "first_s": result.get("first_s"), "error": result.get("error")})
    return warmed


def _paired_cpu() -> int | None:
    """The CPU both arms' paired processes hold their main thread on: the highest one this process
    may use (None where affinity cannot be set)."""
    if not hasattr(os, "sched_getaffinity") or (os.cpu_count() or 1) < 2:
        return None
    return max(os.sched_getaffinity(0))


class PairedArm:
    """One arm's ``paired`` process (``inductor_child.serve_paired``): started on the arm's warm
    caches, asked for one block of calls at a time over its stdin, answering on its stdout."""

    def __init__(self, arm: str, model: str, mode: str, arm_dir: Path, args: argparse.Namespace) -> None:
        self.arm = arm
        self.dir = arm_dir / "paired"
        self.dir.mkdir(parents=True, exist_ok=True)
        blocks = argparse.Namespace(**{**vars(args), "block_iters": args.paired_block_iters})
        cmd = child_command(arm, "paired", model, mode, self.dir, blocks, iters=0)
        cpu = _paired_cpu()
        if cpu is not None:
            cmd += ["--pin-cpu", str(cpu)]
        self.log = (self.dir / "stderr.log").open("w")
        self.other_stdout: list[str] = []
        self.proc = subprocess.Popen(
            cmd,
            env=arm_env(arm_dir / "caches"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def read(self) -> dict[str, Any]:
        """The next protocol message; raises ``RuntimeError`` if the process ends first."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PAIRED_PREFIX):
                message: dict[str, Any] = json.loads(line[len(PAIRED_PREFIX) :])
                return message
            self.other_stdout.append(line.rstrip()[:200])
        raise RuntimeError(f"the {self.arm} paired process ended (exit code {self.proc.wait()})")

    def ask(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float) -> dict[str, Any]:
        """Ends the process (``quit``, then a kill past ``timeout_s``); what it reported."""
        try:
            if self.proc.poll() is None:
                self.ask("quit")
            self.proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        result_file = self.dir / "result.json"
        result: dict[str, Any] = json.loads(result_file.read_text()) if result_file.exists() else {}
        result["exit_code"] = self.proc.returncode
        if self.other_stdout:
            result["other_stdout"] = self.other_stdout[-10:]
        return result


def run_paired(run_dir: Path, model: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """The paired runtime of one run: one ``paired`` process per arm on the arm's warm caches
    (the same compiled model its cold and warm processes ran), both main threads on one CPU,
    asked for a block of ``--paired-block-iters`` calls in turn for ``--paired-rounds`` rounds (the
    order flips each round: stock, kiln, kiln, stock...). Both arms' blocks come from one core
    in one stretch of time, so the host's drift cancels out of the ratio; per round, kiln's
    block over stock's. Short blocks in many rounds: on a noisy host (ResNet-50's blocks 2.4-7.7
    ms in one run of 20 rounds of 50 calls) the pairs stay close in time. Returns per arm the
    blocks, their median, and what the process reported."""
    record: dict[str, Any] = {"rounds": args.paired_rounds, "block_iters": args.paired_block_iters}
    record["cpu"] = _paired_cpu()
    print(f"[inductor] {model} {mode}: paired runtime", file=sys.stderr, flush=True)
    arms = {arm: PairedArm(arm, model, mode, run_dir / arm, args) for arm in ("stock", "kiln")}
    blocks: dict[str, list[float]] = {arm: [] for arm in arms}
    try:
        for paired in arms.values():
            paired.read()  # ready: compiled, pools quiet, warmed up
        for index in range(args.paired_rounds):
            order = ("stock", "kiln") if index % 2 == 0 else ("kiln", "stock")
            for arm in order:
                arms[arm].ask("block")
                blocks[arm].append(float(arms[arm].read()["block_ms"]))
    except (RuntimeError, OSError, KeyError, ValueError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for arm, paired in arms.items():
            record[arm] = paired.finish(timeout_s=60.0)
    for arm in arms:
        record[f"{arm}_blocks_ms"] = blocks[arm]
        record[f"{arm}_ms"] = statistics.median(blocks[arm]) if blocks[arm] else None
    # a round that failed leaves stock one block ahead: its last block has no pair
    ratios = [k / s for s, k in zip(blocks["stock"], blocks["kiln"], strict=False) if s > 0]
    record["kiln_over_stock_per_round"] = ratios
    record["kiln_over_stock"] = statistics.median(ratios) if ratios else None
    return record


def run_once(model: str, mode: str, index: int, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run: each arm's cold then warm process (arms alternate which goes first), then, with
    both arms and ``--paired-rounds`` > 0, the paired runtime (:func:`run_paired`)."""
    order = list(args.arms) if index % 2 == 0 else list(reversed(args.arms))
    record: dict[str, Any] = {"run": index, "order": order}
    run_dir = root / f"{model}-{mode}" / f"run{index}"
    if args.pair_with_kept:  # the other arm's cold process of this run, from an earlier command
        for arm in ("stock", "kiln"):
            kept = run_dir / arm / "cold" / "result.json"
            if arm not in order and kept.exists():
                cold = {**json.loads(kept.read_text()), "dir": str(kept.parent), "kept": True}
                record[arm] = {"cold": cold}
    for arm in order:
        arm_dir = run_dir / arm
        if arm_dir.exists():
            shutil.rmtree(arm_dir)  # fresh caches, whatever a kept work dir held
        cold = run_child(arm, "cold", model, mode, arm_dir, args)
        phases = {"cold": cold}
        if not args.no_warm and "error" not in cold:
            phases["warm"] = run_child(arm, "warm", model, mode, arm_dir, args)
        record[arm] = phases
    record["compare"] = report.compare_run(record)
    cold_ok = all("error" not in record.get(arm, {}).get("cold", {"error": ""}) for arm in ("stock", "kiln"))
    if args.paired_rounds > 0 and cold_ok and args.iters > 0:
        record["paired"] = run_paired(run_dir, model, mode, args)
    return record


def meta(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "cores": len(os.sched_getaffinity(0)),  # the cores this run may use (taskset)
        "iters": args.iters,
        "blocks": args.blocks,
        "block_iters": args.block_iters,
        "loadavg": list(os.getloadavg()),
        "smoke": args.smoke,
        "kiln_sandbox": args.kiln_sandbox,
        "aa": args.aa,
    }
    try:
        from importlib.metadata import version

        for package in ("torch", "torchvision", "triton", "transformers", "timm"):
            try:
                data[package] = version(package)
            except Exception:  # not installed: only its models fail
                data[package] = None
        import torch

        data["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # a missing package is reported, not fatal
        data["meta_error"] = f"{type(exc).__name__}: {exc}"
    return data


def write(result: dict[str, Any], args: argparse.Namespace) -> None:
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=repr) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all", choices=[*MODELS, "tiny", "all"])
    parser.add_argument("--mode", default="all", choices=[*MODES, "all"])
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of stock,kiln")
    parser.add_argument("--runs", type=int, default=None, help="default 3 (--split-only: 1)")
    parser.add_argument("--first-run", type=int, default=0, help="index of the first run (for --merge)")
    parser.add_argument("--iters", type=int, default=100, help="timed calls per runtime measurement")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=20, help="blocks of back-to-back calls (runtime_ms)")
    parser.add_argument("--block-iters", type=int, default=50, help="calls per block (the cold processes')")
    parser.add_argument(
        "--paired-block-iters", type=int, default=10, help="calls per block of the paired runtime"
    )
    parser.add_argument(
        "--paired-rounds", type=int, default=200, help="paired runtime: blocks per arm, in turn (0: none)"
    )
    parser.add_argument(
        "--batch", type=int, default=None, help="default: resnet50 32, block 8, causal_lm 2, vit 32"
    )
    parser.add_argument("--attention", choices=("flex", "manual"), default="flex", help="the block's")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--kiln-sandbox", action="store_true", help="install(sandbox_benchmarks=True)")
    parser.add_argument("--no-warm", action="store_true", help="cold processes only")
    parser.add_argument("--aa", action="store_true", help="A/A control: the kiln arm runs stock Inductor too")
    parser.add_argument(
        "--pair-with-kept",
        action="store_true",
        help="with --work-dir and one arm: take the other arm's cold process of the same run from the "
        "work dir (an earlier command), so the run still gets its paired runtime and output check",
    )
    parser.add_argument("--arm-timeout", type=float, default=900.0, help="seconds before a process is killed")
    parser.add_argument("--work-dir", type=Path, default=None, help="kept: caches, outputs, logs")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    parser.add_argument("--split-only", action="store_true", help="stock cold processes; print the split")
    parser.add_argument(
        "--smoke", action="store_true", help="the tiny model, default mode, 1 run, any device"
    )
    parser.add_argument("--merge", nargs="+", type=Path, default=None, help="join runs of JSON files")
    args = parser.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"unknown arms in {arms}; known: {', '.join(ARMS)}")
    args.arms = [a for a in ARMS if a in arms]
    if args.pair_with_kept and (args.work_dir is None or len(args.arms) != 1):
        parser.error("--pair-with-kept needs --work-dir and exactly one arm in --arms")
    if args.split_only:
        args.arms, args.no_warm = ["stock"], True
    if args.runs is None:
        args.runs = 1 if args.split_only else 3
    if args.smoke:
        args.models, args.modes = ["tiny"], ["default"]
        args.runs, args.iters, args.warmup = 1, min(args.iters, 5), min(args.warmup, 2)
        args.blocks, args.block_iters = min(args.blocks, 3), min(args.block_iters, 3)
        args.paired_rounds = min(args.paired_rounds, 4)
        args.paired_block_iters = min(args.paired_block_iters, 3)
    else:
        args.models = list(MODELS) if args.model == "all" else [args.model]
        args.modes = list(MODES) if args.mode == "all" else [args.mode]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        parts = [json.loads(p.read_text()) for p in args.merge]
        result = report.merge(parts)
        write(result, args)
        print(report.table(result["rows"]), file=sys.stderr)
        return 0
    if not args.smoke and args.device == "auto" and not _has_cuda():
        print("bench/inductor.py needs a GPU (or --smoke, or --device cpu)", file=sys.stderr)
        return 2
    if "kiln" in args.arms and not args.aa and (missing := kiln_inductor_missing()) is not None:
        print(f"bench/inductor.py: {missing}", file=sys.stderr)
        return 2
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="kiln-inductor-bench-"))
    result: dict[str, Any] = {"meta": meta(args), "rows": []}
    result["meta"]["bytecode_cache"] = os.environ.get(BYTECODE_CACHE_VARIABLE) or None
    try:
        result["meta"]["bytecode_warm_up"] = fill_bytecode_cache(root, args)
        for model in args.models:
            for mode in args.modes:
                runs: list[dict[str, Any]] = []
                result["rows"].append(report.summarize(model, mode, runs))
                for index in range(args.first_run, args.first_run + args.runs):
                    runs.append(run_once(model, mode, index, root, args))
                    result["rows"][-1] = report.summarize(model, mode, runs)
                    write(result, args)  # after every run: a later failure keeps what was measured
    finally:
        if args.work_dir is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"[inductor] kept {root}", file=sys.stderr)
    write(result, args)
    brief = [
        {k: v for k, v in row.items() if k not in ("runs", "stock_split", "kiln_split")}
        for row in result["rows"]
    ]
    print(json.dumps({"meta": result["meta"], "rows": brief}, indent=1, default=repr))
    if args.split_only:
        for row in result["rows"]:
            print(report.split_table(row, "stock"), file=sys.stderr)
    if args.aa:
        print("\nA/A control (--aa): the kiln columns are a second stock Inductor process", file=sys.stderr)
    print("\n" + report.table(result["rows"]), file=sys.stderr)
    failed = any(row.get("errors") for row in result["rows"])
    return 1 if failed and args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())

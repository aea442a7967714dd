"""Real library ops (Liger-Kernel, FLA, FlagGems, torchao, GemLite, rotary-embedding-torch) on
``triton.autotune`` and on kiln.

Run from the repository root on a machine with a GPU (the libraries installed, or their wheels
unpacked on ``PYTHONPATH``; kiln is taken from this checkout's ``src/``)::

    python bench/realworld.py --out /tmp/realworld.json --md /tmp/realworld.md
    python bench/realworld.py --ops liger_moe_fwd,fla_chunk_gla_fwd --out a.json   # a subset
    python bench/realworld.py --merge a.json b.json --out all.json --md all.md      # join runs
    python bench/realworld.py --dry-run          # no GPU: routing, imports, orchestration only
    python bench/realworld.py --rounds 3 --arms kiln_baseline,kiln --baseline-src B --out c.json
                                                 # medians of 3 rounds (a change against its base)

For each op (``bench/realworld_ops.py``), each arm runs in a fresh process
(``bench/realworld_child.py``) with fresh cache directories:

* ``triton``: stock ``triton.autotune`` (its own ``TRITON_CACHE_DIR``);
* ``triton_parallel``: stock ``triton.autotune`` with each tuning's configs compiled in a process
  pool (one worker per usable core) before Triton benchmarks them, so Triton's own compiles hit
  the cache: the approach of Triton's PR #11847 (``bench/parallel_precompile.py``); its own
  ``TRITON_CACHE_DIR``, kiln's ``src/`` off its path and ``triton_kiln`` refused at import;
* ``kiln``: ``triton.autotune`` routed to kiln before the library is imported (``kiln.install()``
  when kiln has it, else by assignment; the JSON says which), fresh ``TRITON_CACHE_DIR`` and
  ``KILN_CACHE_DIR`` (tuning database inside);
* ``kiln_second``: a second kiln process keeping the ``kiln`` arm's ``KILN_CACHE_DIR`` and
  database (fresh ``TRITON_CACHE_DIR``): what a user's next process pays;
* ``kiln_record``: a fresh ``KILN_CACHE_DIR`` holding only the ``kiln`` arm's program record
  (``programs/``) and a fresh ``TRITON_CACHE_DIR``: the next run of the program on a machine
  whose caches are gone, where ``install()`` starts the recorded compiles before the op asks for
  them (``kiln_record_first_s``, ``kiln_first_over_record``; ``kiln_record_replay``: what the
  replay started and skipped, how many of its compiles were done when the first call began, and
  the seconds from ``install()`` to the replay's last submission and to the first call);
* ``kiln_forced``: as ``kiln_second``, with every autotuned kernel's configs cut down to the ones
  Triton chose (the ``triton`` arm's ``choices.json``), so ``kiln_op_ms_triton_configs`` compares
  launch paths apart from config choice;
* ``kiln_baseline`` (with ``--baseline-src DIR``): the ``kiln`` arm with kiln taken from another
  checkout's ``src/`` (an earlier commit: ``git worktree add /tmp/base <commit>``), on caches of its
  own, run just before the ``kiln`` arm: a change's first call against the code before it, in one run
  (``kiln_baseline_first_s``, ``kiln_first_over_baseline``);
* ``harness``: after the others, one process with stock ``triton.autotune`` that times the
  ``kiln`` and ``triton`` arms' chosen configs alternately with ``triton.testing.do_bench``
  (``bench/choice_harness.py``): whether kiln chose as well as Triton, in one harness.

Per op, the JSON has ``op``, ``configs`` (sum over the autotuned kernels the op launched),
``triton_first_s``, ``triton_parallel_first_s``, ``kiln_first_s``, ``kiln_second_first_s`` (wall
seconds of the first call, synchronized, tuning included; process start and imports excluded),
``triton_parallel_over_kiln`` (``triton_parallel_first_s / kiln_first_s``: above 1, kiln's first
call is the faster; with the arm, ``triton_parallel_op_ms``, ``triton_parallel_outputs_match`` and
``triton_parallel_precompile``: the pool's workers, jobs, failures and wall time), ``triton_op_ms``,
``kiln_op_ms``, ``kiln_op_ms_triton_configs`` (``triton.testing.do_bench`` medians after tuning,
same inputs, median over ``--repeats``), ``kiln_choice_ms_triton_harness`` and
``triton_choice_ms_triton_harness`` (the ``harness`` arm, in one process: per autotuned kernel
and tuning key the op reaches, both arms' chosen configs timed by the tuner's own
``Autotuner._bench`` alternately over >= 5 rounds, medians summed over the launches; the rows in
``choice_kernel_rows``, also as a markdown table under ``--md``; the same config chosen by both
is timed once and counts the same for both) and their ratio, the op-level timings
(``*_op_level``: the whole op under ``do_bench``, host overhead included), ``shape`` (the op's
sizes), ``limit_s`` (the least a tuning could
take here: per kiln tuning run the longest compile or the sum of compiles over the cores,
whichever is larger, plus the final round; summed) and ``kiln_first_over_limit``,
``outputs_match`` (kiln's outputs against Triton's, with
tolerances by dtype), ``kiln_statuses`` (config status -> count over kiln's tuning runs),
``kiln_first_split`` (kiln's first call split: its tuning runs, the op's plain
``@triton.jit`` compiles, the rest; :func:`first_call_split`), ``kiln_time_split`` (each kiln
tuning run's report: each config's result and the run's time split; a library's own search
through kiln's ``_bench``, FlagGems' ``LibTuner``, has a report of the same shape marked
``"search": "library"``, with no split, and its limit counts the compiles only: the library
times its configs itself, one by one), ``kiln_left_on_triton`` (kernels the op launched
through Triton's autotuner in the kiln arm, with the reason), ``errors`` (arm -> error; a
failed arm is data) and ``arms`` (everything each arm reported). Budget (estimated
from earlier H100 runs, not measured): Triton's first calls alone are ~100 s for the MoE and
~95 s for ``chunk_gla``, and until kiln routes FLA's ``CachedAutotuner`` every kiln arm of
``chunk_gla`` pays most of that too; where a command may take at most 10 minutes, run the Liger
ops, ``fla_chunk_gla_fwd`` and the other FLA op(s) as three commands (``--ops``), then
``--merge``.

The ops not in the default set, with the four arms a row needs (``--arms
triton,triton_parallel,kiln,harness``; the others add a process each). Budgets are ESTIMATED,
not measured: from the configs each op has and earlier H100 runs of ops of the same size
(process start and imports ~10-20 s an arm, Triton's serial first call ~1 s a config for FLA's
kernels, less for a matmul's):

* ``fla_chunk_dplr_fwd`` (138 configs over 6 kernels; more on a GPU, see ``realworld_ops.py``):
  ~5-6.5 min, Triton's first call ~2.5 min (``--arm-timeout 330``);
* ``flaggems_mm_lmhead`` (22) and ``torchao_scaled_int8_mm`` (27): ~2-3 min each;
* ``gemlite_a16w8_gemm`` (17 after pruning): ~2-3 min;
* ``fla_chunk_gdr_fwd`` (26 over 5 kernels): ~2-3 min;
* ``rotary_flash_attn_fwdbwd`` (4: 2 forward + 2 backward): ~1-1.5 min.

FlagGems keeps its own tuning database under ``FLAGGEMS_CACHE_DIR``, fresh per arm here.
Where a command may take at most 10 minutes, run them as four commands of at most 590 s each
(``.ci/gpu/gpu_session.sh``'s phases ``realworld-corpus``, ``realworld-corpus-mm``,
``realworld-corpus-dplr`` and ``realworld-corpus-gdr``), then join them::

    A="--arms triton,triton_parallel,kiln,harness"
    python bench/realworld.py $A --ops rotary_flash_attn_fwdbwd,gemlite_a16w8_gemm --out c1.json
    python bench/realworld.py $A --ops flaggems_mm_lmhead,torchao_scaled_int8_mm --out c2.json
    python bench/realworld.py $A --ops fla_chunk_dplr_fwd --arm-timeout 330 --out c3.json
    python bench/realworld.py $A --ops fla_chunk_gdr_fwd --out c4.json
    python bench/realworld.py --merge c1.json c2.json c3.json c4.json --out corpus.json --md corpus.md

Every row has ``shape``, ``triton_first_s``, ``triton_parallel_first_s``, ``kiln_first_s``,
``limit_s``, ``kiln_choice_ms_triton_harness``, ``triton_choice_ms_triton_harness`` and
``kiln_time_split`` when those four arms ran (``tests/test_bench_realworld.py`` checks each op).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import choice_harness
import machine_state
import realworld_ops

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
CHILD = HERE / "realworld_child.py"
ARMS = (
    "triton",
    "triton_parallel",
    "kiln_baseline",
    "kiln",
    "kiln_second",
    "kiln_record",
    "kiln_forced",
    "harness",
)
BASELINE = "kiln_baseline"  # the kiln arm on another checkout's src/ (--baseline-src)
RECORD = "kiln_record"  # fresh caches but the kiln arm's program record (a fresh machine's second run)
PARALLEL = "triton_parallel"  # stock triton.autotune, each tuning's configs compiled in a pool first
PACKAGES = (
    "torch",
    "triton",
    "liger-kernel",
    "fla-core",
    "flag-gems",
    "torchao",
    "sqlalchemy",
    "gemlite",
    "rotary-embedding-torch",
)
TOLERANCES = {"16bit": (2e-2, 2e-2), "other": (1e-2, 1e-3)}  # (rtol of max |ref|, atol)


def arm_env(arm: str, root: Path, op: str = "", dry_run: bool = False, src: Path = SRC) -> dict[str, str]:
    env = dict(os.environ)
    spec = realworld_ops.OPS.get(op)
    if spec is not None:
        env.update(spec.env)
        if dry_run:
            env.update(spec.dry_run_env)
    # FlagGems keeps its own tuning database (best config per key, and every config's timings)
    # under FLAGGEMS_CACHE_DIR (default ~/.flaggems): fresh per arm, like TRITON_CACHE_DIR.
    env["FLAGGEMS_CACHE_DIR"] = str(root / f"flaggems-cache-{arm}")
    env["PYTHONUNBUFFERED"] = "1"
    env["TRITON_CACHE_DIR"] = str(root / f"triton-cache-{arm}")
    if arm == PARALLEL:
        # stock Triton only: kiln's src/ is left off the path and its settings are dropped (the
        # child also refuses an import of kiln, which an editable install would still find)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != src]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        for name in [name for name in env if name.startswith("KILN_")]:
            del env[name]
        return env
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("KILN_PROGRESS", "0")
    caches = {"triton": "kiln-cache-triton-arm", BASELINE: "kiln-cache-baseline", RECORD: "kiln-cache-record"}
    kiln_dir = root / caches.get(arm, "kiln-cache")
    env["KILN_CACHE_DIR"] = str(kiln_dir)
    env["KILN_TUNING_DB"] = str(kiln_dir / "tuning.sqlite3")
    return env


def run_arm(op: str, arm: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    arm_dir = root / arm
    arm_dir.mkdir(parents=True, exist_ok=True)
    src = SRC
    if arm == BASELINE:
        if args.baseline_src is None:
            return {"arm": arm, "error": "no --baseline-src given"}
        src = args.baseline_src
    child_arm = "kiln" if arm == BASELINE else arm
    if arm == RECORD and not args.dry_run:
        recorded = root / "kiln-cache" / "programs"
        if not any(recorded.glob("*.json")):
            return {
                "arm": arm,
                "error": "no program record from the kiln arm (it failed, did not run, or kept none)",
            }
        shutil.copytree(recorded, root / "kiln-cache-record" / "programs")  # the record, nothing else
    cmd = [sys.executable, str(CHILD), "--arm", child_arm, "--op", op, "--dir", str(arm_dir)]
    cmd += ["--repeats", str(args.repeats)]
    if arm in ("kiln_forced", "harness") and not args.dry_run:
        choices = root / "triton" / "choices.json"
        if not choices.exists():
            return {"arm": arm, "error": "no choices from the triton arm (it failed or did not run)"}
        cmd += ["--choices", str(choices)]
    if arm == "harness" and not args.dry_run:
        kiln_choices = root / "kiln" / "choices.json"
        if not kiln_choices.exists():
            return {"arm": arm, "error": "no choices from the kiln arm (it failed or did not run)"}
        cmd += ["--kiln-choices", str(kiln_choices)]
    if args.strict:
        cmd.append("--strict")
    if args.dry_run:
        cmd.append("--dry-run")
        if args.inventory:
            cmd.append("--inventory")
    print(f"[realworld] {op}: {arm}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    log = arm_dir / "stderr.log"
    with log.open("w") as err:
        try:
            proc = subprocess.run(
                cmd,
                check=False,
                env=arm_env(arm, root, op, args.dry_run, src),
                stdout=err,
                stderr=subprocess.STDOUT,
                timeout=args.arm_timeout,
            )
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    wall = time.perf_counter() - started
    result_file = arm_dir / "result.json"
    result: dict[str, Any] = json.loads(result_file.read_text()) if result_file.exists() else {"arm": arm}
    result["process_wall_s"] = wall
    if code is None:
        result.setdefault("error", f"timed out after {args.arm_timeout} s (stage {result.get('stage')})")
        result["timed_out"] = True
    elif code != 0:
        result.setdefault("error", f"exit code {code} without a result")
    if "error" in result:
        lines = log.read_text(errors="replace").splitlines()
        result["stderr_tail"] = lines[-25:]
    return result


def compare_outputs(ref_file: Path, got_file: Path) -> dict[str, Any]:
    """Outputs of two arms, tensor by tensor: ok if max |diff| <= atol + rtol * max |ref|."""
    if not ref_file.exists() or not got_file.exists():
        return {"match": None, "detail": "an arm wrote no outputs"}
    import torch

    ref = torch.load(ref_file)
    got = torch.load(got_file)
    detail: dict[str, Any] = {}
    match = set(ref) == set(got)
    for name in sorted(set(ref) & set(got)):
        a, b = ref[name].float(), got[name].float()
        if a.shape != b.shape:
            detail[name] = f"shape {tuple(b.shape)} != {tuple(a.shape)}"
            match = False
            continue
        rtol, atol = TOLERANCES["16bit" if ref[name].element_size() == 2 else "other"]
        nan_same = bool(torch.equal(torch.isnan(a), torch.isnan(b)))
        a, b = torch.nan_to_num(a), torch.nan_to_num(b)
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        scale = float(a.abs().max()) if a.numel() else 0.0
        ok = nan_same and diff <= atol + rtol * scale
        detail[name] = {"max_abs_diff": diff, "max_abs_ref": scale, "nan_pattern_same": nan_same, "ok": ok}
        match = match and ok
    return {"match": match, "detail": detail}


def run_op(op: str, args: argparse.Namespace) -> dict[str, Any]:
    """The op's row: one round of its arms, or with ``--rounds N`` the medians of N (see
    :func:`combine_rounds`)."""
    rows = [run_round(op, args, index) for index in range(args.rounds)]
    return rows[0] if len(rows) == 1 else combine_rounds(rows)


def run_round(op: str, args: argparse.Namespace, index: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"kiln-realworld-{op}-"))
    arms = {arm: run_arm(op, arm, root, args) for arm in round_arms(args.arms, index)}
    try:
        return summarize(op, arms, root)
    finally:
        if args.keep:
            print(f"[realworld] {op}: kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def round_arms(arms: list[str], index: int) -> list[str]:
    """The arms in round ``index``'s order: the baseline arm runs just before the kiln arm in even
    rounds and just after it in odd ones, so neither always meets the machine in the same state."""
    order = list(arms)
    if index % 2 == 1 and BASELINE in order and "kiln" in order:
        i, j = order.index(BASELINE), order.index("kiln")
        order[i], order[j] = order[j], order[i]
    return order


def combine_rounds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from several rounds of an op: every first call (``*_first_s``) and every ratio of
    two (``*_over_*``) is the median over the rounds, each ratio taken within its round (paired),
    with the rounds' values beside it as ``<field>_rounds``; the other fields are the first
    round's, and ``rounds`` holds every round's row."""
    row = dict(rows[0])
    for name, value in rows[0].items():
        if not (name.endswith("_first_s") or "_over_" in name) or isinstance(value, dict):
            continue
        values = [r.get(name) for r in rows]
        measured = [v for v in values if isinstance(v, float)]
        row[name] = statistics.median(measured) if measured else None
        row[f"{name}_rounds"] = values
    row["rounds"] = [{k: v for k, v in r.items() if k != "arms"} for r in rows]
    return row


def summarize(op: str, arms: dict[str, dict[str, Any]], root: Path) -> dict[str, Any]:
    def field(arm: str, name: str) -> Any:
        return arms.get(arm, {}).get(name)

    kiln = arms.get("kiln", {})
    outputs = {  # (the harness arm times choices and writes no outputs)
        arm: compare_outputs(root / "triton" / "outputs.pt", root / arm / "outputs.pt")
        for arm in arms
        if arm not in ("triton", "harness")
    }
    left = [
        {**k, "reason": "refused by kiln.autotune at import"} for k in kiln.get("refused_by_kiln", [])
    ] + [{"reason": "not built by triton.autotune", **k} for k in kiln.get("left_on_triton", [])]
    runs = [summary for summaries in (kiln.get("kiln_runs") or {}).values() for summary in summaries]
    limit = choice_harness.limit_s(runs, len(os.sched_getaffinity(0)))
    kiln_first = field("kiln", "first_s")
    kiln_choice, triton_choice = (
        field("harness", "kiln_choice_ms_triton_harness"),
        field("harness", "triton_choice_ms_triton_harness"),
    )
    spec = realworld_ops.OPS.get(op)
    return {
        "op": op,
        "shape": spec.shape if spec is not None else None,
        "configs": field("triton", "configs") or kiln.get("configs"),
        "triton_first_s": field("triton", "first_s"),
        "kiln_first_s": field("kiln", "first_s"),
        "kiln_second_first_s": field("kiln_second", "first_s"),
        **(
            {
                "kiln_record_first_s": field(RECORD, "first_s"),
                "kiln_first_over_record": _over(kiln_first, field(RECORD, "first_s")),
                "kiln_record_replay": field(RECORD, "program_replay"),
                "kiln_record_outputs_match": outputs.get(RECORD, {}).get("match"),
            }
            if RECORD in arms
            else {}
        ),
        "triton_parallel_first_s": field(PARALLEL, "first_s"),
        "triton_parallel_over_kiln": _over(field(PARALLEL, "first_s"), kiln_first),
        **(
            {
                "triton_parallel_op_ms": field(PARALLEL, "op_ms"),
                "triton_parallel_outputs_match": outputs.get(PARALLEL, {}).get("match"),
                "triton_parallel_precompile": field(PARALLEL, "parallel_precompile"),
            }
            if PARALLEL in arms
            else {}
        ),
        **(
            {
                "kiln_baseline_first_s": field(BASELINE, "first_s"),
                "kiln_first_over_baseline": _over(kiln_first, field(BASELINE, "first_s")),
                "kiln_baseline_op_ms": field(BASELINE, "op_ms"),
                "kiln_baseline_outputs_match": outputs.get(BASELINE, {}).get("match"),
            }
            if BASELINE in arms
            else {}
        ),
        "triton_op_ms": field("triton", "op_ms"),
        "kiln_op_ms": field("kiln", "op_ms"),
        "kiln_op_ms_triton_configs": field("kiln_forced", "op_ms"),
        "kiln_choice_ms_triton_harness": kiln_choice,
        "triton_choice_ms_triton_harness": triton_choice,
        "choice_ratio_triton_harness": (
            kiln_choice / triton_choice if isinstance(kiln_choice, float) and triton_choice else None
        ),
        **{
            f"{arm}_choice_ms_triton_harness_op_level": field(
                "harness", f"{arm}_choice_ms_triton_harness_op_level"
            )
            for arm in ("kiln", "triton")
        },
        "choice_kernel_rows": field("harness", "kernel_rows"),
        "kernel_launches_failed": field("harness", "kernel_launches_failed"),
        "kernels_same_config": field("harness", "kernels_same_config"),
        "limit_s": limit,
        "kiln_first_over_limit": kiln_first / limit if isinstance(kiln_first, float) and limit else None,
        "kiln_first_split": first_call_split(kiln_first, runs, kiln.get("first_call_jit")),
        "outputs_match": outputs.get("kiln", {}).get("match"),
        "kiln_statuses": kiln.get("kiln_statuses"),
        "kiln_time_split": kiln.get("kiln_runs"),
        "kiln_install": kiln.get("kiln_install"),
        "kiln_left_on_triton": left,
        "errors": {arm: r["error"] for arm, r in arms.items() if "error" in r},
        "outputs": outputs,
        "arms": arms,
    }


def first_call_split(first: Any, runs: list[dict[str, Any]], jit: Any) -> dict[str, float] | None:
    """Where kiln's first call went: ``tuning_s`` (its tuning runs' walls, summed),
    ``jit_compile_s`` (the op's thread in Triton's JIT compile entry: plain ``@triton.jit``
    compiles, which no tuning overlaps and the limit leaves out) and ``other_s`` (the rest: the
    op's own work, launches, loading binaries); ``None`` without the first call's time."""
    if not isinstance(first, float):
        return None
    tuning = sum(float((r.get("run", r).get("wall_s")) or 0.0) for r in runs)
    compiling = float((jit or {}).get("seconds") or 0.0)
    return {"tuning_s": tuning, "jit_compile_s": compiling, "other_s": first - tuning - compiling}


def _over(numerator: Any, denominator: Any) -> float | None:
    """``numerator / denominator`` of two arms' seconds (``None`` where either arm gave none)."""
    if isinstance(numerator, float) and isinstance(denominator, float) and denominator:
        return numerator / denominator
    return None


def _num(value: Any, fmt: str) -> str:
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return format(value, fmt)
    return "-"


def table(ops: list[dict[str, Any]], markdown: bool = False) -> str:
    head = [
        "op",
        "configs",
        "first s triton",
        "triton parallel",
        "kiln",
        "kiln 2nd",
        "kiln rec",
        "kiln base",
        "parallel/kiln",
        "op ms triton",
        "kiln",
        "kiln@triton cfgs",
        "ratio",
        "choice ms kiln/triton (per kernel, Triton's _bench)",
        "op-level",
        "limit s",
        "kiln/limit",
        "kiln: tuning/jit/other s",
        "outputs",
        "kiln statuses",
        "errors",
    ]
    rows = []
    for r in ops:
        t_ms, f_ms = r.get("triton_op_ms"), r.get("kiln_op_ms_triton_configs")
        ratio = f_ms / t_ms if isinstance(t_ms, float) and isinstance(f_ms, float) and t_ms > 0 else None
        statuses = r.get("kiln_statuses") or {}
        rows.append(
            [
                f"{r['op']} ({r['shape']})" if r.get("shape") else r["op"],
                _num(r.get("configs"), "d"),
                _num(r.get("triton_first_s"), ".1f"),
                _num(r.get("triton_parallel_first_s"), ".1f"),
                _num(r.get("kiln_first_s"), ".1f"),
                _num(r.get("kiln_second_first_s"), ".2f"),
                _num(r.get("kiln_record_first_s"), ".1f"),
                _num(r.get("kiln_baseline_first_s"), ".1f"),
                _num(r.get("triton_parallel_over_kiln"), ".2f"),
                _num(t_ms, ".3f"),
                _num(r.get("kiln_op_ms"), ".3f"),
                _num(f_ms, ".3f"),
                _num(ratio, ".2f"),
                f"{_num(r.get('kiln_choice_ms_triton_harness'), '.3f')}/"
                f"{_num(r.get('triton_choice_ms_triton_harness'), '.3f')}",
                f"{_num(r.get('kiln_choice_ms_triton_harness_op_level'), '.3f')}/"
                f"{_num(r.get('triton_choice_ms_triton_harness_op_level'), '.3f')}",
                _num(r.get("limit_s"), ".2f"),
                _num(r.get("kiln_first_over_limit"), ".2f"),
                "/".join(
                    _num((r.get("kiln_first_split") or {}).get(f"{part}_s"), ".2f")
                    for part in ("tuning", "jit_compile", "other")
                ),
                {True: "match", False: "DIFFER", None: "-"}[r.get("outputs_match")],
                " ".join(f"{k}:{v}" for k, v in sorted(statuses.items())) or "-",
                "; ".join(f"{a}: {e[:80]}" for a, e in r.get("errors", {}).items()) or "-",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *rows]
    )


def kernel_table(ops: list[dict[str, Any]]) -> str:
    """Markdown: per op, each kernel launch's two chosen configs under Triton's ``_bench``."""
    head = ["op", "kernel", "key", "kiln config", "triton config", "kiln ms", "triton ms", "ratio", "rounds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in ops:
        for row in r.get("choice_kernel_rows") or []:
            if "error" in row:
                timed = ["-", "-", "-", row["error"][:80]]
            else:
                same = " (same config: timed once)" if row.get("same_config") else ""
                pairs = zip(row["kiln_runs"], row["triton_runs"], strict=True)
                rounds = " ".join(f"{a:.4f}/{b:.4f}" for a, b in pairs)
                timed = [_num(row[k], ".4f") for k in ("kiln_ms", "triton_ms")] + [_num(row["ratio"], ".3f")]
                timed.append(rounds + same)
            kernel = str(row["kernel"]).rsplit(".", 1)[-1]
            configs = [_config_text(row.get("kiln_config")), _config_text(row.get("triton_config"))]
            lines.append("| " + " | ".join([r["op"], kernel, f"`{row['key']}`", *configs, *timed]) + " |")
    return "\n".join(lines)


def _config_text(config: dict[str, Any] | None) -> str:
    if config is None:
        return "-"
    kwargs = ", ".join(f"{k}={v}" for k, v in config.get("kwargs", {}).items())
    return f"{kwargs}, w{config.get('num_warps')}, s{config.get('num_stages')}".lstrip(", ")


def meta(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "cores": len(os.sched_getaffinity(0)),  # the cores this run may use (taskset)
        "host": machine_state.host(),  # the CPU model and the load as the run starts
        "repeats": args.repeats,
        "dry_run": args.dry_run,
        "commit": args.commit or machine_state.commit(mark_dirty=True),
    }
    if args.baseline_src is not None:
        data["baseline_src"] = str(args.baseline_src)
        data["baseline_commit"] = args.baseline_commit
    try:
        from importlib.metadata import version

        for package in PACKAGES:
            try:
                data[package] = version(package)
            except Exception:  # not installed: only its ops fail
                data[package] = None
        import torch

        if torch.cuda.is_available():
            data["device"] = torch.cuda.get_device_name()
    except Exception as exc:  # a missing package is reported, not fatal
        data["meta_error"] = f"{type(exc).__name__}: {exc}"
    return data


def write(result: dict[str, Any], args: argparse.Namespace) -> None:
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=repr) + "\n")
    if args.md is not None:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        runs = result["meta"] if isinstance(result["meta"], list) else [result["meta"]]
        header = "\n".join(
            f"- {m.get('device', 'no GPU')}, {m.get('date_utc')}, torch {m.get('torch')}, triton "
            f"{m.get('triton')}, {m.get('cores')} cores: `{m.get('command')}`"
            for m in runs
        )
        kernels = kernel_table(result["ops"])
        args.md.write_text(
            f"# bench/realworld.py\n\n{header}\n\n{table(result['ops'], markdown=True)}\n\n"
            f"## Chosen configs per kernel launch, under Triton's `Autotuner._bench`\n\n{kernels}\n"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ops", default=",".join(realworld_ops.DEFAULT_OPS), help="comma-separated, or 'all'"
    )
    parser.add_argument(
        "--arms",
        default=",".join(a for a in ARMS if a != BASELINE),
        help=f"comma-separated subset of {','.join(ARMS)}",
    )
    parser.add_argument("--repeats", type=int, default=3, help="do_bench medians per op time (median taken)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each op's arms this many times, each on fresh caches: first calls and ratios are medians",
    )
    parser.add_argument("--arm-timeout", type=float, default=300.0, help="seconds before an arm is killed")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    parser.add_argument("--md", type=Path, default=None, help="write a markdown table here")
    parser.add_argument("--strict", action="store_true", help="no Triton fallback for kernels kiln refuses")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: route, import, inventory only")
    parser.add_argument("--inventory", action="store_true", help="with --dry-run: list each autotuner found")
    parser.add_argument("--keep", action="store_true", help="keep each op's temporary directory")
    parser.add_argument("--merge", nargs="+", type=Path, default=None, help="join the ops of JSON files")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="another checkout's src/: adds the kiln_baseline arm (kiln from there) before the kiln arm",
    )
    parser.add_argument("--baseline-commit", default=None, help="the commit --baseline-src holds (recorded)")
    parser.add_argument(
        "--commit",
        default=None,
        help="the commit this tree is (recorded; read from git where there is a repository)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    ops = list(realworld_ops.OPS) if args.ops == "all" else [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in realworld_ops.OPS]
    if unknown:
        parser.error(f"unknown ops {unknown}; known: {', '.join(realworld_ops.OPS)}")
    arms = [a for a in args.arms.split(",") if a]
    if any(a not in ARMS for a in arms):
        parser.error(f"unknown arms in {arms}; known: {', '.join(ARMS)}")
    if args.baseline_src is not None:
        args.baseline_src = args.baseline_src.resolve()
        if not (args.baseline_src / "triton_kiln" / "__init__.py").is_file():
            parser.error(f"--baseline-src {args.baseline_src}: no triton_kiln package there")
        arms.append(BASELINE)
    elif BASELINE in arms:
        parser.error(f"the {BASELINE} arm needs --baseline-src")
    args.ops, args.arms = ops, [a for a in ARMS if a in arms]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        parts = [json.loads(p.read_text()) for p in args.merge]
        metas = [m for p in parts for m in (p["meta"] if isinstance(p["meta"], list) else [p["meta"]])]
        result = {"meta": metas, "ops": [op for p in parts for op in p["ops"]]}
    else:
        if not args.dry_run:
            import torch

            if not torch.cuda.is_available():
                print("bench/realworld.py needs a GPU (or --dry-run)", file=sys.stderr)
                return 2
        result = {"meta": meta(args), "ops": []}
        for op in args.ops:
            result["ops"].append(run_op(op, args))
            write(result, args)  # after every op: a later failure keeps what was measured
    write(result, args)
    brief = [{k: v for k, v in op.items() if k != "arms"} for op in result["ops"]]  # all of it: --out
    print(json.dumps({"meta": result["meta"], "ops": brief}, indent=1, default=repr))
    print("\n" + table(result["ops"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

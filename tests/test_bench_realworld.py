"""bench/realworld.py's arms beside the kiln arm: another checkout's ``src/`` (baseline), stock Triton with a
parallel precompile, and a fresh machine holding only the kiln arm's program record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import realworld  # noqa: E402


def checkout(tmp_path: Path) -> Path:
    src = tmp_path / "base" / "src"
    (src / "triton_kiln").mkdir(parents=True)
    (src / "triton_kiln" / "__init__.py").write_text("")
    return src


def test_the_baseline_arm_runs_just_before_the_kiln_arm(tmp_path: Path) -> None:
    src = checkout(tmp_path)
    args = realworld.parse_args(
        ["--arms", "triton,kiln", "--baseline-src", str(src), "--baseline-commit", "abc"]
    )
    assert args.arms == ["triton", "kiln_baseline", "kiln"]
    assert args.baseline_src == src.resolve()
    assert realworld.meta(args)["baseline_commit"] == "abc"


def test_the_baseline_arm_imports_kiln_from_the_other_checkout_on_caches_of_its_own(tmp_path: Path) -> None:
    src = checkout(tmp_path)
    root = tmp_path / "op"
    baseline = realworld.arm_env(realworld.BASELINE, root, src=src)
    kiln = realworld.arm_env("kiln", root)
    assert baseline["PYTHONPATH"].split(os.pathsep)[0] == str(src)
    assert kiln["PYTHONPATH"].split(os.pathsep)[0] == str(realworld.SRC)
    for name in ("KILN_CACHE_DIR", "KILN_TUNING_DB", "TRITON_CACHE_DIR"):
        assert baseline[name] != kiln[name], name


def test_a_baseline_that_is_not_a_checkout_or_is_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        realworld.parse_args(["--baseline-src", str(tmp_path)])
    with pytest.raises(SystemExit):
        realworld.parse_args(["--arms", "kiln_baseline"])


def test_a_row_compares_the_kiln_arm_with_the_baseline(tmp_path: Path) -> None:
    arms = {"kiln_baseline": {"first_s": 4.0, "op_ms": 1.0}, "kiln": {"first_s": 3.0, "op_ms": 1.0}}
    row = realworld.summarize("liger_swiglu_fwd", arms, tmp_path)
    assert row["kiln_baseline_first_s"] == 4.0
    assert row["kiln_first_over_baseline"] == 0.75


def test_the_triton_parallel_arm_is_an_arm_of_the_default_run() -> None:
    assert "triton_parallel" in realworld.parse_args([]).arms
    assert realworld.parse_args(["--arms", "kiln,triton_parallel"]).arms == ["triton_parallel", "kiln"]


def test_the_triton_parallel_arm_runs_on_a_cache_of_its_own_with_no_kiln_on_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(realworld.SRC), "/elsewhere"]))
    monkeypatch.setenv("KILN_AUTOTUNE", "1")  # kiln's startup hook would route triton.autotune
    root = tmp_path / "op"
    parallel = realworld.arm_env("triton_parallel", root)
    caches = {realworld.arm_env(arm, root)["TRITON_CACHE_DIR"] for arm in ("triton", "kiln")}
    assert parallel["TRITON_CACHE_DIR"] not in caches
    assert parallel["PYTHONPATH"] == "/elsewhere"
    assert [name for name in parallel if name.startswith("KILN_")] == []


def test_a_row_gives_the_triton_parallel_arms_first_call_against_kilns(tmp_path: Path) -> None:
    arms = {"triton_parallel": {"first_s": 6.0, "op_ms": 1.0}, "kiln": {"first_s": 3.0, "op_ms": 1.0}}
    row = realworld.summarize("liger_swiglu_fwd", arms, tmp_path)
    assert row["triton_parallel_first_s"] == 6.0
    assert row["triton_parallel_over_kiln"] == 2.0
    for markdown in (False, True):
        head, line = realworld.table([row], markdown=markdown).splitlines()[:: 2 if markdown else 1][:2]
        assert "triton parallel" in head
        assert "parallel/kiln" in head
        assert "6.0" in line
        assert "2.00" in line
    # a row from a run without the arm renders a '-' there
    assert (
        realworld.summarize("liger_swiglu_fwd", {"kiln": {"first_s": 3.0}}, tmp_path)[
            "triton_parallel_over_kiln"
        ]
        is None
    )


def test_the_record_arm_runs_after_the_kiln_arm_on_fresh_caches_holding_only_its_program_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = realworld.parse_args(["--arms", "kiln_record,kiln,triton"])
    assert args.arms == ["triton", "kiln", "kiln_record"]
    root = tmp_path / "op"
    kiln, record = realworld.arm_env("kiln", root), realworld.arm_env("kiln_record", root)
    for name in ("KILN_CACHE_DIR", "KILN_TUNING_DB", "TRITON_CACHE_DIR"):
        assert record[name] != kiln[name], name
    # without the kiln arm's record there is nothing to measure: an error, no process
    started: list[dict[str, str]] = []
    monkeypatch.setattr(
        realworld.subprocess,
        "run",
        lambda cmd, **kw: started.append(kw["env"]) or subprocess.CompletedProcess(cmd, 0),
    )
    missing = realworld.run_arm("liger_swiglu_fwd", "kiln_record", root, args)
    assert "program record" in missing["error"]
    assert started == []
    programs = Path(kiln["KILN_CACHE_DIR"]) / "programs"
    programs.mkdir(parents=True)
    (programs / "abc.json").write_text("{}")
    (Path(kiln["KILN_CACHE_DIR"]) / "tuning.sqlite3").write_text("the kiln arm's results")
    realworld.run_arm("liger_swiglu_fwd", "kiln_record", root, args)
    (env,) = started
    cache = Path(env["KILN_CACHE_DIR"])
    assert sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) == [
        "programs",
        "programs/abc.json",
    ]


def test_a_row_gives_the_first_call_with_the_program_record_against_the_kiln_arms(tmp_path: Path) -> None:
    replay = {"started": 7, "skipped": {}, "done_before_call": 7}
    arms = {"kiln": {"first_s": 6.0}, "kiln_record": {"first_s": 4.0, "program_replay": replay}}
    row = realworld.summarize("liger_moe_fwd", arms, tmp_path)
    assert row["kiln_record_first_s"] == 4.0
    assert row["kiln_first_over_record"] == 1.5
    assert row["kiln_record_replay"] == replay
    assert "kiln_record_first_s" not in realworld.summarize(
        "liger_moe_fwd", {"kiln": {"first_s": 6.0}}, tmp_path
    )
    head, line = realworld.table([row]).splitlines()
    assert "kiln rec" in head
    assert "4.0" in line


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_dry_run_of_the_triton_parallel_arm_imports_the_op_with_kiln_refused(tmp_path: Path) -> None:
    out = tmp_path / "dry.json"
    cmd = [sys.executable, str(BENCH / "realworld.py"), "--dry-run", "--inventory"]
    cmd += ["--arms", "triton_parallel", "--ops", "liger_swiglu_fwd", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=550, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["ops"]
    arm = row["arms"]["triton_parallel"]
    assert row["errors"] == {}, row["errors"]
    assert arm["kernels_found"] >= 1
    assert arm["kiln_imported"] is False
    assert not any(k["kiln_class"] for k in arm["kernels_inventory"])
    assert arm["parallel_precompile"]["tunings"] == 0  # nothing is called in a dry run


def test_rounds_take_turns_at_running_the_baseline_arm_first() -> None:
    arms = ["triton", realworld.BASELINE, "kiln", "kiln_second"]
    assert realworld.round_arms(arms, 0) == arms
    assert realworld.round_arms(arms, 1) == ["triton", "kiln", realworld.BASELINE, "kiln_second"]
    assert realworld.round_arms(["triton", "kiln"], 1) == ["triton", "kiln"]


def test_a_row_of_several_rounds_gives_medians_and_ratios_paired_within_each_round(tmp_path: Path) -> None:
    rows = [
        realworld.summarize(
            "liger_swiglu_fwd",
            {"kiln_baseline": {"first_s": base, "op_ms": 1.0}, "kiln": {"first_s": kiln, "op_ms": 1.0}},
            tmp_path,
        )
        for base, kiln in [(4.0, 2.0), (10.0, 9.0), (3.0, 3.3)]
    ]
    row = realworld.combine_rounds(rows)
    assert row["kiln_first_s"] == 3.3
    assert row["kiln_baseline_first_s"] == 4.0
    assert row["kiln_first_over_baseline"] == pytest.approx(0.9)  # median of 0.5, 0.9, 1.1
    assert row["kiln_first_over_baseline_rounds"] == pytest.approx([0.5, 0.9, 1.1])
    assert row["kiln_first_s_rounds"] == [2.0, 9.0, 3.3]
    assert len(row["rounds"]) == 3
    assert "arms" in row
    assert all("arms" not in r for r in row["rounds"])


def test_rounds_below_one_are_refused() -> None:
    with pytest.raises(SystemExit):
        realworld.parse_args(["--rounds", "0"])


# The fields every op's row must carry, each from the arm that gives it.
COMPLETE_ROW = (
    "shape",
    "triton_first_s",
    "triton_parallel_first_s",
    "kiln_first_s",
    "limit_s",
    "kiln_choice_ms_triton_harness",
    "triton_choice_ms_triton_harness",
    "kiln_time_split",
)


def _config_result(label: str, compile_s: float, status: str = "ok") -> Any:
    from triton_kiln.tuning.results import ConfigResult

    config = {
        "kwargs": {"BLOCK": int(label)},
        "num_warps": 4,
        "num_stages": 3,
        "num_ctas": 1,
        "maxnreg": None,
    }
    runtime = 1.0 if status == "ok" else None
    return ConfigResult(label, config, status, compile_s=compile_s, runtime_ms=runtime)


def _arms(kiln_runs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    harness = {"kiln_choice_ms_triton_harness": 1.0, "triton_choice_ms_triton_harness": 1.01}
    return {
        "triton": {"first_s": 9.0, "configs": 4},
        "triton_parallel": {"first_s": 5.0},
        "kiln": {"first_s": 2.0, "kiln_runs": kiln_runs},
        "harness": harness,
    }


@pytest.mark.parametrize("op", sorted(realworld.realworld_ops.OPS))
def test_every_ops_row_carries_the_fields_of_a_complete_row(
    op: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(realworld.os, "sched_getaffinity", lambda pid: set(range(16)))
    run = {"run": {"results": [{"compile_s": 3.0}, {"compile_s": 1.0}], "split": {"final_s": 0.5}}}
    row = realworld.summarize(op, _arms({"lib.kernel": [run]}), tmp_path)
    missing = [name for name in COMPLETE_ROW if row.get(name) in (None, {}, [])]
    assert missing == [], f"{op}: {missing}"
    assert row["shape"] == realworld.realworld_ops.OPS[op].shape
    assert row["limit_s"] == 3.5  # the longest compile (more cores than compiles) + the final round


def test_a_library_driven_search_gives_the_row_its_split_and_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FlagGems' LibTuner drives its own search through kiln's ``_bench``: no tuning run of
    kiln's, yet the row has its report (each config's compile) and a limit from those compiles."""
    import realworld_child
    import triton_kiln as kiln

    class Searches(kiln.Autotuner):  # type: ignore[misc]
        def run(self, *args: Any, **kwargs: Any) -> Any:
            best = min(self.configs, key=lambda c: self._bench(*args, config=c, **kwargs))
            return self.fn.run(*args, **kwargs, **best.all_kwargs())

    def mm_kernel_general() -> None:
        pass

    tuner = object.__new__(Searches)
    vars(tuner).update(
        base_fn=mm_kernel_general,
        searched={("4096", "50257"): {"1": _config_result("1", 4.0), "2": _config_result("2", 2.0)}},
        tuned={},
        last_run=None,
    )
    vars(tuner)["searched"][("4096", "50257")]["3"] = _config_result("3", 1.0, "out_of_resources")
    statuses, runs = realworld_child._kiln_reports([tuner])
    assert statuses == {"ok": 2, "out_of_resources": 1}
    ((name, (report,)),) = runs.items()
    assert name.endswith("mm_kernel_general")
    assert report["search"] == "library"
    assert report["summary"]["configs"] == 3
    arms = _arms(json.loads(json.dumps(runs)))  # as the child writes it and the parent reads it
    monkeypatch.setattr(realworld.os, "sched_getaffinity", lambda pid: set(range(16)))
    row = realworld.summarize("flaggems_mm_lmhead", arms, tmp_path)
    assert [name for name in COMPLETE_ROW if row.get(name) in (None, {}, [])] == []
    assert row["kiln_time_split"][name][0]["search"] == "library"
    assert row["limit_s"] == 4.0  # the longest compile; the library's timings have no final round


def test_a_row_splits_kilns_first_call_into_tuning_plain_jit_compiles_and_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(realworld.os, "sched_getaffinity", lambda pid: set(range(16)))
    runs = {
        "lib.a": [{"run": {"wall_s": 1.5, "results": [{"compile_s": 1.0}], "split": {"final_s": 0.2}}}],
        "lib.b": [{"run": {"wall_s": 3.5, "results": [{"compile_s": 3.0}], "split": {"final_s": 0.1}}}],
    }
    arms = _arms(runs)
    arms["kiln"].update(first_s=10.0, first_call_jit={"compiles": 4, "seconds": 3.25})
    row = realworld.summarize("liger_moe_fwd", arms, tmp_path)
    assert row["kiln_first_split"] == {"tuning_s": 5.0, "jit_compile_s": 3.25, "other_s": 1.75}
    assert "5.00/3.25/1.75" in realworld.table([row])
    assert row["limit_s"] == pytest.approx(4.3)  # the tunings' limit: plain-JIT compiles are outside it
    del arms["kiln"]["first_s"]
    assert realworld.summarize("liger_moe_fwd", arms, tmp_path)["kiln_first_split"] is None


def test_the_first_calls_jit_clock_counts_this_threads_outermost_compiles_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    import time

    from triton.runtime.jit import JITFunction

    import realworld_child

    def compile_(fn: Any, nested: bool = False) -> str:
        time.sleep(0.05)
        if nested:
            JITFunction._do_compile(fn)  # a compile inside a compile: counted once, with its caller
        return "kernel"

    monkeypatch.setattr(JITFunction, "_do_compile", compile_)
    with realworld_child.JitClock().timing() as clock:
        assert JITFunction._do_compile(object()) == "kernel"
        JITFunction._do_compile(object(), nested=True)
        other = threading.Thread(target=JITFunction._do_compile, args=(object(),))  # another thread's
        other.start()
        other.join()
    assert JITFunction._do_compile is compile_  # Triton's own entry is back
    assert clock.report()["compiles"] == 2
    assert 0.15 <= clock.report()["seconds"] < 1.0


def test_the_meta_names_the_commit_given_or_else_the_checkouts() -> None:
    given = realworld.meta(
        realworld.parse_args(["--ops", "liger_dyt_fwdbwd", "--dry-run", "--commit", "abc123"])
    )
    assert given["commit"] == "abc123"
    read = realworld.meta(realworld.parse_args(["--ops", "liger_dyt_fwdbwd", "--dry-run"]))
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCH.parent, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not head:
        pytest.skip("not a git checkout: no commit to read")
    assert read["commit"] in (head, f"{head}-dirty")


def test_a_rows_outputs_compare_every_arm_but_triton_and_the_harness_with_triton(tmp_path: Path) -> None:
    arms = {"triton": {"first_s": 9.0}, "kiln": {"first_s": 3.0}, "harness": {}}
    outputs = realworld.summarize("liger_swiglu_fwd", arms, tmp_path)["outputs"]
    assert set(outputs) == {"kiln"}

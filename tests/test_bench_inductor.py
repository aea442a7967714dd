"""bench/inductor.py on the CPU: its smoke run (stock arm, real torch.compile with Inductor's C++
backend) writes the JSON rows the issue names, the kiln arm fails loudly without
``triton_kiln.inductor``, and ``--merge`` joins arms measured in different commands."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import inductor  # noqa: E402  (bench/ is not a package)
import inductor_child  # noqa: E402
import inductor_choice_probe  # noqa: E402
import inductor_models  # noqa: E402
import inductor_report  # noqa: E402


def _cannot_compile_on_cpu() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "no C++ compiler: Inductor's CPU backend compiles C++"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python.h: Inductor's CPU backend builds Python extensions"
    return None


@pytest.mark.slow
def test_smoke_stock_arm_writes_rows(tmp_path: Path) -> None:
    reason = _cannot_compile_on_cpu()
    if reason is not None:
        pytest.skip(f"torch.compile cannot run here: {reason}")
    out = tmp_path / "smoke.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path, whatever this machine has
    proc = subprocess.run(
        [sys.executable, str(BENCH / "inductor.py"), "--smoke", "--arms", "stock", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["meta"]["smoke"] is True
    (row,) = data["rows"]
    assert list(row)[: len(inductor_report.ROW_KEYS)] == list(inductor_report.ROW_KEYS)
    assert (row["model"], row["mode"]) == ("tiny", "default")
    assert row["errors"] == {}
    assert row["stock_first_s"] > 0
    assert row["stock_warm_s"] > 0
    assert row["stock_runtime_ms"] > 0
    assert row["stock_runtime_wall_ms"] > 0  # the per-call synchronized measure, kept beside it
    assert row["stock_warm_runtime_ms"] > 0  # the warm process measures its runtime too
    assert row["kiln_first_s"] is None  # no kiln arm ran
    # the cold process's limit: its compile work over its cores plus its GPU benchmarks (none here)
    (cold,) = [run["stock"]["cold"] for run in row["runs"]]
    work = cold["first_call_work"]
    assert work["benchmark_gpu_s"] == 0.0
    assert work["limit_s"] == pytest.approx((work["children_cpu_s"] + work["threads_cpu_s"]) / work["cores"])
    assert row["stock_limit_s"] == pytest.approx(work["limit_s"])
    assert work["main_thread_cpu_s"] > 0  # the lowering, outside the limit
    # (the tiny CPU model may leave no work to a pool: then the ratio has no limit to divide by)
    expected = row["stock_first_s"] / work["limit_s"] if work["limit_s"] else None
    assert row["stock_first_over_limit"] == pytest.approx(expected)
    assert row["outputs_match"] is None
    assert len(row["stock_first_s_runs"]) == 1
    assert row["stock_warm_matches_cold_runs"] == [True]
    split = row["stock_split"]
    assert split["phases"]["_compile.compile_inner"]["count"] == 1
    assert split["time_spent"]["entire_frame_compile"] > 0
    assert split["counters"]["inductor"]["fxgraph_cache_miss"] == 1
    (run,) = row["runs"]
    warm_split = run["stock"]["warm"]["split"]
    hits = [
        warm_split["counters"].get(g, {}).get(k)
        for g, k in (("inductor", "fxgraph_cache_hit"), ("aot_autograd", "autograd_cache_hit"))
    ]
    assert 1 in hits, warm_split["counters"]  # the warm process reused the cold one's caches
    assert run["stock"]["cold"]["exit_code"] == 0
    cold = run["stock"]["cold"]
    assert len(cold["runtime_blocks_ms"]) == 3
    assert cold["runtime_clock"] == "wall"
    assert len(cold["loadavg_before"]) == 3
    assert len(data["meta"]["loadavg"]) == 3
    assert cold["threads_cpu_first_call_s"]["MainThread"] > 0
    assert cold["import_inductor_s"] > 0  # inside first_s, before install and torch.compile
    assert "tiny default: stock" in proc.stderr


def test_kiln_arm_refused_without_the_module(tmp_path: Path) -> None:
    message = inductor.kiln_inductor_missing(tmp_path)
    assert message is not None
    assert "triton_kiln.inductor" in message
    assert "--arms stock" in message
    package = tmp_path / "triton_kiln" / "inductor"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert inductor.kiln_inductor_missing(tmp_path) is None


def test_kiln_child_fails_loudly_without_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton_kiln.inductor", None)  # import of it fails
    with pytest.raises(inductor_child.KilnInductorMissing, match=r"triton_kiln\.inductor.*--arms stock"):
        inductor_child.install_kiln(sandbox=False)


def test_the_aa_control_runs_stock_inductor_in_both_arms(tmp_path: Path) -> None:
    args = inductor.parse_args(["--model", "resnet50", "--mode", "default", "--aa", "--kiln-sandbox"])
    assert inductor.meta(args)["aa"] is True
    for arm in ("stock", "kiln"):
        cmd = inductor.child_command(arm, "cold", "resnet50", "default", tmp_path, args, iters=1)
        assert cmd[cmd.index("--arm") + 1] == "stock"
        assert "--kiln-sandbox" not in cmd  # nothing of kiln's in the control
    plain = inductor.parse_args(["--model", "resnet50", "--mode", "default", "--kiln-sandbox"])
    assert inductor.meta(plain)["aa"] is False
    cmd = inductor.child_command("kiln", "paired", "resnet50", "default", tmp_path, plain, iters=0)
    assert cmd[cmd.index("--arm") + 1] == "kiln"
    assert "--kiln-sandbox" in cmd


def test_one_arm_pairs_with_the_other_arms_kept_cold_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit):  # it needs a work dir and one arm
        inductor.parse_args(["--model", "resnet50", "--mode", "default", "--pair-with-kept"])
    one_arm = ["--model", "resnet50", "--mode", "default", "--arms", "kiln", "--no-warm"]
    args = inductor.parse_args([*one_arm, "--work-dir", str(tmp_path), "--pair-with-kept"])
    kept = tmp_path / "resnet50-default" / "run0" / "stock" / "cold"
    kept.mkdir(parents=True)
    (kept / "result.json").write_text(json.dumps({"arm": "stock", "first_s": 290.0, "runtime_ms": 2.3}))
    ran: list[str] = []

    def run_child(arm: str, phase: str, _model: str, _mode: str, arm_dir: Path, *_: object) -> dict[str, Any]:
        ran.append(f"{arm} {phase}")
        return {"arm": arm, "first_s": 80.0, "runtime_ms": 2.3, "dir": str(arm_dir / phase)}

    monkeypatch.setattr(inductor, "run_child", run_child)
    monkeypatch.setattr(inductor, "run_paired", lambda *a: {"kiln_over_stock": 1.0})
    record = inductor.run_once("resnet50", "default", 0, tmp_path, args)
    assert ran == ["kiln cold"]  # the kept stock process is not run again
    assert record["stock"]["cold"]["first_s"] == 290.0
    assert record["stock"]["cold"]["dir"] == str(kept)  # where its outputs are, for the output check
    assert record["paired"] == {"kiln_over_stock": 1.0}
    without = inductor.parse_args([*one_arm, "--work-dir", str(tmp_path)])
    ran.clear()
    assert "paired" not in inductor.run_once("resnet50", "default", 0, tmp_path, without)
    assert ran == ["kiln cold"]


def _run_record(index: int, arm: str, first_s: float) -> dict[str, object]:
    cold = {"first_s": first_s, "runtime_ms": 2.0, "split": {"phases": {"x": {"count": 1, "total_s": 1.0}}}}
    return {"run": index, "order": [arm], arm: {"cold": cold, "warm": {"first_s": first_s / 10}}}


def test_merge_joins_arms_from_different_commands() -> None:
    stock = {"meta": {"command": "a"}, "rows": [inductor_report.summarize("m", "default", [])]}
    stock["rows"][0]["runs"] = [_run_record(0, "stock", 10.0), _run_record(1, "stock", 12.0)]
    kiln = {"meta": {"command": "b"}, "rows": [{"model": "m", "mode": "default", "runs": []}]}
    kiln["rows"][0]["runs"] = [_run_record(0, "kiln", 5.0), _run_record(1, "kiln", 7.0)]
    merged = inductor_report.merge([stock, kiln])
    (row,) = merged["rows"]
    assert len(merged["meta"]) == 2
    assert row["stock_first_s_runs"] == [10.0, 12.0]
    assert row["kiln_first_s_runs"] == [5.0, 7.0]
    assert row["stock_first_s"] == 11.0
    assert row["kiln_first_s"] == 6.0
    assert row["ratios"]["kiln/stock first_s"] == pytest.approx(6.0 / 11.0)
    assert row["outputs_match"] is None  # no output files: not compared, never claimed
    assert row["stock_split"]["phases"]["x"]["total_s"] == 1.0


def test_split_table_sums_per_op_template_phases() -> None:
    phases = {
        "mm_template_autotuning": {"count": 2, "total_s": 3.0},
        "convolution_template_autotuning": {"count": 5, "total_s": 4.0},
        "convolution_template_precompiling": {"count": 5, "total_s": 1.0},
        "async_compile.wait": {"count": 1, "total_s": 0.5},
    }
    families = inductor_report.phase_families(phases)
    assert families == {"(all *_template_autotuning)": {"count": 7, "total_s": 7.0}}  # one op: no sum
    split = {"first_call_s": 10.0, "runs": 1, "phases": phases, "counters": {"inductor": {"x": 3}}}
    text = inductor_report.split_table({"model": "m", "mode": "d", "stock_split": split}, "stock")
    lines = text.splitlines()
    assert lines[3].split()[:4] == ["(all", "*_template_autotuning)", "7", "7.00"]  # largest first
    assert "70.0%" in lines[3]
    assert any(line.startswith("inductor.x") for line in lines)


def test_runtime_stats_has_both_measures_the_load_and_busy_threads() -> None:
    """runtime_ms is the median of block means; the synchronized per-call wall stays beside it;
    the host's load and a thread of this process busy during the measurement are recorded."""
    import threading
    import time

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    busy = threading.Thread(target=spin, name="busy-background")
    busy.start()
    calls = []

    def call() -> None:
        calls.append(1)
        time.sleep(0.002)

    try:
        stats = inductor_models.runtime_stats(call, "cpu", iters=5, warmup=1, blocks=4, block_iters=3)
    finally:
        stop.set()
        busy.join()
    assert len(calls) == 1 + 5 + 4 * 3
    assert len(stats["runtime_blocks_ms"]) == 4
    assert stats["runtime_block_iters"] == 3
    assert stats["runtime_ms"] == statistics.median(stats["runtime_blocks_ms"])
    assert stats["runtime_ms"] >= 2.0
    assert stats["runtime_wall_ms"] >= 2.0
    assert stats["runtime_wall_iters"] == 5
    assert stats["runtime_clock"] == "wall"
    assert len(stats["loadavg_before"]) == len(stats["loadavg_after"]) == 3
    assert any(name.startswith("busy-background[") for name in stats["threads_cpu_during_runtime_s"])


def test_thread_cpu_names_python_threads() -> None:
    import threading

    names = inductor_models.thread_cpu_s()
    assert any(name.startswith(f"{threading.main_thread().name}[") for name in names)
    assert all(seconds >= 0 for seconds in names.values())


def test_first_call_thread_cpu_is_summed_by_family() -> None:
    spent = {"kiln-inductor_3[812]": 0.5, "kiln-inductor_12[813]": 0.25, "MainThread[1]": 1.0}
    assert inductor_models.thread_families(spent) == {"kiln-inductor": 0.75, "MainThread": 1.0}
    before = {"MainThread[1]": 1.0, "gone[2]": 3.0}
    assert inductor_models.cpu_since(before, {"MainThread[1]": 1.5, "new[3]": 0.2, "idle[4]": 0.0}) == {
        "MainThread[1]": 0.5,
        "new[3]": 0.2,
    }


def test_coordinate_descent_records_of_one_kernel_and_config_fold_into_one() -> None:
    noop = {
        "kernel": "Placeholder.DESCRIPTIVE_NAME",
        "seconds": 0.0001,
        "from": "{}",
        "to": "{}",
        "save_hook": False,
    }
    moved = {"kernel": "k", "seconds": 0.25, "from": "{'X': 64}", "to": "{'X': 128}", "save_hook": True}
    folded = inductor_models.compact_coordinate_descent([noop] * 3000 + [moved])
    assert len(folded) == 2
    assert folded[0]["count"] == 3000
    assert abs(folded[0]["seconds"] - 0.3) < 1e-6
    assert folded[1] == {**moved, "count": 1}
    assert inductor_models.compact_coordinate_descent(folded) == folded  # folding again changes nothing


def test_the_warm_bench_gives_bench_inductor_every_argument_it_reads(tmp_path: Path) -> None:
    """bench/inductor_warm.py calls bench/inductor.py's ``meta`` and ``child_command`` with its own
    arguments: on the GPU it failed at once when inductor.py began to read ``args.aa``."""
    import inductor_warm

    args = inductor_warm.parse_args(["--model", "tiny", "--arms", "stock,kiln"])
    assert inductor.meta(args)["aa"] is False
    command = inductor.child_command("kiln", "warm", "tiny", "default", tmp_path, args, iters=0)
    assert command[command.index("--arm") + 1] == "kiln"  # not the A/A control's stock


def test_warm_bench_medians_and_ratios_per_arm_and_phase() -> None:
    """bench/inductor_warm.py's summary: each arm's medians over its cold and its warm processes,
    the ratio to stock's, and a failed process left out of both."""
    import inductor_warm

    def process(arm: str, phase: str, first_s: float, error: str | None = None) -> dict[str, object]:
        phases = {"variable_builder_call": first_s / 10}
        main = {"utime_s": first_s, "minflt": 100.0}
        return {
            "arm": arm,
            "phase": phase,
            "first_s": first_s,
            "phases": phases,
            "main_thread": main,
            "error": error,
        }

    processes = [
        process("stock", "cold", 10.0),
        process("kiln", "cold", 12.0),
        *[process("stock", "warm", s) for s in (4.0, 6.0, 5.0)],
        *[process("kiln", "warm", s) for s in (5.5, 4.5, 99.0)],
        process("kiln", "warm", 1.0, error="killed by SIGKILL"),
        process("stock_pool", "warm", 6.0),
    ]
    arms = inductor_warm.summarize(processes)
    assert arms["stock"]["warm_first_s"] == 5.0
    assert arms["kiln"]["warm_first_s"] == 5.5  # median of 4.5, 5.5, 99 (the failed 1.0 left out)
    assert arms["kiln"]["warm_vs_stock"] == 1.1
    assert arms["kiln"]["cold_vs_stock"] == 1.2
    assert arms["stock_pool"]["warm_vs_stock"] == 1.2
    assert "cold_first_s" not in arms["stock_pool"]
    assert arms["kiln"]["warm_phases"]["variable_builder_call"] == 0.55
    table = inductor_warm.table(arms)
    assert table.splitlines()[0].startswith("arm")
    assert len(table.splitlines()) == 4


def test_main_thread_counters_and_the_speed_probe() -> None:
    before = inductor_models.main_thread_counters()
    if not before:
        pytest.skip("no /proc/thread-self here")
    sum(i * i for i in range(200000))
    spent = inductor_models.counters_since(before)
    assert spent["utime_s"] + spent["stime_s"] >= 0
    assert {"minflt", "nvcsw", "cpu_before", "cpu_after"} <= set(spent)
    assert 0 < inductor_models.speed_probe_s(rounds=2) < 5


def test_gpu_kernel_time_is_split_into_tritons_kernels_and_the_rest() -> None:
    assert inductor_models.kernel_kind("triton_poi_fused_relu_0") == "triton"
    assert inductor_models.kernel_kind("triton_tem_fused_mm_1") == "triton"
    assert inductor_models.kernel_kind("sm90_xmma_fprop_implicit_gemm_bf16") == "other"
    assert inductor_models.kernel_kind("void at::native::vectorized_elementwise_kernel<4>") == "other"


def test_gil_bench_renames_each_kernel_apart() -> None:
    """bench/inductor_gil.py's jobs: the fixture kernels in turn, each under a name of its own
    (so each is a compile of its own), and nothing left under the fixture's name."""
    import inductor_gil

    sources = inductor_gil.kernel_sources(6)
    names = [name for name, _ in sources]
    assert len(set(names)) == 6
    for name, text in sources:
        assert f"def {name}(" in text
        base = name.rsplit("_gil", 1)[0]
        assert f"def {base}(" not in text
    assert inductor_gil.loop_for(0.05) > 0


def _paired_record(index: int, stock_ms: float, kiln_ms: float, cold_ms: float) -> dict[str, object]:
    record = {"run": index, "order": ["stock", "kiln"]}
    for arm in ("stock", "kiln"):
        record[arm] = {"cold": {"first_s": 10.0, "runtime_ms": cold_ms}, "warm": {"first_s": 1.0}}
    record["paired"] = {
        "stock_ms": stock_ms,
        "kiln_ms": kiln_ms,
        "kiln_over_stock_per_round": [kiln_ms / stock_ms] * 3,
        "kiln_over_stock": kiln_ms / stock_ms,
    }
    return record


def test_the_row_takes_the_paired_runtime_and_keeps_the_cold_processes_beside_it() -> None:
    paired = [_paired_record(0, 2.0, 2.02, cold_ms=3.0), _paired_record(1, 2.2, 2.2, cold_ms=5.0)]
    older = {"run": 2, "order": ["stock", "kiln"]}  # a run from before the paired runtime
    for arm, cold_ms in (("stock", 2.4), ("kiln", 2.6)):
        older[arm] = {"cold": {"first_s": 10.0, "runtime_ms": cold_ms}, "warm": {"first_s": 1.0}}
    row = inductor_report.summarize("m", "default", [*paired, older])
    assert row["stock_runtime_ms_runs"] == [2.0, 2.2, 2.4]
    assert row["kiln_runtime_ms_runs"] == [2.02, 2.2, 2.6]
    assert row["runtime_source_runs"] == ["paired", "paired", "cold"]
    assert row["stock_runtime_cold_ms_runs"] == [3.0, 5.0, 2.4]
    assert row["runtime_paired_ratio"] == pytest.approx(1.005)  # median of the six rounds: 1.01 x3, 1.0 x3
    assert row["runtime_paired_rounds"] == 6
    assert row["runtime_paired_ratio_range"] == [pytest.approx(1.0), pytest.approx(1.01)]
    assert "paired x" in inductor_report.table([row])


def test_the_paired_process_times_one_block_per_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """inductor_child.serve_paired: ready once its children are quiet, then one block of
    --block-iters calls per ``block`` line, until ``quit``; other commands get an error line."""
    import argparse
    import io

    calls: list[int] = []
    monkeypatch.setattr(sys, "stdin", io.StringIO("block\nnonsense\nblock\nquit\nblock\n"))
    args = argparse.Namespace(pin_cpu=None, warmup=2, block_iters=5)
    result: dict[str, object] = {}
    inductor_child.serve_paired(lambda: calls.append(1), "cpu", args, result)
    lines = capsys.readouterr().out.splitlines()
    messages = [json.loads(line[len(inductor_child.PAIRED_PREFIX) :]) for line in lines]
    assert all(line.startswith(inductor_child.PAIRED_PREFIX) for line in lines)
    assert messages[0]["ready"] is True
    assert messages[0]["settle"]["settled"] is True  # this test process has no busy children
    assert "nonsense" in messages[2]["error"]
    assert [("block_ms" in m) for m in messages] == [False, True, False, True]
    assert len(calls) == 2 + 2 * 5  # the warm-up, then two blocks; nothing after quit
    assert result["paired_blocks_ms"] == [messages[1]["block_ms"], messages[3]["block_ms"]]
    assert inductor.PAIRED_PREFIX == inductor_child.PAIRED_PREFIX


def test_the_host_profile_counts_the_time_spent_in_kilns_own_code() -> None:
    """The cold process's launch record says how much of a call's host time is kiln's code: what
    would have shown kiln's coordinate-descent wrapper on ResNet-50's launch path (1.1 ms a
    call) without reading the profile's rows."""
    from triton_kiln import setting_kinds

    def plain() -> None:
        sum(range(2000))

    def through_kiln() -> None:
        for _ in range(200):
            setting_kinds.positive_int("7")

    top, kiln_ms = inductor_models.host_profile(plain, calls=5)
    assert kiln_ms == 0.0
    assert top  # the rows are still there
    _, kiln_ms = inductor_models.host_profile(through_kiln, calls=5)
    assert kiln_ms > 0.0


def test_the_probe_matches_only_loaded_kernels_with_a_name_of_their_own() -> None:
    def kernel(name: str, launchers: int, warps: int, cubin: str) -> dict[str, Any]:
        config = {"kwargs": {}, "num_warps": warps, "num_stages": 2}
        return {"kernel": name, "launchers": launchers, "config": config, "results": ["R"], "cubins": [cubin]}

    def final(*kernels: dict[str, Any]) -> dict[str, Any]:
        timing = {"gpu_us_per_call": 1.0, "gpu_us_by_kernel": {}, "wall_ms_per_call": 1.0}
        return {"final": {**timing, "kernels": list(kernels)}}

    stock = final(
        kernel("triton_poi_0", 1, 4, "a"),
        kernel("triton_tem_1", 1, 8, "b"),
        kernel("triton_mm", 1, 4, "c"),  # two template choices with one name: not matched
        kernel("triton_mm", 1, 8, "d"),
    )
    kiln = final(
        kernel("triton_poi_0", 1, 4, "a"),
        kernel("triton_poi_0", 0, 8, "z"),  # kept alive without a launcher: not a kernel that runs
        kernel("triton_tem_1", 1, 4, "e"),
        kernel("triton_mm", 1, 4, "c"),
    )
    compare = inductor_choice_probe._compare_final(stock, kiln)
    assert compare["same_config"] == 1  # triton_poi_0
    assert compare["same_cubin_of_same_config"] == 1
    assert compare["differ_config"] == 1  # triton_tem_1
    assert compare["ambiguous"] == 1  # triton_mm
    assert compare["unmatched"] == 0

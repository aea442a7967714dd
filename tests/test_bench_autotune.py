"""``bench/autotune.py`` without a GPU: its second process starts (round 1 on the H100 printed
``nan`` for the second process's first call: the script imported a ``kiln`` module that the
distribution does not have), and the summary says why when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import autotune  # noqa: E402


def test_the_second_process_imports_kiln_and_the_bench(tmp_path: Path) -> None:
    # everything the script runs before it needs a GPU: the imports, with the arm's environment
    head = autotune.SECOND_PROCESS.split("kernel, configs, case")[0]
    script = head.format(paths=[str(ROOT / "bench"), *sys.path], set_name="matmul")
    script += "\nprint('IMPORTED', kiln.autotune.__module__, bench.SETS['matmul'][0].__name__)\n"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "KILN_CACHE_DIR": str(tmp_path / "kiln"), "TRITON_CACHE_DIR": str(tmp_path / "t")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IMPORTED triton_kiln" in out.stdout


def test_the_summary_gives_the_second_process_failure_not_nan() -> None:
    row = {
        "triton": {"first_result_s": 50.0},
        "kiln": {"first_result_s": 5.0},
        "speedup_first_result": 10.0,
        "harness_ms": {"kiln_over_triton": 1.0},
        "kiln_second_process": {"error": "Traceback ...\nModuleNotFoundError: No module named 'kiln'\n"},
        "limit_s": 4.0,
        "kiln_first_over_limit": 1.25,
    }
    text = autotune.summary({"sets": {"matmul": row}})
    assert "nan" not in text.splitlines()[1]
    assert "failed: ModuleNotFoundError: No module named 'kiln'" in text
    row["kiln_second_process"] = {"first_tuned_call_s": 0.0123, "compile_jobs_dispatched": 0}
    assert " 0.012 " in autotune.summary({"sets": {"matmul": row}})


def test_the_triton_parallel_process_imports_the_bench_with_kiln_refused(tmp_path: Path) -> None:
    head = autotune.PARALLEL_PROCESS.split("kernel, configs, case")[0]
    script = head.format(paths=autotune.parallel_process_paths(), set_name="matmul")
    script += "\nprint('IMPORTED', sys.modules['triton_kiln'], bench.SETS['matmul'][0].__name__)\n"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=autotune.parallel_process_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IMPORTED None matmul_kernel" in out.stdout


def test_the_triton_parallel_process_has_a_cache_of_its_own_and_no_kiln_on_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(autotune.SRC), "/elsewhere"]))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln"))
    monkeypatch.setattr(sys, "path", [str(autotune.SRC), *sys.path])
    env = autotune.parallel_process_env(tmp_path)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-parallel")
    assert env["PYTHONPATH"] == "/elsewhere"
    assert [name for name in env if name.startswith("KILN_")] == []
    assert str(autotune.SRC) not in autotune.parallel_process_paths()


def test_the_summary_gives_the_triton_parallel_arm_and_its_ratio_to_kiln() -> None:
    row = {
        "triton": {"first_result_s": 50.0},
        "kiln": {"first_result_s": 5.0},
        "speedup_first_result": 10.0,
        "harness_ms": {"kiln_over_triton": 1.0},
        "kiln_second_process": {"first_tuned_call_s": 0.0123, "compile_jobs_dispatched": 0},
        "limit_s": 4.0,
        "kiln_first_over_limit": 1.25,
    }
    head, line = autotune.summary({"sets": {"matmul": row}}).splitlines()
    assert "parallel s" in head
    assert "parallel/kiln" in head
    assert line.split()[2] == "-"  # a run without the arm
    row["triton_parallel"] = {"first_result_s": 15.0}
    row["triton_parallel_over_kiln"] = 3.0
    line = autotune.summary({"sets": {"matmul": row}}).splitlines()[1]
    assert line.split()[2:6] == ["15.0", "5.0", "10.00x", "3.00"]

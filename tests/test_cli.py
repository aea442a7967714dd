"""The command line: the demo (the README's main job) and the tuning report."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kiln.cli import main
from kiln.tuning import ConfigResult, TuningDatabase


@pytest.mark.timeout(180)
def test_demo_compiles_good_kernels_and_reports_bad_ones() -> None:
    result = CliRunner().invoke(main, ["demo", "--workers", "2", "--timeout", "3"])
    assert result.exit_code == 0, result.output
    assert "demo PASSED" in result.output
    assert "SIGABRT" in result.output
    assert "timed out" in result.output
    assert result.output.count(" ok ") >= 5


def _result(label: str, status: str, ms: float | None, reason: str | None = None) -> ConfigResult:
    return ConfigResult(
        label=label,
        config={"kwargs": {}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None},
        status=status,
        reason=reason,
        compile_s=0.5,
        runtime_ms=ms,
        runtime_ms_p20=ms,
        runtime_ms_p80=ms,
        max_abs_diff=None,
        artifact_key=None,
    )


def test_report_prints_the_latest_runs(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    with TuningDatabase(path) as db:
        run = db.begin_run("matmul", "k" * 64, '["4096"]', "NVIDIA H200", "9.0", "3.6.0", default_label="A")
        db.record(run, _result("A", "ok", 2.0))
        db.record(run, _result("B", "ok", 1.0))
        db.record(run, _result("C", "crashed", None, "killed by SIGABRT"))
        db.finish_run(run, "B", 3.0, 1.0)
    out = tmp_path / "json"
    result = CliRunner().invoke(main, ["report", "--db", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "matmul" in result.output
    assert "* B" in result.output
    assert "2.00x" in result.output
    assert "SIGABRT" in result.output
    assert list(out.glob("*.json"))


def test_report_without_a_database_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "none.sqlite3")])
    assert result.exit_code != 0
    assert "no tuning database" in result.output

"""The command line: the demo (the README's main job) and the tuning report."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from test_tuning_db import write_v1_database
from triton_kiln.cli import main
from triton_kiln.tuning import ConfigResult, TuningDatabase


@pytest.mark.timeout(180)
def test_demo_compiles_good_kernels_and_reports_bad_ones() -> None:
    # 6 s: the 128x128 matmul compiles in ~2.5 s on two idle cores and passed 3 s on two busy ones;
    # the hang costs the limit
    result = CliRunner().invoke(main, ["demo", "--workers", "2", "--timeout", "6"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "demo PASSED" in result.output
    assert "SIGABRT" in result.output
    assert "timed out" in result.output
    assert result.output.count(" ok ") >= 5
    too_wide = [line for line in result.output.splitlines() if len(line) > 80]
    assert not too_wide, too_wide  # an 80-column terminal: every line fits, none cut
    # every compiled job's detail is whole on its row (the figures differ between Tritons)
    details = re.findall(r" ok +[\d.]+ +(.*)$", result.output, re.MULTILINE)
    assert len(details) >= 5, result.output
    for detail in details:
        assert re.fullmatch(r"cubin [\d.]+ (KiB|B), smem [\d.]+ (KiB|B)", detail), detail


@pytest.mark.timeout(180)
def test_demo_talks_at_once_and_says_its_faults_are_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line before the pool starts, a row as each job ends, and no "report it to Triton" for
    the abort the demo injects itself."""
    from triton_kiln.demo import run
    from triton_kiln.triton_compat import GPUTarget

    events: list[tuple[float, str]] = []

    class WatchedPool(run.CompilePool):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            events.append((time.monotonic(), "<pool starts>"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(run, "CompilePool", WatchedPool)
    monkeypatch.setenv("COLUMNS", "160")  # a wide terminal: the table uses it, prose stops at 100
    ok = run.run_demo(
        target=GPUTarget("cuda", 90, 32),
        workers=2,
        timeout_s=3.0,
        echo=lambda text: events.append((time.monotonic(), text)),
    )
    assert ok, "\n".join(text for _, text in events)  # what the demo said: which job ended how
    texts = [text for _, text in events]
    assert texts.index("<pool starts>") > 0  # something was said before the pool started
    output = "\n".join(t for t in texts if t != "<pool starts>")
    too_wide = [line for line in output.splitlines() if len(line) > 160]
    assert not too_wide, too_wide
    rows = [line for line in output.splitlines() if line.startswith("matmul[")]
    assert len(rows) == 2, rows  # each row on one line
    assert all(line.rstrip().endswith("KiB") for line in rows), rows
    assert max(map(len, rows)) > 100, rows  # wider than the prose: the table follows the terminal
    prose = [line for line in output.splitlines() if line.startswith(("kiln demo:", "  KILN_", "starting"))]
    assert prose, output
    assert max(map(len, prose)) <= 100, prose
    # rows come as jobs finish: a fast kernel's row long before the hanging one's (3 s timeout)
    first_row = next(t for t, text in events if text.startswith("vector_add["))
    hang_row = next(t for t, text in events if text.startswith("demo_hang["))
    assert hang_row - first_row > 1.5, events
    assert "to Triton" not in output  # was: "report the printed assertion to Triton ..."
    assert "injects on purpose" in output
    assert "demo PASSED" in output


@pytest.mark.timeout(180)
def test_a_good_kernel_slower_than_the_hangs_limit_still_compiles() -> None:
    """The demo's short limit is the hanging job's alone: on a busy machine a good kernel's compile
    can outlast it, and it must not be reported as hung."""
    from triton_kiln.demo import run
    from triton_kiln.triton_compat import GPUTarget

    lines: list[str] = []
    ok = run.run_demo(target=GPUTarget("cuda", 90, 32), workers=2, timeout_s=0.2, echo=lines.append)
    output = "\n".join(lines)
    assert ok, output
    seconds = [float(s) for s in re.findall(r"^matmul\[.*? ok +([\d.]+) ", output, re.MULTILINE)]
    assert len(seconds) == 2, output
    assert max(seconds) > 0.2, output  # a compile that outlasted the hang's limit, and was kept
    assert re.search(r"^demo_hang\[BLOCK=64\] +timeout", output, re.MULTILINE), output


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


def test_report_shows_the_time_split_in_the_table_and_the_json(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    split = {"sandbox_wait_s": 0.5, "compile_s": 1.1, "bench_s": 3.2, "final_s": 1.8, "other_s": 0.8}
    with TuningDatabase(path) as db:
        run = db.begin_run("softmax", "k" * 64, '["4096"]', "NVIDIA H200", "9.0", "3.6.0", default_label="A")
        db.record(run, _result("A", "ok", 2.0))
        db.finish_run(run, "A", 6.3, 1.0, split=split)
    out = tmp_path / "json"
    result = CliRunner().invoke(main, ["report", "--db", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "time: 6.3 s = sandbox wait 0.5 s, compiling 1.1 s (overlaps benchmarking), "
        "benchmarking 3.2 s, final round 1.8 s, other 0.8 s"
    ) in result.output
    [written] = out.glob("*.json")
    assert json.loads(written.read_text())["run"]["split"] == split


def test_report_reads_a_version_1_database(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    write_v1_database(path)  # the old kiln's file: migrated on open, its run shown without a time line
    result = CliRunner().invoke(main, ["report", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert "* B" in result.output
    assert "time:" not in result.output


def test_report_without_a_database_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "none.sqlite3")])
    assert result.exit_code == 0  # no runs yet is not an error
    assert "no tuning runs yet (no tuning database at " in result.output


def _database_with_runs(path: Path, *kernels: str) -> Path:
    """A real tuning database (kiln's own writer): one finished run per kernel name, in order."""
    with TuningDatabase(path) as db:
        for kernel in kernels:
            run = db.begin_run(kernel, "k" * 64, '["4096"]', "NVIDIA H200", "9.0", "3.6.0", default_label="A")
            db.record(run, _result("A", "ok", 2.0))
            db.finish_run(run, "A", 3.0, 1.0)
    return path


@pytest.mark.parametrize("limit", ["99999999999999999999999", "-1", "0"])
def test_report_limit_out_of_range_is_refused(tmp_path: Path, limit: str) -> None:
    """Audit: a huge --limit ended in an OverflowError traceback; 0 said "no tuning runs" of a
    database that has them; -1 listed every run (SQLite's LIMIT -1)."""
    path = _database_with_runs(tmp_path / "good.db", "matmul")
    result = CliRunner().invoke(main, ["report", "--db", str(path), "--limit", limit])
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, OverflowError)
    assert "Invalid value for '--limit'" in result.output
    assert "1<=x<=" in result.output
    assert "no tuning runs" not in result.output


def test_report_json_file_names_stay_inside_the_directory(tmp_path: Path) -> None:
    """Audit: a kernel named ``../../evil/name`` made ``--json out`` write outside ``out``."""
    hostile = ["../../evil/name", f"{tmp_path}/abs/path", ".hidden", "..", "a\\b:c", "\u00e9t\u00e9\nx"]
    path = _database_with_runs(tmp_path / "db" / "good.db", "matmul", *hostile)
    out = tmp_path / "a" / "b" / "out"
    before = set(tmp_path.rglob("*"))
    result = CliRunner().invoke(main, ["report", "--db", str(path), "--json", str(out), "--limit", "10"])
    assert result.exit_code == 0, result.output
    made = set(tmp_path.rglob("*")) - before
    files = sorted(p for p in made if p.is_file())
    assert len(files) == 1 + len(hostile)
    for file in files:
        assert file.parent == out, file
        assert not file.name.startswith(".")
        assert set(file.name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert sorted(p for p in made if p.is_dir()) == [tmp_path / "a", tmp_path / "a" / "b", out]
    kernels = sorted(json.loads(f.read_text())["run"]["kernel"] for f in files)
    assert kernels == sorted(["matmul", *hostile])  # the name is kept whole inside the file


def test_report_on_a_newer_database_names_the_command_line_option(tmp_path: Path) -> None:
    """Audit: the advice was ``TuningDatabase(path=...)`` (the Python API) in the CLI."""
    path = _database_with_runs(tmp_path / "future.db", "matmul")
    with TuningDatabase(path):
        pass
    import sqlite3

    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    result = CliRunner().invoke(main, ["report", "--db", str(path)])
    assert result.exit_code == 1, result.output
    assert "TuningDatabase(" not in result.output
    assert "newer kiln" in result.output
    assert "--db" in result.output
    assert result.output.count("\n") == 1


def test_report_into_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    """``kiln report | head -2``: the reader leaves after its lines; the report stops without an
    error about the pipe (it printed ``Error: [Errno 32] Broken pipe``)."""
    import os
    import subprocess
    import sys

    db = _database_with_runs(tmp_path / "t.db", *[f"kernel_{i}" for i in range(400)])
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "KILN_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "triton_kiln", "report", "--db", str(db), "--limit", "400"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) != 0  # the report did not get to say all it had
    for noise in ("Broken pipe", "Traceback", "Exception ignored"):
        assert noise not in err, err

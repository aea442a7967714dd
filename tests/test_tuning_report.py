"""Tuning reports: the fixed-width table (labels, best mark, speed-ups, failures, counts) and the
JSON form (round trip, strict JSON, atomic write).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from triton_kiln.tuning import ConfigResult, TuningRun, format_table, read_json, speedups, to_json, write_json
from triton_kiln.tuning import report as report_mod

pytestmark = pytest.mark.timeout(30)

LONG_REASON = (
    "out of resource: shared memory, Required: 294912, Hardware limit: 232448. Reducing block sizes "
    "or `num_stages` may help.\nTraceback (most recent call last): SECOND-LINE-MARKER"
)


def config(block_m: int, block_n: int, warps: int = 4, stages: int = 3) -> dict[str, Any]:
    return {
        "kwargs": {"BLOCK_M": block_m, "BLOCK_N": block_n},
        "num_warps": warps,
        "num_stages": stages,
        "num_ctas": 1,
        "maxnreg": None,
    }


def label(block_m: int, block_n: int, warps: int = 4, stages: int = 3) -> str:
    return f"BLOCK_M={block_m}, BLOCK_N={block_n}, num_warps={warps}, num_stages={stages}"


DEFAULT = label(64, 64)
BEST = label(128, 64)
SLOW = label(32, 32, 2)
BROKEN = label(256, 256, 8, 4)
HUNG = label(128, 128, 8)
PRUNED = label(16, 16, 1, 1)


def result(name: str, status: str = "ok", runtime_ms: float | None = None, **kwargs: Any) -> ConfigResult:
    block_m, block_n = (int(part.split("=")[1]) for part in name.split(", ")[:2])
    return ConfigResult(name, config(block_m, block_n), status, runtime_ms=runtime_ms, **kwargs)


@pytest.fixture
def run() -> TuningRun:
    return TuningRun(
        kernel="matmul_kernel",
        kernel_key="c" * 64,
        key_repr='{"K": 1024, "M": 4096, "N": 2048}',
        device_name="NVIDIA H100 80GB HBM3",
        capability="9.0",
        triton_version="3.6.0",
        results=(
            result(DEFAULT, runtime_ms=2.0, compile_s=1.25, runtime_ms_p20=1.9, runtime_ms_p80=2.1),
            result(BEST, runtime_ms=1.0, compile_s=1.5, max_abs_diff=0.0),
            result(SLOW, runtime_ms=4.0, compile_s=0.75),
            result(BROKEN, "out_of_resources", reason=LONG_REASON, compile_s=3.0),
            result(HUNG, "bench_timeout", reason="benchmark ran past 10 s; its process was killed"),
            result(PRUNED, "pruned", reason="pruned by perf model"),
        ),
        best_label=BEST,
        default_label=DEFAULT,
        started_at=1_700_000_000.0,
        wall_s=12.34,
        first_result_s=0.5,
    )


def row(table: str, name: str) -> str:
    [line] = [line for line in table.splitlines()[2:] if line[2:].startswith(name + " ")]
    return line


def table_rows(table: str, run: TuningRun) -> list[str]:
    lines = table.splitlines()
    return lines[2 : 2 + len(run.results)]


def cells(table: str, name: str) -> dict[str, str]:
    """A row's cells by column title (cells are separated by two or more spaces)."""
    values = re.split(r"\s{2,}", row(table, name)[2:].strip())
    titles = ("config", "compile s", "status", "runtime ms", "speed-up", "reason")
    return dict(zip(titles, values, strict=False))


# ---------------------------------------------------------------------------- table


def test_table_lists_every_config_in_order_and_marks_the_best(run: TuningRun) -> None:
    table = format_table(run)
    rows = table_rows(table, run)
    for line, expected in zip(rows, run.results, strict=True):
        assert line[2:].startswith(expected.label)
    marked = [line for line in rows if line.startswith("*")]
    assert len(marked) == 1
    assert BEST in marked[0]
    assert all(line.startswith("  ") for line in rows if line is not marked[0])


def test_table_speedups_against_the_default_config(run: TuningRun) -> None:
    table = format_table(run)
    assert cells(table, BEST)["speed-up"] == "2.00x"  # default 2.0 ms / best 1.0 ms
    assert cells(table, DEFAULT)["speed-up"] == "1.00x"
    assert cells(table, SLOW)["speed-up"] == "0.50x"
    assert cells(table, DEFAULT)["runtime ms"] == "2.0000"
    assert cells(table, BEST)["runtime ms"] == "1.0000"
    assert cells(table, BEST)["compile s"] == "1.50"
    for failed in (BROKEN, HUNG, PRUNED):
        assert cells(table, failed)["speed-up"] == "-"
        assert cells(table, failed)["runtime ms"] == "-"
    assert speedups(run) == {DEFAULT: 1.0, BEST: 2.0, SLOW: 0.5, BROKEN: None, HUNG: None, PRUNED: None}


def test_table_columns_are_fixed_width(run: TuningRun) -> None:
    lines = format_table(run).splitlines()
    header = lines[1]
    for title in ("config", "compile s", "status", "runtime ms", "speed-up", "reason"):
        assert title in header
    status_at = header.index("status")
    reason_at = header.index("reason")
    speedup_end = header.index("speed-up") + len("speed-up")
    for line, res in zip(table_rows("\n".join(lines), run), run.results, strict=True):
        assert line[status_at:].startswith(res.status)
        assert line[speedup_end - 1] in "x-"  # right-aligned numbers end under their title
        if res.reason:
            assert line[reason_at:].startswith(" ".join(res.reason.split())[:20])


def test_table_failures_show_status_and_truncated_reason(run: TuningRun) -> None:
    table = format_table(run)
    broken = row(table, BROKEN)
    assert "out_of_resources" in broken
    assert "out of resource: shared memory, Required: 294912" in broken
    assert "SECOND-LINE-MARKER" not in table  # one line per config, long reasons cut
    assert broken.endswith("...")
    reason = broken[table.splitlines()[1].index("reason") :]
    assert len(reason) == report_mod.REASON_WIDTH
    assert cells(table, BROKEN)["status"] == "out_of_resources"
    assert cells(table, HUNG)["status"] == "bench_timeout"
    assert cells(table, HUNG)["reason"] == "benchmark ran past 10 s; its process was killed"
    assert cells(table, PRUNED)["reason"] == "pruned by perf model"
    assert "reason" not in cells(table, BEST)  # no reason column text for a config that worked


def test_table_header_and_footer(run: TuningRun) -> None:
    lines = format_table(run).splitlines()
    header = lines[0]
    for text in ("matmul_kernel", run.key_repr, "NVIDIA H100 80GB HBM3", "9.0", "3.6.0", "12.3 s"):
        assert text in header
    footer = "\n".join(lines[2 + len(run.results) :])
    assert "6 configs: 3 ok, 2 failed (bench_timeout 1, out_of_resources 1), 1 pruned" in footer
    assert f"* best: {BEST} (1.0000 ms, 2.00x)" in footer
    assert f"default config {DEFAULT}" in footer


def test_table_without_a_working_default_has_no_speedups(run: TuningRun) -> None:
    results = list(run.results)
    results[0] = result(DEFAULT, "crashed", reason="SIGSEGV (signal 11)")
    broken_default = dataclasses.replace(run, results=tuple(results))
    table = format_table(broken_default)
    for res in run.results:
        assert cells(table, res.label)["speed-up"] == "-"
    assert cells(table, BEST)["runtime ms"] == "1.0000"
    assert all(value is None for value in speedups(broken_default).values())
    assert f"the default config {DEFAULT} did not run ok, so no speed-ups" in table
    assert cells(table, DEFAULT)["status"] == "crashed"
    assert cells(table, DEFAULT)["reason"] == "SIGSEGV (signal 11)"
    assert "6 configs: 2 ok, 3 failed" in table


def test_table_of_a_run_where_nothing_worked() -> None:
    failed = TuningRun(
        kernel="k",
        kernel_key="d" * 64,
        key_repr="{}",
        device_name="gpu",
        capability="8.0",
        triton_version="3.6.0",
        results=(result(DEFAULT, "compile_error", reason="CompilationError: bad"),),
        best_label=None,
        default_label=DEFAULT,
        started_at=0.0,
    )
    table = format_table(failed)
    assert "1 configs: 0 ok, 1 failed (compile_error 1)" in table
    assert "no best config" in table
    assert "wall -" in table
    assert not any(line.startswith("*") for line in table.splitlines())


SPLIT = {"sandbox_wait_s": 0.0, "compile_s": 1.1, "bench_s": 3.2, "final_s": 1.8, "other_s": 1.3}


def test_table_ends_with_where_the_time_went(run: TuningRun) -> None:
    timed = dataclasses.replace(run, wall_s=6.3, split=SPLIT)
    lines = format_table(timed).splitlines()
    assert lines[-1] == (
        "time: 6.3 s = sandbox wait 0.0 s, compiling 1.1 s (overlaps benchmarking), "
        "benchmarking 3.2 s, final round 1.8 s, other 1.3 s"
    )
    assert lines[:-1] == format_table(dataclasses.replace(run, wall_s=6.3)).splitlines()
    assert report_mod.format_split(run) is None  # a run recorded without a split: no time line
    assert not any(line.startswith("time:") for line in format_table(run).splitlines())
    partial = dataclasses.replace(run, wall_s=None, split={"bench_s": 0.5})
    assert report_mod.format_split(partial) == "time: - = benchmarking 0.5 s"


FLAG_NAN = "flagged: out_ptr: the run wrote NaN/Inf where 2 of 4 configs wrote numbers (too few to reject)"
SCRATCH_NOTE = "x_ptr not checked: it differs between configs as BLOCK_N does (config-dependent scratch)"


def test_a_faster_flagged_config_is_named_as_passed_over(run: TuningRun) -> None:
    """A flagged config faster than the best never won: the table says which and why."""
    fast = label(16, 16, 2)
    faster = label(8, 8, 2)
    flagged = dataclasses.replace(
        run,
        results=(
            *run.results,
            result(fast, runtime_ms=0.5, reason=FLAG_NAN),
            result(faster, runtime_ms=0.25, reason=FLAG_NAN),
            result(label(8, 16), runtime_ms=3.0, reason=FLAG_NAN),  # slower than the best: not named
        ),
    )
    table = format_table(flagged)
    assert cells(table, fast)["status"] == "ok, flagged"
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("* best:"))
    assert lines[at + 1] == f"  passed over: {faster} (0.2500 ms), faster but {FLAG_NAN}"
    assert lines[at + 2] == f"  passed over: {fast} (0.5000 ms), faster but {FLAG_NAN}"
    assert sum("passed over" in line for line in lines) == 2
    assert "could be confirmed" not in table
    summary = to_json(flagged)["summary"]
    assert summary["passed_over"] == [faster, fast]
    assert summary["best_unconfirmed"] is False


def test_a_best_config_that_is_flagged_says_no_output_was_confirmed(run: TuningRun) -> None:
    every = tuple(dataclasses.replace(r, reason=FLAG_NAN) if r.ok else r for r in run.results)
    flagged = dataclasses.replace(run, results=every)
    table = format_table(flagged)
    assert (
        "  no config's outputs could be confirmed (all 3 ok configs flagged): the best is the fastest"
        in table
    )
    assert "passed over" not in table
    assert to_json(flagged)["summary"]["best_unconfirmed"] is True


def test_an_argument_left_unchecked_as_scratch_is_a_note_not_a_flag(run: TuningRun) -> None:
    noted = dataclasses.replace(
        run, results=tuple(dataclasses.replace(r, reason=SCRATCH_NOTE) if r.ok else r for r in run.results)
    )
    assert not any(r.flagged for r in noted.results)
    assert all(r.trusted for r in noted.results if r.ok)
    table = format_table(noted)
    assert cells(table, BEST)["status"] == "ok"
    assert cells(table, BEST)["reason"].startswith("x_ptr not checked")
    assert "flagged" not in table
    assert "passed over" not in table


# ---------------------------------------------------------------------------- JSON


def test_json_round_trip(run: TuningRun) -> None:
    data = to_json(run)
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["format"] == "kiln-tuning-run"
    assert back["summary"]["speedups_vs_default"][BEST] == 2.0
    assert back["summary"]["best_runtime_ms"] == 1.0
    assert back["summary"]["failures_by_status"] == {"bench_timeout": 1, "out_of_resources": 1}
    assert report_mod.from_json(back) == run
    assert back["run"]["split"] is None
    timed = dataclasses.replace(run, split=SPLIT)
    back = json.loads(json.dumps(to_json(timed), allow_nan=False))
    assert back["run"]["split"] == SPLIT
    assert report_mod.from_json(back) == timed
    with pytest.raises(ValueError, match="not a kiln tuning report"):
        report_mod.from_json(back["run"])


def test_write_json_round_trips_through_a_file(run: TuningRun, tmp_path: Path) -> None:
    results = list(run.results)
    results[1] = dataclasses.replace(results[1], max_abs_diff=math.inf)
    run = dataclasses.replace(run, results=tuple(results))
    path = tmp_path / "reports" / "matmul.json"
    write_json(run, path)
    json.loads(path.read_text(), parse_constant=pytest.fail)  # strict JSON: no Infinity/NaN
    assert read_json(path) == run
    assert read_json(path).results[1].max_abs_diff == math.inf
    assert [p.name for p in path.parent.iterdir()] == ["matmul.json"]  # no temporary left


def test_write_json_replaces_the_file_atomically(run: TuningRun, tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("old report")
    with open(path) as reader:  # a reader that opened the old file keeps reading the old file
        write_json(run, path)
        assert reader.read() == "old report"
    assert read_json(path) == run


def test_write_json_keeps_the_old_file_when_writing_fails(
    run: TuningRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    write_json(run, path)
    before = path.read_bytes()

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", failing_fsync)
    other = dataclasses.replace(run, kernel="other")
    with pytest.raises(OSError, match="No space left"):
        write_json(other, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_table_names_the_final_rounds_contenders_with_both_timings(run: TuningRun) -> None:
    assert "final round" not in format_table(run)  # no config was timed again
    raced = dataclasses.replace(
        run,
        results=tuple(
            dataclasses.replace(r, screen_ms=0.9) if r.label in (BEST, DEFAULT) else r for r in run.results
        ),
    )
    line = next(line for line in format_table(raced).splitlines() if line.startswith("final round"))
    raced_text = f"{DEFAULT} 0.9000 -> 2.0000 ms, {BEST} 0.9000 -> 1.0000 ms"
    assert line == f"final round (screening -> full timing): {raced_text}"

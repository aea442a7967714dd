"""``bench/helion_autotune.py --merge``: the runs of several device commands pooled per kernel.

The Helion comparison is split over several device commands (one may run 10 minutes), so the
figures quoted come out of this merge: each kernel's runs of each arm pooled, the
median run per arm compared, runs lost to the bench budget left out, one device only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.module_files import load_bench

ROOT = Path(__file__).resolve().parent.parent


def _bench() -> ModuleType:
    return load_bench("helion_autotune", "helion_autotune_bench")


def _run(arm: str, kernel: str, wall: float | None, runtime: float = 0.1) -> dict[str, Any]:
    if wall is None:
        return {"arm": arm, "kernel": kernel, "status": "bench-timeout"}
    return {"arm": arm, "kernel": kernel, "status": "ok", "autotune_s": wall, "runtime_ms": runtime}


def _row(
    kernel: str, fork: float | None, kiln: float | None, runtimes: tuple[float, float] = (0.1, 0.1)
) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "fork": _run("fork", kernel, fork, runtimes[0]),
        "kiln": _run("kiln", kernel, kiln, runtimes[1]),
    }


def _part(
    tmp: Path,
    name: str,
    rows: list[dict[str, Any]],
    device: str = "GPU",
    bytecode: dict[str, Any] | None = None,
) -> Path:
    path = tmp / f"{name}.json"
    part = {"bench": "helion", "device": device, "date": name, "commit": f"c-{name}", "compare": rows}
    if bytecode is not None:
        part["bytecode"] = bytecode
    path.write_text(json.dumps(part))
    return path


def test_runs_of_one_kernel_are_pooled_across_parts(tmp_path: Path) -> None:
    bench = _bench()
    a = _part(tmp_path, "a", [_row("add", 10.0, 9.0)])
    b = _part(tmp_path, "b", [_row("add", 12.0, None), _row("mm", 20.0, 10.0, (0.2, 0.21))])
    c = _part(tmp_path, "c", [_row("add", 11.0, 13.0)])
    merged = bench._merge([a, b, c])
    add, mm = merged["compare"]
    assert (add["kernel"], mm["kernel"]) == ("add", "mm")
    assert [r.get("autotune_s") for r in add["runs"]["fork"]] == [10.0, 12.0, 11.0]
    assert add["fork"]["autotune_s"] == 11.0  # the median of three
    # kiln: 9 and 13 ok, one past the run limit, which ranks as the longest: 13 is the median
    assert (add["kiln"]["autotune_s"], add["kiln"]["median_of"]) == (13.0, 3)
    assert add["autotune_ratio"] == pytest.approx(13.0 / 11.0)
    assert "runs" not in mm  # one run per arm
    assert mm["autotune_ratio"] == pytest.approx(0.5)
    assert mm["runtime_ratio"] == pytest.approx(1.05)
    assert merged["geomean_autotune_ratio"] == pytest.approx(math.sqrt(13.0 / 11.0 * 0.5))
    assert [m["date"] for m in merged["merged_from"]] == ["a", "b", "c"]
    assert [m["commit"] for m in merged["merged_from"]] == ["c-a", "c-b", "c-c"]


def test_the_runtime_bar_reads_the_median_runtime_over_the_runs(tmp_path: Path) -> None:
    """The median-wall run's pick may be slower than the arm's usual pick: the row also gives the
    ratio of the runtimes' medians over each arm's runs."""
    bench = _bench()
    a = _part(tmp_path, "a", [_row("mm", 50.0, 30.0, (0.200, 0.196))])
    b = _part(tmp_path, "b", [_row("mm", 55.0, 28.0, (0.201, 0.207))])  # kiln's median-wall run
    c = _part(tmp_path, "c", [_row("mm", 60.0, 25.0, (0.202, 0.197))])
    (mm,) = bench._merge([a, b, c])["compare"]
    assert mm["runtime_kiln_over_fork"] == pytest.approx(0.207 / 0.201)
    assert mm["runtime_median_kiln_over_fork"] == pytest.approx(0.197 / 0.201)


def test_a_kernel_without_a_good_run_in_one_arm_has_no_ratio(tmp_path: Path) -> None:
    bench = _bench()
    a = _part(tmp_path, "a", [_row("add", None, 9.0)])
    merged = bench._merge([a])
    assert "autotune_ratio" not in merged["compare"][0]
    assert merged["geomean_autotune_ratio"] is None


def test_parts_from_different_devices_are_refused(tmp_path: Path) -> None:
    bench = _bench()
    a = _part(tmp_path, "a", [_row("add", 1.0, 1.0)], device="NVIDIA H100")
    b = _part(tmp_path, "b", [_row("add", 1.0, 1.0)], device="NVIDIA H200")
    with pytest.raises(SystemExit, match="different devices"):
        bench._merge([a, b])


def test_runs_with_and_without_torchs_bytecode_are_rows_of_their_own(tmp_path: Path) -> None:
    """Spawn mode's per-config children import torch at every start: from source on the GPU
    machine's image, from bytecode with the session's cache. Runs of the two kinds are never
    pooled: those of another kind than the first part's are rows of their own, outside the
    geomeans, also when the merged file is merged again. A part from before the bench recorded
    it counts as without."""
    bench = _bench()
    with_cache = {"dont_write": False, "cache_prefix": "/tmp/bench-pycache", "torch_cached": True}
    old = _part(tmp_path, "old", [_row("add", 10.0, 5.0)])
    cached = _part(tmp_path, "cached", [_row("add", 8.0, 4.0)], bytecode=with_cache)
    merged = bench._merge([old, cached])
    by_kernel = {row["kernel"]: row for row in merged["compare"]}
    assert set(by_kernel) == {"add", "add, Python bytecode kept"}
    assert by_kernel["add"]["fork"]["autotune_s"] == 10.0
    assert "runs" not in by_kernel["add"]
    assert by_kernel["add, Python bytecode kept"]["settings"]["torch_bytecode"] is True
    assert merged["geomean_kiln_over_fork"] == pytest.approx(0.5)
    assert "bytecode" not in merged

    joined = tmp_path / "joined.json"
    joined.write_text(json.dumps(merged))
    again = _part(tmp_path, "again", [_row("add", 12.0, 4.0)], bytecode=with_cache)
    rows = {row["kernel"]: row for row in bench._merge([joined, again])["compare"]}
    assert [r["autotune_s"] for r in rows["add, Python bytecode kept"]["runs"]["fork"]] == [8.0, 12.0]
    assert "runs" not in rows["add"]

    first_cached = {row["kernel"] for row in bench._merge([cached, old])["compare"]}
    assert first_cached == {"add", "add, no Python bytecode"}
    # a merged file's row at other settings, behind a first part of the other kind, is not
    # pooled with that kind's runs at those settings
    full = {"effort": "full", "generations": 1, "seed": 1234}
    old_full = _part(tmp_path, "old_full", [_row("add", 100.0, 50.0)])
    old_full.write_text(json.dumps({**json.loads(old_full.read_text()), "settings": full}))
    old_joined = tmp_path / "old_joined.json"
    old_joined.write_text(json.dumps(bench._merge([old, old_full])))
    new_full = _part(tmp_path, "new_full", [_row("add", 90.0, 40.0)], bytecode=with_cache)
    new_full.write_text(json.dumps({**json.loads(new_full.read_text()), "settings": full}))
    rows = {row["kernel"]: row for row in bench._merge([cached, old_joined, new_full])["compare"]}
    assert rows["add, effort full, 1 generation"]["fork"]["autotune_s"] == 90.0
    assert rows["add, effort full, 1 generation, no Python bytecode"]["fork"]["autotune_s"] == 100.0
    assert "runs" not in rows["add, effort full, 1 generation"]
    assert bench._merge([cached, again])["bytecode"] == with_cache


def test_the_committed_h100_comparison_is_its_per_kernel_ratios() -> None:
    """Each committed geomean is the geomean of the committed per-kernel ratios (of the rows at
    the file's own settings: a row at other settings carries them and stays out), and the file
    names the run it came from (a joined file: each of its parts)."""
    committed = json.loads((ROOT / "bench" / "results" / "helion_autotune-h100.json").read_text())
    geomeans = {
        key: value for key, value in committed.items() if key.startswith("geomean_") and value is not None
    }
    assert geomeans
    for key, value in geomeans.items():
        name = "autotune_ratio" if key == "geomean_autotune_ratio" else key.removeprefix("geomean_")
        rows = [row for row in committed["compare"] if "settings" not in row]
        ratios = [row[name] for row in rows if row.get(name) is not None]
        assert value == pytest.approx(math.exp(sum(math.log(r) for r in ratios) / len(ratios))), key
    sources = committed.get("merged_from") or [committed["command"]]
    assert all("bench/helion_autotune.py" in str(source) for source in sources)


def test_a_merge_joins_a_merged_file_and_later_fault_runs(tmp_path: Path) -> None:
    """A committed (merged) result joined with a later part keeps every run's source, and fault
    runs of separate parts are kept by name, a later part's over an earlier one's."""
    bench = _bench()
    a = _part(tmp_path, "a", [_row("add", 10.0, 9.0)])
    b = _part(tmp_path, "b", [_row("add", 12.0, 8.0)])
    first = tmp_path / "first.json"
    first.write_text(json.dumps({**bench._merge([a, b]), "fault": {"config_abort_kiln": {"status": "ok"}}}))
    faults = tmp_path / "faults.json"
    three = {"three_faults_kiln": {"status": "ok"}, "config_abort_kiln": {"status": "later"}}
    faults.write_text(
        json.dumps({"bench": "helion", "device": "GPU", "date": "f", "commit": "c-f", "fault": three})
    )
    merged = bench._merge([first, faults])
    assert [m["commit"] for m in merged["merged_from"]] == ["c-a", "c-b", "c-f"]
    assert merged["fault"] == {
        "config_abort_kiln": {"status": "later"},
        "three_faults_kiln": {"status": "ok"},
    }
    assert [r.get("autotune_s") for r in merged["compare"][0]["runs"]["fork"]] == [10.0, 12.0]


def test_skip_abort_runs_only_the_three_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    ran: list[tuple[str, str]] = []

    def fake_run(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
        ran.append((cmd[cmd.index("--arm") + 1], cmd[cmd.index("--kernel") + 1]))
        return {"status": "ok"}

    monkeypatch.setattr(bench, "_run", fake_run)
    out = tmp_path / "f.json"
    bench.main(["--skip", "compare,abort,ctrl-c", "--out", str(out)])
    assert ran == [("kiln", "faulty_add"), ("fork", "faulty_add"), ("spawn", "faulty_add")]
    assert set(json.loads(out.read_text())["fault"]) == {
        f"three_faults_{a}" for a in ("kiln", "fork", "spawn")
    }
    # --arms picks which of them run (one arm's run again, as a part to merge)
    ran.clear()
    bench.main(["--skip", "compare,abort,ctrl-c", "--arms", "spawn", "--out", str(out)])
    assert ran == [("spawn", "faulty_add")]
    assert set(json.loads(out.read_text())["fault"]) == {"three_faults_spawn"}


def test_runs_the_budget_left_out_or_cut_short_are_not_runs_of_the_arm(tmp_path: Path) -> None:
    """A run the bench budget skipped or stopped early measured nothing: it neither counts among
    the arm's runs nor replaces an earlier fault run of the same name; a run that reached the run
    limit did measure (the arm took longer) and stays."""
    bench = _bench()
    skipped = {"arm": "spawn", "kernel": "add", "status": bench.SKIPPED}
    cut = {"arm": "spawn", "kernel": "add", "status": bench.CUT, "timeout_s": 52.0}
    over = {"arm": "spawn", "kernel": "add", "status": "bench-timeout", "timeout_s": 240.0}
    a = _part(tmp_path, "a", [{**_row("add", 10.0, 5.0), "spawn": _run("spawn", "add", 20.0)}])
    b = _part(tmp_path, "b", [{"kernel": "add", "spawn": skipped}])
    c = _part(tmp_path, "c", [{"kernel": "add", "spawn": over}])
    d = tmp_path / "d.json"
    d.write_text(
        json.dumps({"bench": "helion", "device": "GPU", "compare": [{"kernel": "add", "spawn": cut}]})
    )
    (add,) = bench._merge([a, b, c, d])["compare"]
    assert [r["status"] for r in add["runs"]["spawn"]] == ["ok", "bench-timeout"]
    assert add["runs_not_measured"] == {"spawn": 2}
    # the lower median of the two measured runs, the one past the limit ranking as the longer
    assert (add["spawn"]["autotune_s"], add["spawn"]["median_of"]) == (20.0, 2)
    assert add["kiln_over_spawn"] == pytest.approx(0.25)

    faults = {"three_faults_fork": {"status": "ok", "autotune_s": 80.0}}
    later = {"three_faults_fork": cut, "three_faults_spawn": cut}
    e, f = tmp_path / "e.json", tmp_path / "f.json"
    e.write_text(json.dumps({"bench": "helion", "device": "GPU", "fault": faults}))
    f.write_text(json.dumps({"bench": "helion", "device": "GPU", "fault": later}))
    merged = bench._merge([e, f])
    assert merged["fault"] == {"three_faults_fork": faults["three_faults_fork"], "three_faults_spawn": cut}


def test_a_run_the_budget_stops_early_is_marked_cut_not_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench()
    timeouts: list[float] = []

    def fake_run(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
        timeouts.append(timeout)
        return {"status": "bench-timeout", "timeout_s": timeout}

    monkeypatch.setattr(bench, "_run", fake_run)
    out = tmp_path / "f.json"
    bench.main(
        ["--skip", "compare,abort,ctrl-c", "--budget-s", "100", "--min-start-s", "10", "--out", str(out)]
    )
    fault = json.loads(out.read_text())["fault"]
    assert timeouts[0] == pytest.approx(100.0, abs=5.0)  # what was left of the budget, under 240 s
    assert fault["three_faults_kiln"]["status"] == bench.CUT


def test_a_part_at_other_settings_gives_rows_of_its_own_outside_the_geomeans(tmp_path: Path) -> None:
    """One kernel at effort full beside the quick comparison: its runs are never pooled with the
    quick runs of the same kernel, and a later merge of the merged file keeps them apart."""
    bench = _bench()
    quick = {"effort": "quick", "generations": 1, "seed": 1234}
    full = {"effort": "full", "generations": 2, "seed": 1234}
    a = _part(tmp_path, "a", [_row("mm", 50.0, 25.0)])
    b = _part(tmp_path, "b", [_row("mm", 300.0, 100.0)])
    for path, settings in ((a, quick), (b, full)):
        path.write_text(json.dumps({**json.loads(path.read_text()), "settings": settings}))
    merged = bench._merge([a, b])
    by_kernel = {row["kernel"]: row for row in merged["compare"]}
    assert set(by_kernel) == {"mm", "mm, effort full, 2 generations"}
    assert by_kernel["mm, effort full, 2 generations"]["settings"] == full
    assert by_kernel["mm, effort full, 2 generations"]["kiln_over_fork"] == pytest.approx(1 / 3)
    assert "settings" not in by_kernel["mm"]
    assert merged["geomean_kiln_over_fork"] == pytest.approx(0.5)

    first = tmp_path / "first.json"
    first.write_text(json.dumps(merged))
    c = _part(tmp_path, "c", [_row("mm", 320.0, 110.0)])
    c.write_text(json.dumps({**json.loads(c.read_text()), "settings": full}))
    again = {row["kernel"]: row for row in bench._merge([first, c])["compare"]}
    fork_runs = again["mm, effort full, 2 generations"]["runs"]["fork"]
    assert [r["autotune_s"] for r in fork_runs] == [300.0, 320.0]
    assert "runs" not in again["mm"]


def test_a_run_past_the_run_limit_ranks_as_the_longest_in_the_median() -> None:
    """A run that reached ``--run-timeout-s`` took longer than the limit: left out of the median,
    it would make the arm look faster than its runs were (spawn's layer_norm on an H100: 222 s,
    past 240 s and 116 s has the median 222 s, not 116 s)."""
    bench = _bench()
    spawn = [_run("spawn", "ln", 222.2), _run("spawn", "ln", None), _run("spawn", "ln", 115.6)]
    row = bench._row("ln", {"kiln": [_run("kiln", "ln", 30.0)], "spawn": spawn})
    assert (row["spawn"]["autotune_s"], row["spawn"]["median_of"]) == (222.2, 3)
    assert row["kiln_over_spawn"] == pytest.approx(30.0 / 222.2)
    # two of three past the limit: the median is past the limit, and no ratio is claimed
    spawn = [_run("spawn", "ln", None), _run("spawn", "ln", 100.0), _run("spawn", "ln", None)]
    row = bench._row("ln", {"kiln": [_run("kiln", "ln", 30.0)], "spawn": spawn})
    assert (row["spawn"]["status"], row["spawn"]["median_of"]) == ("bench-timeout", 3)
    assert "kiln_over_spawn" not in row
    assert row["spawn"]["runtime_ms_median"] == pytest.approx(0.1)  # of the run that finished

"""docs/BENCHMARKS.md is what bench/make_benchmarks_page.py writes from bench/results, and
bench/results holds one file per benchmark and device, each naming its device, date, commit
and command."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from support.module_files import load_bench

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _generator() -> ModuleType:
    return load_bench("make_benchmarks_page")


def test_the_committed_page_is_what_the_generator_writes() -> None:
    page = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert page == _generator().render(), "run: python bench/make_benchmarks_page.py"


def test_results_hold_one_json_file_per_benchmark_and_device() -> None:
    names = sorted(path.name for path in RESULTS.iterdir())
    assert names, "bench/results is empty"
    assert all(name.endswith(".json") for name in names), names
    generator = _generator()
    pairs = [generator.split_name(RESULTS / name) for name in names]
    assert len(pairs) == len(set(pairs))
    for benchmark, _device in pairs:
        assert (ROOT / "bench" / f"{benchmark}.py").is_file(), f"no bench/{benchmark}.py"


def test_every_result_names_its_device_date_commit_and_command() -> None:
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        for key in ("device", "date", "commit", "command"):
            assert isinstance(data.get(key), str), f"{path.name} has no {key}"
            assert data[key], f"{path.name} has an empty {key}"
        assert len(data["commit"]) == 40, f"{path.name}: commit is not a full hash"


def test_a_changed_result_changes_the_page(tmp_path: Path) -> None:
    generator = _generator()
    source = RESULTS / "sandbox_start-h100.json"
    data = json.loads(source.read_text())
    data["sandboxes"]["native"]["first_result_s"] = 123.0
    (tmp_path / source.name).write_text(json.dumps(data))
    generator.RESULTS = tmp_path
    page = generator.render()
    assert "| 123 |" in page
    assert page != (ROOT / "docs" / "BENCHMARKS.md").read_text()


def test_the_triton_parallel_arm_is_a_row_only_where_a_run_measured_it() -> None:
    page = _generator()
    with_arm = {"op": "x", "kiln_first_s": 2.0, "triton_first_s": 9.0, "triton_parallel_first_s": 4.0}
    rows = list(page._realworld({"ops": [with_arm, {"op": "y", "kiln_first_s": 2.0}]}))
    parallel = [row for row in rows if row.baseline_name == page.PARALLEL]
    assert [(row.case, row.kiln, row.baseline) for row in parallel] == [("x", 2.0, 4.0)]
    sets = {"matmul": {"kiln": {"first_result_s": 2.0}, "triton_parallel": {"first_result_s": 4.0}}}
    (row,) = [row for row in page._autotune({"sets": sets}) if row.baseline_name == page.PARALLEL]
    assert page._ratio(row) == "0.50"


def test_helions_kiln_arms_are_rows_only_where_a_run_measured_them() -> None:
    page = _generator()
    arm = {"autotune_s": 4.0, "runtime_ms": 0.2}
    compare = [
        {"kernel": "mm", "fork": {"autotune_s": 10.0, "runtime_ms": 0.2}, "kiln": arm, "kiln-screen": arm},
        {"kernel": "ln", "fork": {"autotune_s": 10.0, "runtime_ms": 0.2}, "kiln": arm},
    ]
    measures = [(row.case, row.measure) for row in page._helion({"compare": compare})]
    assert [m for case, m in measures if case == "mm"] == [
        "autotune wall (s)",
        "chosen config runtime (ms)",
        "autotune wall (s), kiln's final round and screening",
        "chosen config runtime (ms), kiln's final round and screening",
    ]
    assert [m for case, m in measures if case == "ln"] == ["autotune wall (s)", "chosen config runtime (ms)"]


def test_helions_repeated_runs_give_the_median_wall_run_and_the_median_runtime() -> None:
    page = _generator()

    def run(wall: float, runtime: float) -> dict[str, object]:
        return {"status": "ok", "autotune_s": wall, "runtime_ms": runtime}

    fork_runs = [run(50.0, 0.200), run(55.0, 0.201), run(60.0, 0.202)]
    kiln_runs = [run(30.0, 0.196), run(28.0, 0.207), run(25.0, 0.197)]
    row = {
        "kernel": "mm",
        "fork": {**fork_runs[1], "median_of": 3, "runtime_ms_median": 0.201},
        "kiln": {**kiln_runs[1], "median_of": 3, "runtime_ms_median": 0.197},
        "runs": {"fork": fork_runs, "kiln": kiln_runs},
    }
    rows = {row.measure: (row.kiln, row.baseline) for row in page._helion({"compare": [row]})}
    assert rows == {
        "autotune wall (s), median of runs: kiln 3, Helion 3": (28.0, 55.0),
        "chosen config runtime (ms), in the median-wall run": (0.207, 0.201),
        "chosen config runtime (ms), median over the runs": (0.197, 0.201),
    }


def test_helions_spawn_arm_is_a_baseline_of_its_own_and_a_failed_run_is_counted() -> None:
    """With fork and spawn runs, kiln is compared with each; an arm whose median is of fewer runs
    than it has (one failed, or passed the bench's run limit) says so."""
    page = _generator()

    def run(wall: float | None) -> dict[str, object]:
        if wall is None:
            return {"status": "bench-timeout", "timeout_s": 240.0}
        return {"status": "ok", "autotune_s": wall, "runtime_ms": 0.05}

    runs = {"fork": [run(50.0), run(55.0)], "spawn": [run(222.0), run(None)], "kiln": [run(30.0), run(25.0)]}
    row = {
        "kernel": "ln",
        "fork": {**runs["fork"][0], "median_of": 2, "runtime_ms_median": 0.05},
        "spawn": {**runs["spawn"][0], "median_of": 1, "runtime_ms_median": 0.05},
        "kiln": {**runs["kiln"][1], "median_of": 2, "runtime_ms_median": 0.05},
        "runs": runs,
    }
    walls = {
        (r.baseline_name, r.measure): (r.kiln, r.baseline)
        for r in page._helion({"compare": [row]})
        if r.measure.startswith("autotune wall")
    }
    assert walls == {
        ("Helion fork precompile", "autotune wall (s), median of runs: kiln 2, Helion 2"): (25.0, 50.0),
        ("Helion spawn precompile", "autotune wall (s), median of runs: kiln 2, Helion 1 of 2"): (
            25.0,
            222.0,
        ),
    }


def test_a_joined_file_is_stamped_with_every_commit_and_the_span_of_dates_of_its_runs() -> None:
    """A file joining runs made at several commits names them all in the page's header, not only
    the first run's; a file of one run, or of runs at one commit on one day, names its own."""
    page = _generator()
    own = {"date": "2026-12-07", "commit": "a" * 40}
    assert page._stamp(own) == f"date: 2026-12-07; commit: `{'a' * 12}`"
    runs = [
        {"date": "2026-12-06T10:00:00", "commit": "a" * 40},
        {"date": "2026-12-07T09:00:00", "commit": "b" * 40},
        {"date": "2026-12-07T11:00:00", "commit": "a" * 40},
    ]
    assert page._stamp({**own, "merged_from": runs}) == (
        f"dates: 2026-12-06 to 2026-12-07; commits: `{'a' * 12}`, `{'b' * 12}` "
        "(3 runs joined, each in `merged_from`)"
    )
    one = [{"date": "2026-12-07T10:00:00", "commit": "a" * 40}] * 2
    assert page._stamp({**own, "merged_from": one}) == page._stamp(own)
    named = {**own, "merged_from": ["part-a.json", "part-b.json"]}  # files named, not runs
    assert page._stamp(named) == page._stamp(own)


def test_a_files_bytecode_record_and_caveats_head_its_table() -> None:
    """Without Python bytecode every new process compiles torch from source, which a spawned
    baseline pays per child: the page says which the runs had, and a file's own caveats."""
    conditions = _generator()._conditions
    kept = {"dont_write": False, "cache_prefix": "/tmp/bench-pycache", "torch_cached": True}
    none = {"dont_write": True, "cache_prefix": None, "torch_cached": False}
    assert conditions({"bytecode": kept}) == [
        "Python bytecode: kept, as a pip installation has it (`/tmp/bench-pycache`)"
    ]
    assert conditions({"meta": [{"host": {"bytecode": none}}]}) == [
        "Python bytecode: none; each new process compiled torch from source at its start"
    ]
    assert conditions({"meta": {"host": {}}, "caveats": ["spawn paid it"]}) == ["note: spawn paid it"]
    helion = json.loads((RESULTS / "helion_autotune-h100.json").read_text())
    page = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert helion["caveats"]
    assert all(f"- note: {caveat}" in page for caveat in helion["caveats"])

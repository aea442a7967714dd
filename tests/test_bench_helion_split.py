"""``bench/helion_autotune.py``'s split of an autotune wall, its options, plan and three-arm merge.

The split wraps Helion's methods with exclusive timers: here they wrap a fake tree of classes
driven by a fake clock, so each phase's seconds are known exactly, a nested call is counted
once, and a name the tree lacks is reported as not measured.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.module_files import load_bench
from triton_kiln import settings

ROOT = Path(__file__).resolve().parent.parent


def _bench() -> ModuleType:
    return load_bench("helion_autotune", "helion_autotune_bench")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def _fake_tree(clock: _Clock) -> ModuleType:
    """A provider whose precompile generates code, waits (a staticmethod) and spends its own
    time; a benchmark that checks accuracy; a subclass whose precompile calls ``super()``."""
    module = types.ModuleType("fake_helion_tree")

    class Kernel:
        def compile_config(self, config: object = None) -> str:
            clock.spend(1.0)
            return f"fn{config}"

    class Future:
        @staticmethod
        def wait_for_all(futures: list[object]) -> list[bool]:
            clock.spend(4.0)
            return [True] * len(futures)

    class Provider:
        kernel = Kernel()

        def precompile(self, config: object) -> str:
            fn = self.kernel.compile_config(config)
            clock.spend(2.0)
            Future.wait_for_all([fn])
            return fn

        def benchmark(self, fn: str) -> float:
            clock.spend(8.0)
            ok = self.check(fn)
            clock.spend(8.0)
            return 1.0 if ok else math.inf

        def check(self, fn: str) -> bool:
            clock.spend(16.0)
            return fn != "fnbad"

    class KilnLike(Provider):
        def precompile(self, config: object) -> str:
            clock.spend(32.0)
            return super().precompile(config)

    module.Kernel = Kernel  # type: ignore[attr-defined]
    module.Future = Future  # type: ignore[attr-defined]
    module.Provider = Provider  # type: ignore[attr-defined]
    module.KilnLike = KilnLike  # type: ignore[attr-defined]
    return module


def _targets(bench: ModuleType) -> tuple[Any, ...]:
    t = bench.Target
    return (
        t("fake_helion_tree", "Kernel.compile_config", "codegen", bench._count_codegen),
        t("fake_helion_tree", "Provider.precompile", "precompile"),
        t("fake_helion_tree", "Future.wait_for_all", "precompile"),
        t("fake_helion_tree", "Provider.benchmark", "benchmark", bench._count_benchmark),
        t("fake_helion_tree", "Provider.check", "accuracy", bench._count_accuracy),
        t("fake_helion_tree", "Provider.not_in_this_version", "benchmark"),
        t("fake_helion_tree", "NoSuchClass.method", "benchmark"),
        t("fake_helion_missing_module", "Anything.method", "codegen"),
    )


@pytest.fixture
def tree(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, _Clock]:
    clock = _Clock()
    module = _fake_tree(clock)
    monkeypatch.setitem(sys.modules, "fake_helion_tree", module)
    return module, clock


def test_the_phases_partition_the_wall_with_nested_calls_counted_once(
    tree: tuple[ModuleType, _Clock],
) -> None:
    bench = _bench()
    module, clock = tree
    split_clock = bench.PhaseClock(clock=clock)
    with bench.timed_phases(split_clock, _targets(bench)) as report:
        start = clock()
        clock.spend(64.0)  # the search's own work
        provider = module.KilnLike()
        fns = [provider.precompile(c) for c in ("a", "b", "a")]
        perfs = [provider.benchmark(fn) for fn in [*fns, "fnbad"]]
        wall = clock() - start
    split = split_clock.split(wall)
    # codegen inside precompile counts to codegen; the wait (a staticmethod) and the subclass's
    # own seconds count to precompile, its super() call adds no second count
    assert split["codegen_s"] == 3 * 1.0
    assert split["precompile_s"] == 3 * (32.0 + 2.0 + 4.0)
    assert split["accuracy_s"] == 4 * 16.0
    assert split["benchmark_s"] == 4 * 16.0
    assert split["baseline_s"] == 0.0
    assert split["other_s"] == 64.0
    assert sum(split.values()) == pytest.approx(wall)
    assert perfs == [1.0, 1.0, 1.0, math.inf]
    assert split_clock.calls == {
        "Provider.precompile": 3,
        "Kernel.compile_config": 3,
        "Future.wait_for_all": 3,
        "Provider.benchmark": 4,
        "Provider.check": 4,
    }
    assert len(split_clock.configs_seen) == 2  # "a" twice, "b"
    # the segments are the split in time: each phase's add up to its seconds, in clock order
    for phase in bench.PHASES:
        seconds = sum(end - begin for name, begin, end in split_clock.segments if name == phase)
        assert seconds == pytest.approx(split[f"{phase}_s"])
    assert [begin for _, begin, _ in split_clock.segments] == sorted(b for _, b, _ in split_clock.segments)
    assert split_clock.counts == {
        "configs_benchmarked": 4,
        "benchmark_failed": 1,
        "accuracy_checks": 4,
        "accuracy_failed": 1,
    }
    assert report["not_measured"] == [
        "fake_helion_tree.Provider.not_in_this_version",
        "fake_helion_tree.NoSuchClass.method",
        "fake_helion_missing_module.Anything.method",
    ]
    assert "fake_helion_tree.Provider.precompile" in report["wrapped"]


def test_the_originals_are_given_back_even_when_the_autotune_raises(tree: tuple[ModuleType, _Clock]) -> None:
    bench = _bench()
    module, clock = tree
    before = {cls: dict(vars(getattr(module, cls))) for cls in ("Kernel", "Future", "Provider", "KilnLike")}

    def autotune() -> None:
        with bench.timed_phases(bench.PhaseClock(clock=clock), _targets(bench)):
            assert vars(module.Provider)["precompile"] is not before["Provider"]["precompile"]
            assert isinstance(vars(module.Future)["wait_for_all"], staticmethod)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        autotune()
    after = {cls: dict(vars(getattr(module, cls))) for cls in before}
    assert after == before


def test_calls_on_another_thread_are_not_timed(tree: tuple[ModuleType, _Clock]) -> None:
    bench = _bench()
    module, clock = tree
    split_clock = bench.PhaseClock(clock=clock)
    with bench.timed_phases(split_clock, _targets(bench)):
        worker = threading.Thread(target=lambda: module.Provider().benchmark("fn"))
        worker.start()
        worker.join()
        module.Kernel().compile_config("x")
    assert split_clock.split(clock())["benchmark_s"] == 0.0
    assert split_clock.seconds["codegen"] == 1.0
    assert "Provider.benchmark" not in split_clock.calls


def test_a_probe_reports_inclusive_seconds_beside_the_split(tree: tuple[ModuleType, _Clock]) -> None:
    bench = _bench()
    module, clock = tree
    split_clock = bench.PhaseClock(clock=clock)
    targets = (
        bench.Target("fake_helion_tree", "Provider.check", None),
        bench.Target("fake_helion_tree", "Provider.benchmark", "benchmark"),
    )
    with bench.timed_phases(split_clock, targets):
        module.Provider().benchmark("fn")
    assert split_clock.probes == {"Provider.check": 16.0}
    assert split_clock.seconds["benchmark"] == 32.0  # the probe takes nothing from its phase


def test_every_helion_target_exists_in_the_installed_helion() -> None:
    """Read against Helion 1.5.0 and 1.5.1: only ``_run_final_selection`` is 1.5.1's alone."""
    pytest.importorskip("helion")
    import importlib.metadata

    import triton_kiln.helion  # noqa: F401  (kiln's provider: a subclass the split wraps too)
    from triton_kiln.helion import compat

    bench = _bench()
    split_clock = bench.PhaseClock()
    original = vars(compat.LocalProvider)["_create_precompile_future"]
    with bench.timed_phases(split_clock) as report:
        assert vars(compat.LocalProvider)["_create_precompile_future"].__wrapped__ is original
    assert vars(compat.LocalProvider)["_create_precompile_future"] is original
    version = importlib.metadata.version("helion")
    expected = ["helion.autotuner.base_search.PopulationBasedSearch._run_final_selection"]
    assert report["not_measured"] == ([] if version != "1.5.0" else expected)
    assert len(report["wrapped"]) + len(report["not_measured"]) == len(bench.TARGETS)


def test_options_refuse_unknown_arms_efforts_and_kernels() -> None:
    bench = _bench()
    opts = bench._options([])
    assert opts.arms.split(",") == ["fork", "spawn", "kiln"]
    assert "layer_norm" in opts.kernels.split(",")
    assert (opts.effort, opts.generations) == ("quick", 1)
    assert bench._options(["--effort", "full", "--generations", "3"]).effort == "full"
    assert bench._options(["--skip", "compare,abort,ctrl-c"]).skip == "compare,abort,ctrl-c"
    assert bench._options(["--skip", "none"]).skip == "none"  # gpu_session's helion-faults
    for argv in (
        ["--effort", "medium"],
        ["--arms", "fork,none"],
        ["--kernels", "conv"],
        ["--repeats", "0"],
        ["--skip", "compare,three_faults"],  # a misspelt section
    ):
        with pytest.raises(SystemExit):
            bench._options(argv)


def test_the_plan_runs_every_arm_once_per_round_in_rotating_order(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    opts = bench._options(["--kernels", "add,matmul", "--repeats", "3"])
    plan = bench._plan(opts)
    assert len(plan) == 2 * 3 * 3
    rounds = [plan[i : i + 3] for i in range(0, len(plan), 3)]
    for kernel_round in rounds:
        assert sorted(arm for _, arm in kernel_round) == ["fork", "kiln", "spawn"]
        assert len({kernel for kernel, _ in kernel_round}) == 1
    firsts = [kernel_round[0][1] for kernel_round in rounds[:3]]
    assert firsts == ["fork", "spawn", "kiln"]  # each arm leads one round
    bench.main(["--plan", "--kernels", "layer_norm", "--arms", "kiln,fork", "--effort", "full"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all(
        "--child" in line and "--effort full" in line and "--kernel layer_norm" in line for line in lines
    )


def _run(arm: str, wall: float | None, split: dict[str, float] | None = None) -> dict[str, Any]:
    if wall is None:
        return {"arm": arm, "status": "bench-timeout"}
    run: dict[str, Any] = {"arm": arm, "status": "ok", "autotune_s": wall, "runtime_ms": 0.1}
    if split is not None:
        run["split"] = split
        run["counts"] = {"configs_generated": int(split["codegen_s"])}
    return run


def _split(codegen: float, wall: float) -> dict[str, float]:
    return {"codegen_s": codegen, "precompile_s": 1.0, "other_s": wall - codegen - 1.0}


def test_three_arms_merge_to_kiln_over_fork_and_spawn_with_split_medians(tmp_path: Path) -> None:
    bench = _bench()

    def part(name: str, rows: list[dict[str, Any]]) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"bench": "helion", "device": "GPU", "date": name, "compare": rows}))
        return path

    a = part(
        "a",
        [
            {
                "kernel": "mm",
                "runs": {
                    "fork": [_run("fork", 10.0, _split(2.0, 10.0)), _run("fork", 14.0, _split(4.0, 14.0))],
                    "spawn": [_run("spawn", 20.0, _split(3.0, 20.0)), _run("spawn", None)],
                    "kiln": [_run("kiln", 5.0, _split(1.0, 5.0)), _run("kiln", 7.0, _split(5.0, 7.0))],
                },
            }
        ],
    )
    b = part(
        "b",
        [
            {
                "kernel": "mm",
                "fork": _run("fork", 12.0, _split(9.0, 12.0)),
                "spawn": _run("spawn", 16.0, _split(6.0, 16.0)),
                "kiln": _run("kiln", 6.0, _split(3.0, 6.0)),
            },
            {"kernel": "ln", "fork": _run("fork", 4.0), "kiln": _run("kiln", 2.0)},  # no spawn arm
        ],
    )
    merged = bench._merge([a, b])
    mm, ln = merged["compare"]
    assert [r.get("autotune_s") for r in mm["runs"]["spawn"]] == [20.0, None, 16.0]
    assert mm["fork"]["autotune_s"] == 12.0
    assert mm["spawn"]["autotune_s"] == 20.0  # the median of three, the one past the limit longest
    assert mm["kiln"]["autotune_s"] == 6.0
    assert mm["kiln_over_fork"] == pytest.approx(0.5)
    assert mm["autotune_ratio"] == mm["kiln_over_fork"]
    assert mm["kiln_over_spawn"] == pytest.approx(6.0 / 20.0)
    assert mm["fork"]["split"] == _split(9.0, 12.0)  # the median run's own, summing to its wall
    assert mm["fork"]["split_median"]["codegen_s"] == 4.0  # medians of 2, 4, 9
    assert mm["kiln"]["split_median"]["codegen_s"] == 3.0
    assert mm["kiln"]["counts_median"]["configs_generated"] == 3
    assert "kiln_over_spawn" not in ln
    assert ln["kiln_over_fork"] == pytest.approx(0.5)
    assert merged["geomean_kiln_over_fork"] == pytest.approx(0.5)
    assert merged["geomean_autotune_ratio"] == pytest.approx(0.5)
    assert merged["geomean_kiln_over_spawn"] == pytest.approx(6.0 / 20.0)
    bench._print_table(merged)  # the table reads every field it prints without failing


def test_the_table_shows_kilns_final_rounds_sandbox_calls_and_failed_compiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _bench()
    race = _run("kiln-race", 5.0, _split(1.0, 5.0))
    race["final_rounds"] = [{"finalists": [{"passes": 5}, {"passes": 1}, {"passes": 5}], "wall_s": 2.5}]
    race["kiln"] = {
        "compile_failures": {"OutOfResources": 18, "WorkerCrashedError": 1},
        "sandbox": {
            "kinds": {
                "BenchmarkJob": {"calls": 40, "seconds": 6.0, "job_seconds": 5.5},
                "FinalistRunsJob": {"calls": 11, "seconds": 2.4, "job_seconds": 2.3},
            }
        },
    }
    part = tmp_path / "a.json"
    part.write_text(
        json.dumps(
            {
                "device": "NVIDIA H100",
                "compare": [{"kernel": "mm", "runs": {"fork": [_run("fork", 9.0)], "kiln-race": [race]}}],
            }
        )
    )
    bench._print_table(bench._merge([part]))
    out = capsys.readouterr().out
    assert "kiln's final round: 3 finalists, 11 passes, 2.5 s" in out
    assert "BenchmarkJob 40 in 6.0 s (jobs 5.5 s), FinalistRunsJob 11 in 2.4 s (jobs 2.3 s)" in out
    assert "failed compiles: OutOfResources 18, WorkerCrashedError 1" in out


def test_a_runs_split_fields_carry_counts_and_probes() -> None:
    bench = _bench()
    clock = _Clock()
    split_clock = bench.PhaseClock(clock=clock)
    split_clock.probes["BenchmarkWorker._start"] = 3.0
    split_clock.bump("configs_benchmarked", 7)
    phase = types.SimpleNamespace(ok=5, failed=2, timeouts=1)
    fields = bench._split_fields(split_clock, 10.0, [phase], {"wrapped": [], "not_measured": ["x.y"]})
    assert fields["split"]["other_s"] == 10.0
    assert fields["counts"]["configs_compiled"] == 5
    assert fields["counts"]["configs_failed"] == 2
    assert fields["counts"]["precompile_timeouts"] == 1
    assert fields["counts"]["configs_benchmarked"] == 7
    assert fields["counts"]["accuracy_failed"] == 0
    assert fields["probes"]["benchmark_worker_start_s"] == 3.0
    assert fields["split_not_measured"] == ["x.y"]


def test_the_kiln_compile_arm_is_compared_to_the_helion_arms_beside_kilns_loop() -> None:
    bench = _bench()
    row = bench._row(
        "mm",
        {
            "fork": [_run("fork", 10.0)],
            "kiln": [_run("kiln", 5.0)],
            "kiln-compile": [_run("kiln-compile", 8.0)],
        },
    )
    assert row["kiln_over_fork"] == pytest.approx(0.5)
    assert row["kiln_compile_over_fork"] == pytest.approx(0.8)
    assert bench._geomeans([row])["geomean_kiln_compile_over_fork"] == pytest.approx(0.8)
    assert bench._options(["--arms", "kiln,kiln-compile"]).arms == "kiln,kiln-compile"
    assert bench._command(bench._options([]), "kiln", "faulty_add", faults=True, seed_faults=True)[-2:] == [
        "--faults",
        "--seed-faults",
    ]


def test_the_kiln_race_arm_is_compared_to_kilns_loop_with_helions_verification_and_the_helion_arms() -> None:
    bench = _bench()
    row = bench._row(
        "mm",
        {
            "fork": [_run("fork", 10.0)],
            "kiln-verify": [_run("kiln-verify", 5.0)],
            "kiln-race": [_run("kiln-race", 4.0)],
        },
    )
    assert row["kiln_race_over_fork"] == pytest.approx(0.4)
    assert row["kiln_race_over_kiln_verify"] == pytest.approx(0.8)
    assert row["runtime_kiln_race_over_kiln_verify"] == pytest.approx(1.0)
    geomeans = bench._geomeans([row])
    assert geomeans["geomean_kiln_race_over_kiln_verify"] == pytest.approx(0.8)
    assert bench._options(["--arms", "kiln-verify,kiln-race"]).arms == "kiln-verify,kiln-race"
    assert "kiln-race" in bench.KILN_ARMS
    # the split times kiln's race as benchmarking, and the whole final verification in either arm
    phases = {target.qualname: target.phase for target in bench.TARGETS}
    assert phases["race"] == "benchmark"
    assert bench.PROBES["final_rebenchmark_best"] == "kiln_final_verification_s"
    assert bench.PROBES["PopulationBasedSearch.final_rebenchmark_best"] == "final_verification_s"


def test_the_kiln_screen_arm_is_kiln_race_with_kilns_screening_and_is_compared_to_it() -> None:
    bench = _bench()
    assert bench.arm_settings("kiln-screen") == {
        "KILN_HELION_SANDBOX": "1",
        "KILN_HELION_FINAL_ROUND": "1",
        "KILN_HELION_SCREEN_MS": "10",
    }
    assert bench.arm_settings("kiln-race") == {"KILN_HELION_SANDBOX": "1", "KILN_HELION_FINAL_ROUND": "1"}
    assert bench.arm_settings("kiln-verify") == {"KILN_HELION_SANDBOX": "1", "KILN_HELION_FINAL_ROUND": "0"}
    assert bench.arm_settings("kiln") == {}  # kiln's defaults
    helions = {name for name in settings.variables().values() if name.split("_")[1] == "HELION"}
    assert set(bench.helion_settings()) == helions  # the child drops each before its arm's
    assert bench.arm_settings("kiln-compile") == {"KILN_HELION_SANDBOX": "0"}
    assert bench.arm_settings("fork") == {}
    row = bench._row(
        "mm",
        {
            "fork": [_run("fork", 10.0)],
            "kiln-race": [_run("kiln-race", 5.0)],
            "kiln-screen": [_run("kiln-screen", 4.0)],
        },
    )
    assert row["kiln_screen_over_fork"] == pytest.approx(0.4)
    assert row["kiln_screen_over_kiln_race"] == pytest.approx(0.8)
    assert row["runtime_kiln_screen_over_kiln_race"] == pytest.approx(1.0)
    geomeans = bench._geomeans([row])
    assert geomeans["geomean_kiln_screen_over_fork"] == pytest.approx(0.4)
    assert geomeans["geomean_kiln_screen_over_kiln_race"] == pytest.approx(0.8)
    assert bench._options(["--arms", "fork,kiln-screen"]).arms == "fork,kiln-screen"


def test_the_child_keeps_every_instance_made_of_a_class_it_watches() -> None:
    bench = _bench()

    class Made:
        def __init__(self, value: int) -> None:
            self.value = value

    made = bench._instances(Made)
    first, second = Made(1), Made(2)
    assert made == [first, second]
    assert [m.value for m in made] == [1, 2]  # each still made by its own __init__


def test_the_timeline_splits_the_benchmark_phase_by_whether_the_sandbox_ran() -> None:
    """The kiln arm's benchmark phase is split into time with a sandbox call running (timing a
    config, or the thread waiting on one) and time with none (Helion's in-process work, a wait
    for a compile); the sandbox's longest idle stretches are listed."""
    bench = _bench()
    t0 = 100.0
    spans = [(101.0, 102.0), (101.5, 103.0), (106.0, 107.0), (99.0, 100.5)]  # two overlap; one before t0
    segments = [
        ("precompile", 100.0, 101.0),
        ("benchmark", 101.0, 105.0),  # sandbox busy 101-103, idle 103-105
        ("codegen", 105.0, 106.0),
        ("benchmark", 106.0, 108.0),  # busy 106-107, idle 107-108
    ]
    line = bench.timeline(spans, segments, t0, wall=10.0)
    assert line["sandbox_busy_s"] == pytest.approx(0.5 + 2.0 + 1.0)
    assert line["first_call_s"] == pytest.approx(0.0)
    assert line["benchmark_sandbox_busy_s"] == pytest.approx(3.0)
    assert line["benchmark_sandbox_idle_s"] == pytest.approx(3.0)
    # gaps: 100.5-101, 103-106, and after the last call to the autotune's end (107-110)
    assert line["idle_gaps"] == [[0.5, 0.5], [3.0, 3.0], [7.0, 3.0]]
    assert bench.timeline([], [], t0, wall=1.0)["first_call_s"] is None


def test_the_compile_timeline_names_what_each_precompile_phase_waited_for() -> None:
    """Each phase says which compile landed last (its end), how long that one sat in kiln's queue
    beside its own compile time, and how many compiles were still out when the phase began."""
    bench = _bench()
    c = bench.Compile
    t0 = 10.0
    compiles = [
        c(10.0, 12.0, 1.5, "ok"),  # phase 1 (10-20): lands at 12
        c(10.0, 20.0, None, "CompileTimeoutError"),  # ...and its last, a timeout at 20
        c(19.0, 30.0, 2.0, "ok"),  # sent before phase 2 (21-31) began, landed in it after a wait
        c(22.0, 24.0, 1.0, "ok"),
        c(22.0, None, None, "out"),  # never landed
    ]
    first, second = bench.compile_timeline(compiles, [(10.0, 10.0), (21.0, 10.0)], t0)
    assert (first["start_s"], first["seconds"], first["landed"]) == (0.0, 10.0, 2)
    assert first["last"] == {
        "sent_s": 0.0,
        "wall_s": 10.0,
        "compile_s": None,
        "outcome": "CompileTimeoutError",
    }
    assert first["compile_s_max"] == 1.5
    assert first["queued_s_max"] == pytest.approx(0.5)
    assert (second["landed"], second["out_at_start"]) == (2, 1)
    assert second["last"]["sent_s"] == 9.0
    assert second["last"]["wall_s"] == 11.0
    assert second["queued_s_max"] == pytest.approx(9.0)  # 11 s out, 2 s of it compiling
    assert first["out_at_end"] == 1  # the one sent at 19 s, during phase 1, landed after it
    assert (second["out_at_end"], second["out_at_end_labels"]) == (1, [""])  # never landed
    assert bench.compile_timeline([], [(10.0, 1.0)], t0) == [
        {"start_s": 0.0, "seconds": 1.0, "landed": 0, "out_at_start": 0}
    ]


@pytest.mark.parametrize("fault_run", [True, False])
def test_a_spawned_child_of_a_fault_run_installs_the_fault_hook(fault_run: bool) -> None:
    """Helion's spawn mode starts its precompile and benchmark workers with multiprocessing's
    spawn, which runs the parent's main script as ``__mp_main__`` (``runpy.run_path``, as here):
    a fault run's faults must reach those compiles as they reach a fork child's, and nothing is
    installed outside a fault run."""
    import os
    import subprocess

    bench = _bench()
    probe = (
        "import runpy, sys\n"
        f"runpy.run_path({str(ROOT / 'bench' / 'helion_autotune.py')!r}, run_name='__mp_main__')\n"
        "helion_faults = sys.modules.get('support.helion_faults')\n"
        "print('HOOK', helion_faults is not None and helion_faults._remove is not None)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != bench.FAULTS_ENV}
    if fault_run:
        env[bench.FAULTS_ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench"), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"HOOK {fault_run}" in done.stdout


def test_a_kiln_runs_compiles_are_recorded_as_they_land(make_pool: Any) -> None:
    """The bench times each compile kiln's loop sends to its pool: a real compile lands ``ok``
    with its own seconds; the same request again is served without a compile (``cached``)."""
    from support.basics import add_request

    bench = _bench()
    pool = make_pool()
    compiles: list[Any] = []
    bench.record_compiles(pool, compiles)
    pool.submit(add_request(block=256)).result(timeout=120)
    pool.submit(add_request(block=256)).result(timeout=120)
    deadline = time.monotonic() + 10  # a future's callbacks run just after its waiters wake
    while any(c.outcome == "out" for c in compiles) and time.monotonic() < deadline:
        time.sleep(0.01)
    first, again = compiles
    assert first.outcome == "ok"
    assert first.compile_s is not None
    assert 0 < first.compile_s <= first.landed - first.sent
    assert (again.outcome, again.compile_s) == ("cached", None)
    assert (
        bench.compile_timeline(compiles, [(first.sent, again.landed - first.sent)], first.sent)[0]["landed"]
        == 2
    )


def test_ptxas_processes_on_the_machine_are_counted(tmp_path: Path) -> None:
    """The count the bench takes as each precompile phase begins sees a running ``ptxas``."""
    import shutil
    import subprocess

    bench = _bench()
    fake = tmp_path / "ptxas"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    process = subprocess.Popen([str(fake), "30"])
    try:
        deadline = time.monotonic() + 5
        while process.pid not in bench.ptxas_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.pid in bench.ptxas_running()
        deadline = time.monotonic() + 5
        while not bench.ptxas_parents() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"{os.getpid()}: " in "\n".join(bench.ptxas_parents())  # this test's process runs it
        process.kill()  # killed, not yet reaped: no longer running
        deadline = time.monotonic() + 5
        while process.pid in bench.ptxas_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.pid not in bench.ptxas_running()
    finally:
        process.kill()
        process.wait()


def test_a_phase_window_ends_where_helions_wait_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ptxas scan (every process, tens of ms on a busy host) runs after the phase: its window
    (start + the probe's seconds) ends where the wait ended, so a compile that lands as the wait
    ends is in its phase, and a ptxas the scan sees outlived every compile of the phase."""
    pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")
    from triton_kiln.helion import adapter, compat

    bench = _bench()

    def slow_scan() -> list[str]:
        time.sleep(0.2)
        return ["123: ptxas's parent"]

    monkeypatch.setattr(bench, "ptxas_parents", slow_scan)
    marks = bench.PhaseMarks()
    with adapter.probe_precompile(on_start=marks.start, on_end=marks.end) as phases:
        before = time.perf_counter()
        compat.PrecompileFuture.wait_for_all([])
        ended = time.perf_counter()
    (phase,) = phases
    assert marks.ptxas == [["123: ptxas's parent"]]  # scanned once, after the phase
    assert phase.seconds < 0.1  # the scan is not in the phase
    assert before <= marks.at[0] <= marks.at[0] + phase.seconds <= ended - 0.15

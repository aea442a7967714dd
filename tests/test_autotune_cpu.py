"""The autotuner's logic on CI: real compiles of real configs, a stand-in for the GPU's timings.

Only the benchmark needs a GPU, so these tests replace it with :class:`FakeBench`, which
returns timings chosen by the test (and, where asked, outputs); compiling, specialization,
pruning, keys, skipping failed configs, pipelining and the tuning database are the real code.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import triton

import triton_kiln as kiln
from support.basics import SM90
from support.kernels import scale_kernel
from triton_kiln.sandbox import BenchOutcome
from triton_kiln.sandbox.native_client import NativeBenchOutcome
from triton_kiln.tuning import TuningDatabase, format_table

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(240)


class FakeBench:
    """Stands in for the GPU: ``runtime_of(config)`` gives each config's time in ms."""

    instances: list[FakeBench] = []

    def __init__(self, tuner: Any, args: Any, kwargs: Any, runtime_of: Any, outputs_of: Any = None) -> None:
        self.tuner = tuner
        self.args = args
        self.runtime_of = runtime_of
        self.outputs_of = outputs_of
        self.calls: list[tuple[str, float, int]] = []
        FakeBench.instances.append(self)

    owns_timing = False  # one pass, like a user do_bench (the two-phase pass has its own test)

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        assert artifact.binary[:4] == b"\x7fELF"  # a real binary reached the benchmark
        pool = self.tuner._get_pool()
        self.calls.append((candidate.label, time.monotonic(), pool.stats.compiled))
        ms = self.runtime_of(candidate.config)
        outputs = self.outputs_of(candidate.config) if self.outputs_of else None
        return BenchOutcome("ok", timings=[ms, ms * 0.9, ms * 1.1], outputs=outputs)

    def user_reference(self) -> dict[str, Any] | None:
        if self.tuner._plan.checks.reference is None:
            return None
        from triton_kiln.autotuner.bench import user_reference as _user_reference

        return _user_reference(self.tuner._plan.checks.reference, self.args, self.tuner.arg_names)

    def finish(self) -> None:
        return None


def by_block(times: dict[int, float]) -> Any:
    return lambda config: times[config.kwargs["BLOCK"]]


def make_tuner(make_pool: Any, tmp_path: Path, configs: list[Any], runtime_of: Any, **kwargs: Any) -> Any:
    pool = kwargs.pop("pool", None) or make_pool(workers=2)
    database = kwargs.pop("database", None) or TuningDatabase(tmp_path / "tuning.sqlite3")
    outputs_of = kwargs.pop("outputs_of", None)
    return kiln.autotune(
        configs,
        key=["n"],
        pool=pool,
        database=database,
        target=SM90,
        **kwargs,
    )(scale_kernel), (lambda tuner, args, kw: FakeBench(tuner, args, kw, runtime_of, outputs_of))


def tune(tuner: Any, bench: Any, n: int = 4096, dtype: Any = None) -> None:
    tuner._bencher_factory = bench
    x = torch.randn(n, dtype=dtype or torch.float32)
    out = torch.empty_like(x)
    tuner.run(x, out, n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=True)


def configs(*blocks: int, warps: int = 4) -> list[Any]:
    return [kiln.Config({"BLOCK": b}, num_warps=warps) for b in blocks]


def test_picks_the_fastest_and_fills_triton_attributes(make_pool: Any, tmp_path: Path) -> None:
    tuner, bench = make_tuner(
        make_pool, tmp_path, configs(64, 128, 256), by_block({64: 3.0, 128: 1.0, 256: 2.0})
    )
    tune(tuner, bench)
    assert tuner.best_config.kwargs == {"BLOCK": 128}
    assert len(tuner.configs_timings) == 3
    assert tuner.configs_timings[tuner.best_config] == [1.0, 0.9, 1.1]
    assert (4096, "torch.float32", "torch.float32") in tuner.cache
    run = tuner.last_run
    assert run.best_label == "BLOCK=128, num_warps=4, num_stages=3, num_ctas=1"
    assert {r.status for r in run.results} == {"ok"}
    assert all(r.compile_s and r.compile_s > 0 for r in run.results)


def test_same_key_does_not_retune_new_key_or_dtype_does(make_pool: Any, tmp_path: Path) -> None:
    FakeBench.instances.clear()
    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 1.0, 128: 2.0}))
    tune(tuner, bench, n=4096)
    tune(tuner, bench, n=4096)
    assert len(FakeBench.instances) == 1
    tune(tuner, bench, n=8192)
    assert len(FakeBench.instances) == 2
    tune(tuner, bench, n=8192, dtype=torch.float16)
    assert len(FakeBench.instances) == 3
    assert len(tuner.cache) == 3


def test_pruning_limits_what_is_compiled_and_benchmarked(make_pool: Any, tmp_path: Path) -> None:
    FakeBench.instances.clear()
    pool = make_pool(workers=2)
    early = lambda cfgs, nargs, **kw: [c for c in cfgs if c.kwargs["BLOCK"] >= 128]  # noqa: E731
    perf = lambda **kw: -kw["BLOCK"]  # noqa: E731 - bigger predicted faster
    tuner, bench = make_tuner(
        make_pool,
        tmp_path,
        configs(32, 64, 128, 256, 512),
        by_block({32: 1, 64: 1, 128: 3.0, 256: 2.0, 512: 1.0}),
        pool=pool,
        prune_configs_by={"early_config_prune": early, "perf_model": perf, "top_k": 2},
    )
    tune(tuner, bench)
    benched = sorted(label for label, _, _ in FakeBench.instances[-1].calls)
    assert benched == [
        "BLOCK=256, num_warps=4, num_stages=3, num_ctas=1",
        "BLOCK=512, num_warps=4, num_stages=3, num_ctas=1",
    ]
    assert pool.stats.dispatched == 2
    assert tuner.best_config.kwargs == {"BLOCK": 512}


def test_failed_compiles_are_skipped_with_their_reason(make_pool: Any, tmp_path: Path) -> None:
    # BLOCK=48 is not a power of two: tl.arange rejects it at compile time.
    tuner, bench = make_tuner(make_pool, tmp_path, configs(48, 128), by_block({48: 0.1, 128: 1.0}))
    tune(tuner, bench)
    assert tuner.best_config.kwargs == {"BLOCK": 128}
    failed = [r for r in tuner.last_run.results if r.status != "ok"]
    assert [r.status for r in failed] == ["compile_error"]
    assert "power of 2" in (failed[0].reason or "")
    assert tuner.configs_timings[configs(48)[0]] == [float("inf")] * 3


def test_every_config_failing_lists_each_reason(make_pool: Any, tmp_path: Path) -> None:
    tuner, bench = make_tuner(make_pool, tmp_path, configs(48, 96), by_block({48: 1.0, 96: 1.0}))
    with pytest.raises(kiln.AutotuneError) as info:
        tune(tuner, bench)
    text = str(info.value)
    assert "BLOCK=48" in text
    assert "BLOCK=96" in text
    assert text.count("compile_error") == 2


def test_a_tuned_meta_parameter_passed_at_call_time_raises_triton_s_value_error(
    make_pool: Any, tmp_path: Path
) -> None:
    """As ``triton.autotune``'s ``_bench`` does: the caller's mistake is a ``ValueError`` naming the
    parameter, not a failed config per config (an ``AutotuneError``), and nothing is benchmarked."""
    FakeBench.instances.clear()
    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 1.0, 128: 2.0}))
    tuner._bencher_factory = bench
    x = torch.randn(4096)
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK") as info:
        tuner.run(x, torch.empty_like(x), 4096, BLOCK=64, grid=(1,), warmup=True)
    assert not isinstance(info.value, kiln.AutotuneError)
    assert FakeBench.instances == []


def test_more_warps_than_a_block_holds_compile_and_are_benchmarked(make_pool: Any, tmp_path: Path) -> None:
    """Triton compiles ``num_warps=64`` and fails only when the binary is loaded (``OutOfResources``:
    threads), inside the benchmark's launch, where ``post_hook`` sees the exception: kiln's checks
    of the options refuse no config that Triton compiles."""
    FakeBench.instances.clear()
    tuner, bench = make_tuner(
        make_pool, tmp_path, [*configs(64, warps=64), *configs(128)], by_block({64: 1.0, 128: 2.0})
    )
    tune(tuner, bench)
    benched = sorted(label for label, _, _ in FakeBench.instances[-1].calls)
    assert benched == [
        "BLOCK=128, num_warps=4, num_stages=3, num_ctas=1",
        "BLOCK=64, num_warps=64, num_stages=3, num_ctas=1",
    ]


def test_wrong_outputs_are_rejected_even_when_fastest(make_pool: Any, tmp_path: Path) -> None:
    good = {"out_ptr": torch.ones(4096)}
    bad = {"out_ptr": torch.ones(4096) * 2}
    tuner, bench = make_tuner(
        make_pool,
        tmp_path,
        configs(64, 128, 256),
        by_block({64: 2.0, 128: 0.5, 256: 1.0}),
        outputs_of=lambda config: bad if config.kwargs["BLOCK"] == 128 else good,
        reference=lambda args: args["out_ptr"].fill_(1.0),
    )
    tune(tuner, bench)
    by_label = {r.label.split(",")[0]: r for r in tuner.last_run.results}
    assert by_label["BLOCK=128"].status == "wrong_output"
    assert by_label["BLOCK=128"].max_abs_diff == pytest.approx(1.0)
    assert tuner.best_config.kwargs == {"BLOCK": 256}


def test_second_tuner_uses_the_database_and_compiles_nothing(make_pool: Any, tmp_path: Path) -> None:
    FakeBench.instances.clear()
    cache = tmp_path / "kiln-cache"
    database = TuningDatabase(tmp_path / "shared.sqlite3")
    first, bench = make_tuner(
        make_pool,
        tmp_path,
        configs(64, 128, 256),
        by_block({64: 3.0, 128: 2.0, 256: 1.0}),
        pool=make_pool(workers=2, cache_dir=cache),
        database=database,
    )
    tune(first, bench)
    assert first.loaded_from is None
    second_pool = make_pool(workers=2, cache_dir=cache, start=False)
    second, bench2 = make_tuner(
        make_pool,
        tmp_path,
        configs(64, 128, 256),
        by_block({64: 9.0, 128: 9.0, 256: 9.0}),
        pool=second_pool,
        database=TuningDatabase(tmp_path / "shared.sqlite3"),
    )
    tune(second, bench2)
    assert second.loaded_from == "database"
    assert second.best_config.kwargs == {"BLOCK": 256}
    assert len(FakeBench.instances) == 1  # the second tuner benchmarked nothing
    assert second_pool.stats.dispatched == 0  # ...and compiled nothing
    assert second.configs_timings[second.best_config][0] == 1.0


def test_benchmarks_start_while_other_configs_still_compile(make_pool: Any, tmp_path: Path) -> None:
    FakeBench.instances.clear()
    blocks = (64, 128, 256, 512, 1024, 2048)
    pool = make_pool(workers=1)
    tuner, bench = make_tuner(make_pool, tmp_path, configs(*blocks), lambda c: 1.0, pool=pool)
    tune(tuner, bench)
    calls = FakeBench.instances[-1].calls
    assert len(calls) == len(blocks)
    # The first benchmark ran when fewer than all configs had compiled: compile and benchmark overlap.
    assert calls[0][2] < len(blocks)


class TwoPhaseBench(FakeBench):
    """Screening times from ``runtime_of``; full-run times from ``final_of``."""

    owns_timing = True

    def __init__(self, *args: Any, final_of: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.final_of = final_of
        self.phases: list[tuple[str, float]] = []

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        self.phases.append((candidate.label.split(",")[0], phase.rep_ms))
        if not phase.check:  # the final round
            ms = self.final_of(candidate.config)
            return BenchOutcome("ok", timings=[ms, ms, ms])
        return super().bench(candidate, artifact, grid, phase)


def tune_two_phase(tuner: Any, screen: dict[int, float], final: dict[int, float]) -> TwoPhaseBench:
    """Tune with screening times ``screen`` and final-round times ``final`` (by BLOCK)."""
    benches: list[TwoPhaseBench] = []

    def factory(t: Any, args: Any, kw: Any) -> TwoPhaseBench:
        benches.append(TwoPhaseBench(t, args, kw, by_block(screen), final_of=by_block(final)))
        return benches[-1]

    tune(tuner, factory)
    return benches[0]


def test_screening_then_full_timing_of_the_best_few(make_pool: Any, tmp_path: Path) -> None:
    blocks = (16, 32, 64, 128, 256, 512, 1024, 2048)
    # screening ranks 16 < 32 < 64, within 5% of each other; the rest are clearly slower...
    screen = {16: 1.0, 32: 1.02, 64: 1.04, **{b: 2.0 + i for i, b in enumerate(blocks[3:])}}
    final = {16: 1.015, 32: 1.01, 64: 1.0}  # ...but timed in full, 64 is the fastest (all within 2%)
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))
    phases = tune_two_phase(tuner, screen, final).phases
    screened = [label for label, rep in phases[: len(blocks)]]
    full = [label for label, rep in phases[len(blocks) :]]
    assert sorted(screened) == sorted(f"BLOCK={b}" for b in blocks)  # every config, once, short
    assert {rep for _, rep in phases[: len(blocks)]} == {tuner._plan.timing.screen_ms[1]}
    # The contenders, after all compiles: three passes in alternating order sharing one rep.
    top = ["BLOCK=16", "BLOCK=32", "BLOCK=64"]
    assert full == top + top[::-1] + top
    assert [rep for _, rep in phases[len(blocks) :]] == [pytest.approx(tuner._plan.timing.rep_ms / 3)] * 9
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert tuner.configs_timings[tuner.best_config] == [1.0, 1.0, 1.0]
    assert tuner.last_run.best_label.startswith("BLOCK=64")


class SlowBench(TwoPhaseBench):
    """Screening calls take ``screen_s``, final-round calls ``final_s`` (real sleeps); with
    ``native_wait_s``, the first call also waits that long for a "sandbox" and says so, as the
    native sandbox's outcome does."""

    def __init__(self, *args: Any, screen_s: float, final_s: float, native_wait_s: float = 0.0, **kw: Any):
        super().__init__(*args, **kw)
        self.screen_s, self.final_s, self.native_wait_s = screen_s, final_s, native_wait_s

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        wait_s = self.native_wait_s if not self.phases else 0.0
        outcome = super().bench(candidate, artifact, grid, phase)
        time.sleep(wait_s + (self.screen_s if phase.check else self.final_s))
        if not self.native_wait_s:
            return outcome
        fields = {name: getattr(outcome, name) for name in BenchOutcome.__dataclass_fields__}
        inside = {"load_s": 0.001, "check_s": 0.002 if phase.check else 0.0, "bench_s": 0.003}
        return NativeBenchOutcome(**fields, sandbox={"wait_s": wait_s, "via": "native", **inside})


@pytest.mark.parametrize("native_wait_s", [0.0, 0.3])
def test_the_run_reports_where_its_wall_time_went(
    make_pool: Any, tmp_path: Path, native_wait_s: float
) -> None:
    blocks = (16, 32, 64, 128, 256, 512)
    screen = {16: 1.0, 32: 1.01, 64: 1.02, 128: 3.0, 256: 4.0, 512: 5.0}  # three contenders
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))

    def factory(t: Any, args: Any, kw: Any) -> SlowBench:
        return SlowBench(
            t, args, kw, by_block(screen), final_of=by_block(screen),
            screen_s=0.02, final_s=0.05, native_wait_s=native_wait_s,
        )  # fmt: skip

    tune(tuner, factory)
    run = tuner.last_run
    split = run.split
    assert split is not None
    parts = {"sandbox_wait_s", "compile_s", "bench_s", "final_s", "other_s"}
    inside = {"sandbox_inputs_s", "sandbox_load_s", "sandbox_check_s", "sandbox_timing_s"}
    assert set(split) == (parts | inside if native_wait_s else parts)
    if native_wait_s:  # what the native sandbox says it spent, summed: 6 screened, 9 final calls
        assert split["sandbox_load_s"] == pytest.approx(15 * 0.001)
        assert split["sandbox_check_s"] == pytest.approx(6 * 0.002)
        assert split["sandbox_timing_s"] == pytest.approx(15 * 0.003)
        assert "in the sandbox: inputs 0.0 s, loading 0.0 s" in format_table(run).splitlines()[-1]
    assert all(seconds >= 0 for seconds in split.values())
    wall = run.wall_s
    # The tuning thread's parts follow one another and make up the wall time; compiling overlaps.
    serial = split["sandbox_wait_s"] + split["bench_s"] + split["final_s"]
    assert serial <= wall + 1e-6
    assert serial + split["other_s"] == pytest.approx(wall, abs=1e-6)
    # The wait the outcome reports is the sandbox's, taken out of the benchmark calls' time.
    assert split["sandbox_wait_s"] == pytest.approx(native_wait_s)
    assert 6 * 0.02 <= split["bench_s"] < 6 * 0.02 + 0.25  # six screening calls
    assert 9 * 0.05 <= split["final_s"] < 9 * 0.05 + 0.25  # three finalists, three passes
    assert max(r.compile_s for r in run.results) <= split["compile_s"] <= wall
    assert "time: " in format_table(run).splitlines()[-1]
    stored = TuningDatabase(tmp_path / "tuning.sqlite3").runs()[0]
    assert stored.split == split


def test_the_screening_alone_never_decides_between_two_ok_configs(make_pool: Any, tmp_path: Path) -> None:
    """A screening taken while the CPU compiles (and the GPU idles between configs)
    ranked a config first by far; timed in full, the runner-up is faster. The two best are
    always timed again, so the one do_bench finds faster wins."""
    blocks = (16, 32, 64, 128)
    screen = {16: 1.0, 32: 1.5, 64: 2.0, 128: 3.0}  # no config within 10% of the fastest
    final = {16: 2.0, 32: 1.0}
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))
    bench = tune_two_phase(tuner, screen, final)
    full = [label for label, _ in bench.phases[len(blocks) :]]
    assert full == ["BLOCK=16", "BLOCK=32"]  # one pass: 16, twice as slow, leaves the race
    assert tuner.best_config.kwargs == {"BLOCK": 32}
    assert tuner.last_run.split["final_s"] > 0.0


class BudgetBench(TwoPhaseBench):
    """Records what each final-round call asks of the GPU: (config, warm-up ms, rep ms)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.final_asks: list[tuple[str, float, float]] = []

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        if not phase.check:
            self.final_asks.append((candidate.label.split(",")[0], phase.warmup_ms, phase.rep_ms))
        return super().bench(candidate, artifact, grid, phase)


def test_the_final_round_costs_one_warm_up_and_each_finalist_one_rep(make_pool: Any, tmp_path: Path) -> None:
    """The final round cost ~0.6 s per kernel, a sixth of a Liger MoE first call. The
    GPU is warmed up once, with do_bench's ``warmup``, before the round's first run (the
    finalists then run back to back: each later call starts with one warm-up call, as every
    later pass always did), and each finalist still racing gets ``rep`` ms of runs over its
    passes. Here all three stay within 2% of each other, so none leaves the race early."""
    blocks = (16, 32, 64, 128, 256)
    screen = {16: 1.0, 32: 1.01, 64: 1.02, 128: 3.0, 256: 4.0}  # three finalists
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))
    benches: list[BudgetBench] = []

    def factory(t: Any, args: Any, kw: Any) -> BudgetBench:
        benches.append(BudgetBench(t, args, kw, by_block(screen), final_of=by_block(screen)))
        return benches[-1]

    tune(tuner, factory)
    asks = benches[0].final_asks
    finalists = ["BLOCK=16", "BLOCK=32", "BLOCK=64"]
    assert sorted({label for label, _, _ in asks}) == finalists
    assert [w for _, w, _ in asks] == [tuner._plan.timing.warmup_ms] + [0.0] * (len(asks) - 1)
    for label in finalists:
        mine = [rep for name, _, rep in asks if name == label]
        assert len(mine) == tuner._plan.timing.final_passes
        assert sum(mine) == pytest.approx(tuner._plan.timing.rep_ms)
    total_ms = sum(w + r for _, w, r in asks)
    timing = tuner._plan.timing
    assert total_ms == pytest.approx(timing.warmup_ms + len(finalists) * timing.rep_ms)


def test_a_finalist_clearly_slower_after_a_pass_leaves_the_race(make_pool: Any, tmp_path: Path) -> None:
    """A finalist whose first pass puts it more than 2% behind the leader, beyond both
    spreads, cannot be the config within 2% of the best: its later passes are not run. One
    within 2% stays for all three passes, and the estimates decide between the two left."""
    blocks = (16, 32, 64, 128)
    screen = {16: 1.0, 32: 1.01, 64: 1.02, 128: 3.0}  # three finalists
    final = {16: 1.0, 32: 1.005, 64: 1.5}  # 64 is 50% behind once timed in full
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))
    bench = tune_two_phase(tuner, screen, final)
    full = [label for label, _ in bench.phases[len(blocks) :]]
    assert full == ["BLOCK=16", "BLOCK=32", "BLOCK=64", "BLOCK=32", "BLOCK=16", "BLOCK=16", "BLOCK=32"]
    assert tuner.best_config.kwargs == {"BLOCK": 16}
    results = {r.label.split(",")[0]: r for r in tuner.last_run.results}
    assert results["BLOCK=64"].runtime_ms == pytest.approx(1.5)  # its time from the pass it ran
    assert results["BLOCK=64"].screen_ms == pytest.approx(1.02)  # and still shown as a finalist
    note = "final round: left after pass 1 of 3, over 2% behind"
    assert note in (results["BLOCK=64"].reason or "")
    assert results["BLOCK=64"].trusted  # a note, not a flag: it stays eligible
    assert results["BLOCK=32"].reason is None
    assert results["BLOCK=16"].reason is None
    assert note in format_table(tuner.last_run)  # what `kiln report` shows


def test_the_race_ends_when_one_finalist_is_left(make_pool: Any, tmp_path: Path) -> None:
    blocks = (16, 32, 64)
    screen = {16: 1.0, 32: 1.05, 64: 3.0}  # two finalists
    final = {16: 1.0, 32: 2.0}
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))
    bench = tune_two_phase(tuner, screen, final)
    assert [label for label, _ in bench.phases[len(blocks) :]] == ["BLOCK=16", "BLOCK=32"]
    assert tuner.best_config.kwargs == {"BLOCK": 16}


@pytest.mark.parametrize(
    ("behind", "leaves"),
    [
        ((1.03, 1.025, 1.035), True),  # 3% behind, its fast end beyond the leader's slow end
        ((1.03, 1.005, 1.06), False),  # 3% behind, but the spreads overlap: noise, it stays
        ((1.015, 1.012, 1.018), False),  # beyond the spreads, but within 2%: it may be the best
    ],
)
def test_who_leaves_the_race(behind: tuple[float, float, float], leaves: bool) -> None:
    from triton_kiln.autotuner.final_round import outpaced

    estimates = {"leader": [1.0, 0.995, 1.005], "other": list(behind)}
    assert outpaced(estimates, 0.02) == ({"other"} if leaves else set())
    assert outpaced({"alone": [1.0, 1.0, 1.0]}, 0.02) == set()


@pytest.mark.parametrize(
    ("medians", "tied_"),
    [
        ((1.0, 1.004, 1.005), True),  # every median within 0.5% of the leader's
        ((1.0, 1.004, 1.006), False),  # one just beyond it
        ((1.0,), True),
    ],
)
def test_when_the_finalists_left_are_tied(medians: tuple[float, ...], tied_: bool) -> None:
    from triton_kiln.autotuner.final_round import tied

    estimates = {str(i): [m, m * 0.99, m * 1.01] for i, m in enumerate(medians)}
    assert tied(estimates, 0.005) is tied_
    assert tied({}, 0.005) is False


class SampledBench(TwoPhaseBench):
    """The final round's passes send every run back (as both sandboxes do when asked)."""

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        if phase.check:
            return super().bench(candidate, artifact, grid, phase)
        assert phase.samples, "the final round must ask for every run"
        self.phases.append((candidate.label.split(",")[0], phase.rep_ms))
        runs = self.final_of(candidate.config)[
            len([p for p in self.phases if p[0] == candidate.label.split(",")[0]]) - 2
        ]
        median = statistics.median(runs)
        return BenchOutcome("ok", timings=[median, min(runs), max(runs)], samples=list(runs))


def test_the_final_round_pools_every_run_into_do_bench_median(make_pool: Any, tmp_path: Path) -> None:
    """A finalist's time is do_bench's median of all its runs (three passes pooled), not the
    median of the passes' medians: here the pass medians favour 16, the pooled runs 32."""
    from triton_kiln.sandbox.timing import quantiles

    blocks = (16, 32)
    screen = {16: 1.0, 32: 1.01}
    passes = {  # per pass, each run's ms
        16: [[1.0, 1.0, 5.0], [1.0, 1.0, 5.0], [5.0, 5.0, 5.0, 5.0, 5.0]],
        32: [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0]],
    }
    tuner, _ = make_tuner(make_pool, tmp_path, configs(*blocks), by_block(screen))
    benches: list[SampledBench] = []

    def factory(t: Any, args: Any, kw: Any) -> SampledBench:
        benches.append(SampledBench(t, args, kw, by_block(screen), final_of=by_block(passes)))
        return benches[-1]

    tune(tuner, factory)
    pooled_16 = [ms for run in passes[16] for ms in run]
    assert tuner.configs_timings[tuner.configs[0]] == pytest.approx(quantiles(pooled_16, (0.5, 0.2, 0.8)))
    assert tuner.best_config.kwargs == {"BLOCK": 32}


def test_contenders_follow_the_spread_of_the_screening() -> None:
    from triton_kiln.autotuner.final_round import contenders
    from triton_kiln.tuning.results import ConfigResult

    def result(label: str, p50: float, p20: float, p80: float, status: str = "ok") -> ConfigResult:
        return ConfigResult(label, {}, status, runtime_ms=p50, runtime_ms_p20=p20, runtime_ms_p80=p80)

    class C:
        def __init__(self, label: str) -> None:
            self.label = label

    rows = {
        "a": result("a", 1.00, 0.99, 1.01),
        "b": result("b", 1.08, 1.05, 1.10),  # its fast end is within 5% of a's slow end
        "c": result("c", 1.20, 1.15, 1.25),
        "d": result("d", 0.50, 0.50, 0.50, status="bench_crashed"),
    }
    cands = [C(k) for k in rows]
    assert [c.label for c in contenders(cands, rows, 0.05, (1, 5))] == ["a", "b"]  # type: ignore[arg-type]
    assert [c.label for c in contenders(cands, rows, 0.05, (3, 5))] == ["a", "b", "c"]  # type: ignore[arg-type]
    assert [c.label for c in contenders(cands, rows, 0.5, (1, 2))] == ["a", "b"]  # type: ignore[arg-type]
    noisy = {**rows, "a": result("a", 1.00, 0.80, 1.20)}  # a noisy screening widens the race
    assert [c.label for c in contenders(cands, noisy, 0.05, (1, 5))] == ["a", "b", "c"]  # type: ignore[arg-type]


def test_only_trusted_configs_race_unless_the_output_check_trusts_none() -> None:
    """A config the output check flagged never wins over a trusted one: it is not
    timed again in the final round; when every ok config is flagged, all of them race."""
    from triton_kiln.autotuner.final_round import contenders, eligible
    from triton_kiln.tuning.results import ConfigResult

    flag = "flagged: out_ptr: configs disagree (2 + 1 of 3); no clear majority"

    def result(label: str, ms: float, reason: str | None = None) -> ConfigResult:
        return ConfigResult(label, {}, "ok", reason, runtime_ms=ms, runtime_ms_p20=ms, runtime_ms_p80=ms)

    class C:
        def __init__(self, label: str) -> None:
            self.label = label

    rows = {
        "fast": result("fast", 0.5, flag),
        "b": result("b", 1.00),
        "c": result("c", 1.02, "x_ptr not checked: it differs between configs as BLOCK does"),
    }
    cands = [C(k) for k in rows]
    assert [c.label for c in eligible(cands, rows)] == ["b", "c"]  # type: ignore[arg-type]
    assert [c.label for c in contenders(cands, rows, 0.05, (1, 5))] == ["b", "c"]  # type: ignore[arg-type]
    every = {k: result(k, r.runtime_ms or 0.0, flag) for k, r in rows.items()}
    assert [c.label for c in contenders(cands, every, 0.05, (1, 5))] == ["fast"]  # type: ignore[arg-type]
    assert [c.label for c in eligible(cands, every)] == ["fast", "b", "c"]  # type: ignore[arg-type]


def test_one_pass_tuning_has_no_final_round_time(make_pool: Any, tmp_path: Path) -> None:
    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}))
    tune(tuner, bench)
    split = tuner.last_run.split
    assert split["final_s"] == 0.0
    assert split["sandbox_wait_s"] == 0.0  # in-process: no sandbox
    assert 0 < split["compile_s"] <= tuner.last_run.wall_s


def test_precompile_returns_at_once_and_the_first_call_reuses_its_compiles(
    make_pool: Any, tmp_path: Path
) -> None:
    pool = make_pool(workers=2)
    tuner, bench = make_tuner(
        make_pool, tmp_path, configs(64, 128, 256), by_block({64: 3.0, 128: 1.0, 256: 2.0}), pool=pool
    )
    x = torch.randn(4096)
    out = torch.empty_like(x)
    futures = kiln.precompile(tuner, x, out, 4096)
    assert len(futures) == 3
    assert not any(f.done() for f in futures)  # returned at once: the (cold) pool is still compiling
    tune(tuner, bench)
    assert pool.stats.dispatched == 3  # the call compiled nothing more
    assert pool.stats.deduplicated + pool.stats.memory_hits == 3  # it waited on precompile's work
    assert tuner.best_config.kwargs == {"BLOCK": 128}


def test_definition_time_precompile_with_dtypes_matches_real_calls(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    tuner = kiln.autotune(
        configs(64, 128),
        key=["n"],
        pool=pool,
        target=SM90,
        database=False,
        precompile=[(torch.float32, torch.float32, 4096)],
    )(scale_kernel)
    assert pool.stats.submitted == 2  # started at definition time
    x = torch.randn(4096)
    futures = kiln.precompile(tuner, x, torch.empty_like(x), 4096)  # what a real call would need
    for future in futures:
        assert future.result().binary
    assert pool.stats.dispatched == 2  # the real arguments needed nothing the dtypes had not started


def test_precompile_rejects_a_plain_jit_kernel() -> None:
    with pytest.raises(TypeError, match=r"kiln\.autotune"):
        kiln.precompile(scale_kernel, torch.randn(8), torch.randn(8), 8)


def test_a_config_listed_twice_is_tuned_once_and_timed_for_both(make_pool: Any, tmp_path: Path) -> None:
    """torchao's ``_scaled_int8_mm_kernel`` lists one config twice (its config list is built from
    products that overlap); Triton tunes such a list, and so must kiln: the duplicate is compiled
    and benchmarked once and has its timings in ``configs_timings``."""
    FakeBench.instances.clear()
    listed = [*configs(64, 128, 256), *configs(128)]
    tuner, bench = make_tuner(make_pool, tmp_path, listed, by_block({64: 3.0, 128: 1.0, 256: 2.0}))
    tune(tuner, bench)
    assert tuner.best_config.kwargs == {"BLOCK": 128}
    assert [label for label, _, _ in FakeBench.instances[-1].calls].count(
        "BLOCK=128, num_warps=4, num_stages=3, num_ctas=1"
    ) == 1
    # (Triton's Config compares by value, so the two are one key of configs_timings, as in Triton)
    assert tuner.configs_timings[listed[3]] == tuner.configs_timings[listed[1]] == [1.0, 0.9, 1.1]
    assert len(tuner.last_run.results) == 3


def test_same_label_with_another_pre_hook_is_a_config_of_its_own(make_pool: Any, tmp_path: Path) -> None:
    """Two configs that print alike but set up the call differently (their ``pre_hook``) are
    both tuned, under labels kept apart."""
    FakeBench.instances.clear()
    first = kiln.Config({"BLOCK": 128}, num_warps=4, pre_hook=lambda nargs: None)
    second = kiln.Config({"BLOCK": 128}, num_warps=4, pre_hook=lambda nargs: None)
    tuner, bench = make_tuner(
        make_pool, tmp_path, [first, second], lambda config: 2.0 if config is first else 1.0
    )
    tune(tuner, bench)
    assert tuner.best_config is second
    assert len({label for label, _, _ in FakeBench.instances[-1].calls}) == 2


def test_a_tuning_gives_the_callers_triton_kilns_key(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's own plain @triton.jit kernels paid Triton's key (hashing
    libtriton.so). The first tuning needs kiln's key anyway, and hands it to the caller's Triton
    (once per process), even where nothing was prewarmed (no GPU seen at definition)."""
    from triton_kiln import triton_compat

    seeded: list[Any] = []
    monkeypatch.setattr(triton_compat.core, "_CALLER_SEEDED", False)
    monkeypatch.setattr(triton_compat.core, "seed_triton_key", lambda key: seeded.append(key) or True)
    tuner, bench = make_tuner(make_pool, tmp_path, configs(16, 32), by_block({16: 1.0, 32: 2.0}))
    tune(tuner, bench)
    tune(tuner, bench, n=8192)  # another key: the caller's Triton was seeded once
    assert len(seeded) == 1  # Triton asks kiln's triton_key (the stored key, or computed once)
    assert seeded[0]() == triton_compat.triton_key(tuner._settings.triton_key_dir)


def test_the_split_breaks_the_checked_run_down_where_the_sandbox_says() -> None:
    """The native sandbox reports its checked run's parts (the run, the comparison, the host
    reads and hashes naming new outputs); the split sums them beside ``sandbox_check_s``, and
    leaves them out where no sandbox reported them."""
    from triton_kiln.autotuner.timesplit import TimeSplit

    split = TimeSplit()
    parts = {"check_s": 0.02, "check_run_s": 0.004, "check_compare_s": 0.015, "check_fingerprint_s": 0.012}
    for _ in range(3):
        split.saw(NativeBenchOutcome("ok", [1.0, 1.0, 1.0], sandbox={"via": "native", **parts}), 0.05)
    got = split.as_dict(time.monotonic(), 1.0)
    assert got["sandbox_check_s"] == pytest.approx(0.06)
    assert got["sandbox_check_run_s"] == pytest.approx(0.012)
    assert got["sandbox_check_compare_s"] == pytest.approx(0.045)
    assert got["sandbox_check_fingerprint_s"] == pytest.approx(0.036)
    older = TimeSplit()  # a sandbox that reports no parts: no keys for them
    older.saw(NativeBenchOutcome("ok", [1.0, 1.0, 1.0], sandbox={"via": "native", "check_s": 0.02}), 0.05)
    breakdown = {"sandbox_check_run_s", "sandbox_check_compare_s", "sandbox_check_fingerprint_s"}
    assert breakdown.isdisjoint(older.as_dict(time.monotonic(), 1.0))


@pytest.mark.parametrize(
    ("given", "in_process", "owns_timing"),
    [
        ({}, False, True),  # the sandbox, kiln's lengths
        ({"config_pre_hook": True}, True, True),  # hooks: in-process, still kiln's lengths
        ({"pre_hook": True}, True, True),
        ({"do_bench": True}, True, False),  # the user's timing: once per config, theirs
        ({"config_pre_hook": True, "do_bench": True}, True, False),
    ],
)
def test_hooks_keep_a_run_in_process_but_leave_its_timing_to_kiln(
    make_pool: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: dict[str, bool],
    in_process: bool,
    owns_timing: bool,
) -> None:
    """Hooks (a config's ``pre_hook``, the tuner's ``pre_hook``/``post_hook``) must run in the
    caller's process, but they do not decide how long a config is timed: kiln screens with short
    runs and races the contenders there too. A custom ``do_bench`` decides it: each config is
    timed once, with it, as ``triton.autotune`` does."""
    from triton_kiln.autotuner import bench as bench_module

    def hook(nargs: dict[str, Any]) -> None:
        return None

    chosen = [
        kiln.Config({"BLOCK": 64}, num_warps=4, pre_hook=hook if given.get("config_pre_hook") else None)
    ]
    extra: dict[str, Any] = {}
    if given.get("pre_hook"):
        extra["pre_hook"] = hook
    if given.get("do_bench"):
        extra["do_bench"] = lambda fn, quantiles=None: [1.0, 1.0, 1.0]
    tuner, _ = make_tuner(make_pool, tmp_path, chosen, by_block({64: 1.0}), sandbox=True, **extra)
    monkeypatch.setattr(bench_module, "require_gpu", lambda *args: None)  # no GPU is asked for here
    if not in_process:
        monkeypatch.setattr(bench_module, "SandboxBencher", lambda *args, **kwargs: "sandbox")
    made = bench_module.make_bencher(tuner._plan, tuner._services, [], {})
    if not in_process:
        assert made == "sandbox"
        return
    assert isinstance(made, bench_module.InProcessBencher)
    assert made.user_code
    assert made.owns_timing is owns_timing
    assert made.snapshot is None  # no output check where user code runs in the loop

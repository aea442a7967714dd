"""kiln's final round for Helion's finalists (``KILN_HELION_FINAL_ROUND``), on the CPU: Helion's real
``final_rebenchmark_best`` (its finalists, its pick, its state updates) over configs Helion really
benchmarked (real Triton compiles for sm_90 in kiln's pool), with its final verification's timing
answered by kiln's race in the stand-in sandbox (:mod:`support.helion_sandbox`), which sends back
each finalist's runs at the time a test gives its generated code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")

import helion.runtime
from helion.autotuner import base_search
from helion.autotuner.base_search import PopulationBasedSearch, PopulationMember

import triton_kiln as kiln
import triton_kiln.helion
from support import helion_faults
from support.basics import SM90
from support.helion_sandbox import StandInSandbox, job_source
from test_helion_loop import _configs, _crashed, _is_faulty, _search
from triton_kiln import CompilePool, settings
from triton_kiln.helion import compat, finalists
from triton_kiln.helion.sandbox_jobs import FinalistRunsJob

TARGET_MS = 5000.0  # Helion's default final-verification target per finalist
ROUND_MS = 1000.0  # what kiln's round gives a finalist racing to the end (finalists.ROUND_MS)


@pytest.fixture
def loop(make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInSandbox]:
    """kiln's pool (sm_90) and a stand-in sandbox configured for Helion; a fake SM count."""
    monkeypatch.setattr(helion.runtime, "get_num_sm", lambda device, reserved_sms=0: 132)
    sandbox = StandInSandbox()
    previous = kiln.helion.configure(
        pool=make_pool(preload=[helion_faults.PRELOAD]), target=SM90, sandbox=sandbox
    )
    with settings.scope(helion_sandbox=True):  # kiln's loop (KILN_HELION_SANDBOX)
        yield sandbox
    kiln.helion.configure(pool=previous.pool, target=previous.target, sandbox=previous.sandbox)


def _quick_search() -> Any:
    """A search at effort quick: its final pick is the final verification (no final selection)."""
    search = _search(autotune_effort="quick")
    assert not search._final_selection_enabled()
    return search


def _finalists(search: Any, screened: Sequence[float]) -> list[Any]:
    """Helion's members for ``len(screened)`` configs it benchmarked through kiln (the last has 16
    warps), their search timings set to ``screened``."""
    results = search.benchmark_provider.benchmark(_configs(search, len(screened)))
    assert [r.status for r in results] == ["ok"] * len(screened)
    return [PopulationMember(r.fn, [ms], [], r.config, "ok") for r, ms in zip(results, screened, strict=True)]


def _race_at(loop: StandInSandbox, search: Any, members: Sequence[Any], true_ms: Sequence[float]) -> None:
    """The stand-in sandbox times each member's generated code at ``true_ms`` (+-1% spread)."""
    provider = search.benchmark_provider
    sources = {
        job_source(compat.finalist_job(provider, m.fn, 1, provider.sandbox_worker.capture)): ms
        for m, ms in zip(members, true_ms, strict=True)
    }
    assert len(sources) == len(members)
    loop.runs = lambda job: [sources[job_source(job)] * (1 + 0.002 * k) for k in range(-5, 6)]


def _verify(search: Any, members: list[Any]) -> Any:
    """Helion's final verification of ``members`` (the search's population), as ``_finalize`` runs it."""
    search.population = members
    search.best_perf_so_far = min(m.perf for m in members)
    return search.final_rebenchmark_best(min(members, key=lambda m: m.perf))


def _copies(members: Sequence[Any]) -> list[Any]:
    return [dataclasses.replace(m, perfs=list(m.perfs)) for m in members]


def _entries(record: finalists.FinalRoundRecord, members: Sequence[Any]) -> list[finalists.FinalistRecord]:
    """The round's record of each of ``members``, in their order (the record is in Helion's
    finalist order)."""
    by_config = {e.config: e for e in record.finalists}
    return [by_config[str(m.config)] for m in members]


def _passes(loop: StandInSandbox) -> list[Any]:
    return [job for job in loop.jobs if isinstance(job, FinalistRunsJob)]


def test_the_finalists_race_and_the_slow_ones_leave_after_one_short_pass(loop: StandInSandbox) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    # the search's timings rank them 2, 1, 3, 0, all within 10% of the fastest: all four race
    members = _finalists(search, [1.04, 1.02, 1.0, 1.03])
    _race_at(loop, search, members, [1.0, 1.3, 2.0, 1.01])
    picked = _verify(search, members)
    assert picked is members[0]  # the best time in the race, not the search's best
    (record,) = search.benchmark_provider.final_rounds
    # Helion's finalist order (by search timing); a finalist racing to the end gets ROUND_MS of
    # runs (less than Helion's 5000 ms target), in PASSES passes
    entries = _entries(record, members)
    assert [e.passes for e in entries] == [finalists.PASSES, 1, 1, finalists.PASSES]
    assert [e.left_after for e in entries] == [None, 1, 1, None]
    assert record.winner == str(members[0].config)
    assert (record.target_ms, record.window_ms) == (TARGET_MS, ROUND_MS)
    pass_ms = ROUND_MS / finalists.PASSES
    assert sum(e.window_ms for e in entries) == 2 * ROUND_MS + 2 * pass_ms
    assert len(_passes(loop)) == 2 * finalists.PASSES + 2
    first = [job.job.warmup for job in _passes(loop)]
    assert first[0] == finalists.FIRST_WARMUP_MS
    assert set(first[1:]) == {1}
    assert {job.job.rep for job in _passes(loop)} == {int(pass_ms)}
    # the wall time of each finalist's passes, and of the round, as the autotuning process waited
    assert all(e.wall_s > 0 for e in entries)
    assert record.wall_s >= sum(e.wall_s for e in entries)
    # each finalist's time is the median of its runs, appended as Helion appends its timings
    assert [m.perf for m in members] == pytest.approx([1.0, 1.3, 2.0, 1.01])
    assert search.best_perf_so_far == pytest.approx(1.0)
    assert all(e.raced for e in entries)
    search.benchmark_provider.cleanup()


def test_finalists_well_behind_in_the_search_do_not_race(loop: StandInSandbox) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [1.0, 1.3, 2.0, 1.01])  # two more than 10% behind the fastest
    _race_at(loop, search, members, [1.0, 1.3, 2.0, 1.01])
    assert _verify(search, members) is members[0]
    (record,) = search.benchmark_provider.final_rounds
    entries = _entries(record, members)
    assert [e.raced for e in entries] == [True, False, False, True]
    assert [e.passes for e in entries] == [finalists.PASSES, 0, 0, finalists.PASSES]
    assert [e.search_ms for e in entries] == [1.0, 1.3, 2.0, 1.01]
    assert len(_passes(loop)) == 2 * finalists.PASSES  # no job for the two left out
    # the two that did not race leave Helion's pick, as a finalist whose recheck fails does
    assert [m.perf for m in members] == pytest.approx([1.0, math.inf, math.inf, 1.01])
    assert [m.status for m in members] == ["ok"] * 4
    search.benchmark_provider.cleanup()


def test_a_search_timing_never_competes_with_a_raced_time(loop: StandInSandbox) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    # every config runs 20% slower in the race than in the search's short window, as a
    # compute-bound kernel on a cool GPU does; 2 is 15% behind 0 in the search
    members = _finalists(search, [1.0, 1.01, 1.15])
    _race_at(loop, search, members, [1.2, 1.21, 1.38])
    # 2's search timing beats the raced ones, but not 0's search timing: it does not race,
    # and Helion's pick, which compares perfs, does not take it on its search timing
    assert _verify(search, members) is members[0]
    (record,) = search.benchmark_provider.final_rounds
    entries = _entries(record, members)
    assert [e.raced for e in entries] == [True, True, False]
    assert [e.passes for e in entries] == [finalists.PASSES, finalists.PASSES, 0]
    assert math.isinf(members[2].perf)
    search.benchmark_provider.cleanup()


def test_at_most_five_finalists_within_the_margin_race(loop: StandInSandbox) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    # seven finalists within 1% of each other in the search, as a memory-bound kernel's are
    searched = [1.0 + 0.001 * k for k in range(7)]
    members = _finalists(search, searched)
    _race_at(loop, search, members, searched)
    assert _verify(search, members) is members[0]
    (record,) = search.benchmark_provider.final_rounds
    entries = _entries(record, members)
    # the five fastest in the search race; the two left out are slower in the search than
    # the winner, so they never race it, and they leave Helion's pick
    assert [e.raced for e in entries] == [True] * 5 + [False] * 2
    assert finalists.MOST_RACED == 5
    assert [math.isfinite(m.perf) for m in members] == [True] * 5 + [False] * 2
    search.benchmark_provider.cleanup()


def test_a_finalist_left_out_races_the_winner_where_its_search_timing_is_not_above_the_winners(
    loop: StandInSandbox,
) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    # seven finalists tied in the search: the first five race, tie (the round settles after
    # two passes) and 0 wins; 5 and 6, as fast as 0 in the search, then race 0, and 6 wins
    members = _finalists(search, [1.0] * 7)
    _race_at(loop, search, members, [1.3] * 6 + [1.1])
    assert _verify(search, members) is members[6]
    (record,) = search.benchmark_provider.final_rounds
    entries = _entries(record, members)
    assert all(e.raced for e in entries)
    assert [e.passes for e in entries] == [3, 2, 2, 2, 2, 1, 1]
    assert [e.left_after for e in entries] == [1, None, None, None, None, 1, None]
    assert record.winner == str(members[6].config)
    assert [m.perf for m in members] == pytest.approx([1.3] * 6 + [1.1])
    search.benchmark_provider.cleanup()


def test_the_round_ends_once_the_finalists_left_are_tied(loop: StandInSandbox) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [1.0, 1.01, 1.02])
    _race_at(loop, search, members, [1.0, 1.003, 1.5])  # 0 and 1 within 0.5%: tied
    assert _verify(search, members) is members[0]
    (record,) = search.benchmark_provider.final_rounds
    # 2 leaves after the first pass; 0 and 1 stop after the second, not the fifth
    assert [e.passes for e in _entries(record, members)] == [2, 2, 1]
    assert finalists.SETTLED == 0.005
    search.benchmark_provider.cleanup()


def test_a_shorter_helion_target_is_the_rounds_window(
    loop: StandInSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELION_AUTOTUNE_FINAL_REBENCHMARK_TARGET_MS", "500")
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [0.3, 0.2])
    _race_at(loop, search, members, [1.0, 1.012])  # too close to part, not tied: both race to the end
    _verify(search, members)
    (record,) = search.benchmark_provider.final_rounds
    assert (record.target_ms, record.window_ms) == (500.0, 500.0)
    assert {job.job.rep for job in _passes(loop)} == {int(500 / finalists.PASSES)}
    assert [e.window_ms for e in record.finalists] == [500.0, 500.0]
    search.benchmark_provider.cleanup()


def test_the_round_ends_when_one_finalist_is_left(loop: StandInSandbox) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [1.05, 1.0, 1.08])  # all within 10%: all race
    _race_at(loop, search, members, [2.0, 1.0, 1.5])
    assert _verify(search, members) is members[1]
    assert len(_passes(loop)) == 3  # one pass each: the two behind left, one was left
    (record,) = search.benchmark_provider.final_rounds
    assert sorted(e.passes for e in record.finalists) == [1, 1, 1]
    search.benchmark_provider.cleanup()


def test_helions_state_after_the_race_is_what_its_own_verification_sets_for_that_winner(
    loop: StandInSandbox, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [0.3, 0.31, 0.32])  # all within 10%: all race
    helions_members = _copies(members)
    _race_at(loop, search, members, [1.2, 1.0, 1.8])
    kilns = _verify(search, members)
    kilns_best = search.best_perf_so_far
    (record,) = search.benchmark_provider.final_rounds
    timed = {e.config: e.ms for e in record.finalists}

    # Helion's own final verification, its interleaved bench measuring what the race measured
    calls: list[int] = []

    def interleaved(fns: list[Any], **kwargs: Any) -> list[float]:
        calls.append(len(fns))
        return [timed[str(m.config)] for m in order]

    order = sorted(helions_members, key=lambda m: m.perf)  # Helion's finalist order
    monkeypatch.setattr(base_search, "interleaved_bench", interleaved)
    search.population = helions_members
    search.best_perf_so_far = min(m.perf for m in helions_members)
    helions = compat.HELION_FINAL_REBENCHMARK_BEST(search, min(helions_members, key=lambda m: m.perf))
    assert calls == [3]
    assert helions.config == kilns.config == members[1].config
    assert [m.perfs for m in helions_members] == [m.perfs for m in members]
    assert search.best_perf_so_far == kilns_best
    # Helion's own log line for a changed pick, in both
    assert capfd.readouterr().err.count("Final verification selected a different config") == 2
    search.benchmark_provider.cleanup()


def test_a_finalist_that_faults_in_the_sandbox_leaves_the_race_with_its_reason(
    loop: StandInSandbox, capfd: pytest.CaptureFixture[str]
) -> None:
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [0.31, 0.32, 0.3])  # all within 10%: all race
    _race_at(loop, search, members, [1.0, 1.01, 0.5])  # the faulting one (16 warps) would win
    loop.fail = lambda job, label: (
        _crashed(job, label) if isinstance(job, FinalistRunsJob) and _is_faulty(job) else None
    )
    starts = loop.starts
    picked = _verify(search, members)
    assert picked is members[0]
    assert math.isinf(members[2].perf)  # out of Helion's pick, as its own worker's error
    (record,) = search.benchmark_provider.final_rounds
    faulted = next(e for e in record.finalists if e.config == str(members[2].config))
    assert faulted.ms is None
    assert "SIGSEGV" in (faulted.failure or "")
    assert faulted.passes == 0
    # logged as Helion logs a failed finalist, and the sandbox replaced at once
    logged = [line for line in capfd.readouterr().err.splitlines() if "subprocess failed" in line]
    assert len(logged) == 1
    assert "Final verification top 3 configs subprocess failed: " in logged[0]
    assert "SIGSEGV" in logged[0]
    assert loop.starts == starts + 1
    assert [s.reason for s in search.benchmark_provider.sandbox_worker.stats.skipped if "SIGSEGV" in s.reason]
    search.benchmark_provider.cleanup()


def test_with_the_setting_off_helions_final_verification_runs_untouched(
    loop: StandInSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = PopulationBasedSearch.__dict__["final_rebenchmark_best"]
    with settings.scope(helion_final_round=False):  # KILN_HELION_FINAL_ROUND=0
        search = _quick_search()
        assert "final_rebenchmark_best" not in search.__dict__
        kiln.helion.install()
        try:
            assert PopulationBasedSearch.__dict__["final_rebenchmark_best"] is original
        finally:
            kiln.helion.uninstall()
    calls: list[dict[str, Any]] = []

    def interleaved(fns: list[Any], **kwargs: Any) -> list[float]:
        calls.append(kwargs)
        return [1.0 + i for i in range(len(fns))]

    monkeypatch.setattr(base_search, "interleaved_bench", interleaved)
    members = _finalists(search, [0.5, 0.4, 0.3])
    _verify(search, members)
    assert len(calls) == 1
    assert calls[0]["max_total_ms"] == TARGET_MS * 3
    assert _passes(loop) == []
    assert search.benchmark_provider.final_rounds == []
    search.benchmark_provider.cleanup()


def test_install_hooks_every_search_and_uninstall_restores_helions_method(loop: StandInSandbox) -> None:
    original = PopulationBasedSearch.__dict__["final_rebenchmark_best"]
    with settings.scope(helion_final_round=True):
        kiln.helion.install()
    try:
        assert finalists.installed()
        assert PopulationBasedSearch.__dict__["final_rebenchmark_best"] is finalists.final_rebenchmark_best
    finally:
        kiln.helion.uninstall()
    assert PopulationBasedSearch.__dict__["final_rebenchmark_best"] is original
    assert not finalists.installed()


def test_helions_isolated_final_verification_stays_helions(
    loop: StandInSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELION_AUTOTUNE_FINAL_REBENCHMARK_ISOLATED", "1")
    with settings.scope(helion_final_round=True):
        search = _quick_search()
    members = _finalists(search, [0.5, 0.4, 0.3])
    jobs = len(loop.jobs)
    _verify(search, members)
    assert _passes(loop) == []
    assert search.benchmark_provider.final_rounds == []
    isolated = [job for job in loop.jobs[jobs:] if isinstance(job, compat.BenchmarkJob)]
    assert len(isolated) == 3  # Helion's own isolated timing, one job per finalist, in kiln's sandbox
    search.benchmark_provider.cleanup()

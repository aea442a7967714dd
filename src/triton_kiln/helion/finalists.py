"""kiln's final round for Helion's finalists (``KILN_HELION_FINAL_ROUND``, on by default).

Helion ends a search by re-timing its finalists (``final_rebenchmark_best``, see
:mod:`triton_kiln.helion.compat`): where its effort profile has no final selection (effort
``quick`` on 1.5.1, every effort on 1.5.0) every finalist, up to 8 plus pinned seeds, is timed
in Helion's interleaved bench in the autotuning process (``target_ms``, 5000 ms by default, sizes
its repeats), whether it is close to the leader or far behind. With the setting on, that one
``rebenchmark`` call is answered by kiln's final round instead::

    Helion final_rebenchmark_best (unchanged: picks the finalists)
      self.rebenchmark(finalists, desc="Final verification top n configs", ...)  <- kiln's
        each finalist's BenchmarkJob, built by Helion                 (kiln's sandbox process)
        the contenders race: search timing within 10% of the fastest's, at least two and at
          most five, fastest first (kiln's autotuner's contenders), and the pinned seeds
        pass 1: each contender once, window_ms / PASSES ms  ------->  FinalistRunsJob: every run
        a finalist clearly behind the leader leaves (kiln's rule,
          triton_kiln.autotuner.final_round.Race / outpaced); a finalist that faults leaves
          with its reason, logged as Helion logs a failed finalist
        pass 2 ... until one is left, those left are tied within SETTLED, or PASSES passes
          are spent
        a finalist left out whose search timing is not above the winner's search timing races
          the winner in a further round, until none is (like with like: a search timing,
          taken in a short window on a cool GPU, can read well below the same config's raced
          time, 10% on an H100's matmul)
        each raced finalist's time (median of its runs) -> Helion's
          _resolve_isolated_rebenchmark_results and _apply_rebenchmark_timings (perfs,
          best_perf_so_far, trace, finalist history); one that did not race leaves Helion's
          ranking as a finalist whose recheck fails does (an infinite timing, its benchmark
          status and the trace untouched), so the pick compares raced times only
      Helion picks the live finalist with the lowest perf (pinned tolerance, its log), as always

A finalist that stays to the end gets ``window_ms`` of runs in all (:data:`ROUND_MS`, or
Helion's ``target_ms`` where that is shorter); one that leaves after pass ``k`` got ``k``
passes. Where no raced finalist gets a time (each faulted), the finalists that did not race
keep their search timings and Helion picks among them. Helion's search, effort profiles,
cache and its final selection (1.5.1's effort ``full``, already in kiln's sandbox) are
untouched. Helion's own final verification runs instead when the config cannot go to a
worker (mutated arguments, unpicklable arguments, a distributed run,
``autotune_benchmark_subprocess=False``,
``KILN_HELION_SANDBOX=0``), when a custom ``autotune_benchmark_fn`` times configs, or with
``HELION_AUTOTUNE_FINAL_REBENCHMARK_ISOLATED=1`` (a fresh process per finalist, Helion's).
"""

from __future__ import annotations

import functools
import math
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.autotuner.final_round import Race
from triton_kiln.autotuner.plan import Timing
from triton_kiln.helion import compat
from triton_kiln.helion.sandbox_worker import KilnBenchmarkWorker
from triton_kiln.sandbox.timing import quantiles

PASSES = 5
"""The round's pass budget: each pass times every finalist still racing for ``window_ms /
PASSES`` ms."""

ROUND_MS = 1000.0
"""The runs a finalist still racing at the end gets in all (``window_ms``; Helion's ``target_ms``,
``HELION_AUTOTUNE_FINAL_REBENCHMARK_TARGET_MS``, where that is shorter). Ten times Triton's
``do_bench`` window: thousands of runs of a kernel under a millisecond, in passes that
alternate between the finalists so drift hits them alike. Helion's 5000 ms sizes the repeats of
its interleaved bench, whose sweeps are cheap; a pass of kiln's race is one sandbox call per
finalist, and at 1000 ms a pass (Helion's 5000 ms over five) the round of a Helion matmul took
40 s on an H100, where Helion's own verification took 13 s."""

MARGIN = Timing().final_drop_margin
"""How far behind the leader (beyond both spreads) a finalist leaves: kiln's autotuner's own."""

CONTEND_MARGIN = Timing().final_margin
"""Which finalists race: those whose search timing is within this much of the fastest one's
(kiln's autotuner's contenders), at least :data:`LEAST_RACED` and at most :data:`MOST_RACED`
of them, and the pinned seeds."""

LEAST_RACED, MOST_RACED = Timing().final_top_k
"""The bounds of kiln's autotuner's contenders. Where a kernel has many configs within the
margin (a memory-bound kernel's finalists often all are), the cap keeps the round to five
finalists' runs; one left out still races the winner where its search timing is not above the
winner's (:func:`race`)."""

SETTLED = 0.005
"""From the second pass on, the round ends when the finalists still racing are all within this
of the leader's time: more passes would only reorder them by less (the pick's bar is 2%)."""

FIRST_WARMUP_MS = 25
"""do_bench's warm-up before the round's first run (the GPU's clocks up); later passes warm up
with one call, the GPU busy back to back."""

_STATUS = {"BenchmarkTimeout": "timeout"}


@dataclass(frozen=True)
class _Finalist:
    label: str
    member: Any
    job: Callable[[], Any]


@dataclass(frozen=True)
class _Timed:
    status: str  # "ok", "error" or "timeout"
    reason: str = ""


@dataclass
class FinalistRecord:
    """What the round did with one finalist."""

    config: str
    search_ms: float  # its timing in Helion's search (``member.perf`` as the round began)
    raced: bool = False  # False: its search timing left it out, and with it Helion's pick
    passes: int = 0  # passes it was timed in
    runs: int = 0  # do_bench runs in all
    window_ms: float = 0.0  # the passes' rep windows, summed
    wall_s: float = 0.0  # the sandbox calls of its passes, as the autotuning process waited for them
    ms: float | None = None  # its time (median of its runs); None when it faulted or did not race
    left_after: int | None = None  # the pass after which it left the race (behind the leader)
    failure: str | None = None  # why it left the race when its timing failed


@dataclass
class FinalRoundRecord:
    """One final round: ``target_ms`` (Helion's, per finalist), ``window_ms`` (the runs a
    finalist racing to the end gets), the pass budget, each finalist's record (Helion's finalist
    order), the winner's config and the round's wall time."""

    target_ms: float
    window_ms: float
    passes: int
    finalists: list[FinalistRecord] = field(default_factory=list)
    winner: str | None = None
    wall_s: float = 0.0


def final_rebenchmark_best(search: Any, best: Any) -> Any:
    """Helion's ``final_rebenchmark_best``, with its final verification's ``rebenchmark`` answered
    by kiln's final round when the search can race (see the module docstring)."""
    helions = compat.HELION_FINAL_REBENCHMARK_BEST
    provider = getattr(search, "benchmark_provider", None)
    if not _can_race(search, provider):
        return helions(search, best)
    had = "rebenchmark" in search.__dict__
    previous = search.__dict__.get("rebenchmark")
    search.rebenchmark = functools.partial(_rebenchmark, search, search.rebenchmark)
    try:
        return helions(search, best)
    finally:
        if had:
            search.rebenchmark = previous
        else:
            del search.rebenchmark


def hook(search: Any) -> None:
    """``search`` (a Helion search) runs kiln's final round (its own ``final_rebenchmark_best``)."""
    if isinstance(search, compat.PopulationBasedSearch):
        search.final_rebenchmark_best = types.MethodType(final_rebenchmark_best, search)


def install() -> None:
    """Every Helion search runs kiln's final round (through kiln's provider), until :func:`uninstall`."""
    compat.set_final_rebenchmark_best(final_rebenchmark_best)


def uninstall() -> None:
    compat.set_final_rebenchmark_best(None)


def installed() -> bool:
    return compat.final_rebenchmark_best_is(final_rebenchmark_best)


def _can_race(search: Any, provider: Any) -> bool:
    """Whether kiln can race the search's finalists (the hook is in place only where the setting
    was on when kiln was put in the search, or installed)."""
    # kiln's provider is the one whose worker is kiln's (the adapter imports this module, not
    # the other way round)
    return (
        isinstance(getattr(provider, "sandbox_worker", None), KilnBenchmarkWorker)
        and compat.subprocess_benchmark_enabled(provider)
        and not compat.benchmark_fn_set(search)
    )


def _rebenchmark(search: Any, helions: Callable[..., None], members: list[Any], **kwargs: Any) -> None:
    desc = str(kwargs.get("desc", ""))
    if not compat.is_final_verification(desc) or kwargs.get("use_isolated", False) or len(members) < 2:
        helions(members, **kwargs)
        return
    target_ms = float(kwargs.get("target_ms", 5000.0))
    if not race(search, members, desc, target_ms):
        helions(members, **kwargs)


def contenders(perfs: Sequence[float], pinned: Sequence[bool]) -> list[int]:
    """The finalists that race (indices, in order): those whose search timing is within
    :data:`CONTEND_MARGIN` of the fastest one's, at least :data:`LEAST_RACED` and at most
    :data:`MOST_RACED` of them, fastest first, and the pinned seeds; every finalist where none
    has a finite timing."""
    finite = sorted((i for i, perf in enumerate(perfs) if math.isfinite(perf)), key=lambda i: perfs[i])
    if not finite:
        return list(range(len(perfs)))
    best = perfs[finite[0]]
    close = [i for i in finite if perfs[i] <= best * (1 + CONTEND_MARGIN)]
    chosen = set(finite[: max(LEAST_RACED, min(MOST_RACED, len(close)))])
    chosen.update(i for i, is_pinned in enumerate(pinned) if is_pinned)
    return sorted(chosen)


def race(search: Any, members: Sequence[Any], desc: str, target_ms: float) -> bool:
    """Race ``members`` (Helion's finalists) in kiln's sandbox and set their timings as Helion's
    ``rebenchmark`` would; ``False`` (nothing timed) when Helion cannot send one to a worker.

    The :func:`contenders` race first. A finalist left out whose search timing is not above the
    winner's then races the winner in a further round, until none is. Helion picks by ``perf``:
    a finalist that did not race leaves its ranking (an infinite timing, as Helion removes a
    finalist whose recheck fails), unless no raced finalist got a time."""
    provider = search.benchmark_provider
    worker = provider.sandbox_worker
    window_ms = min(target_ms, ROUND_MS)
    rep = max(1, int(window_ms / PASSES))
    finalists: list[_Finalist] = []
    for index, member in enumerate(members):
        job = compat.finalist_job(provider, member.fn, rep, worker.capture)
        if job is None:
            return False
        finalists.append(_Finalist(str(index), member, job))
    started = time.perf_counter()
    searched = [float(m.perf) for m in members]
    entries = [FinalistRecord(str(m.config), ms) for m, ms in zip(members, searched, strict=True)]
    record = FinalRoundRecord(target_ms, window_ms, PASSES, entries)
    window_s = (rep + FIRST_WARMUP_MS) / 1000
    timeout = max(float(provider.settings.autotune_benchmark_timeout), 3 * window_s + 15)

    def time_one(finalist: _Finalist, warm: bool) -> tuple[_Timed, Sequence[float], Sequence[float] | None]:
        from triton_kiln.helion.sandbox_jobs import FinalistRunsJob

        job = compat.with_warmup(finalist.job, FIRST_WARMUP_MS) if warm else finalist.job
        called = time.perf_counter()
        served = worker.call(FinalistRunsJob(job), timeout)
        entry = record.finalists[int(finalist.label)]
        entry.wall_s += time.perf_counter() - called
        if served.error is not None:
            error = served.error
            if isinstance(error, compat.BenchmarkWorkerUnkillable):
                raise error  # Helion's _finalize keeps the best config it measured
            if compat.match_unrecoverable_runtime_error(error):
                search.log.warning(f"{desc} sticky CUDA error skipped: {error}")
            else:
                search.log.warning(f"{desc} subprocess failed: {error}")
            entry.failure = f"{type(error).__name__}: {error}"
            return _Timed(_STATUS.get(type(error).__name__, "error"), entry.failure), [], None
        runs = [float(run) for run in served.value if math.isfinite(float(run))]
        if not runs:
            entry.failure = "no finite run"
            return _Timed("error", entry.failure), [], None
        entry.passes += 1
        entry.runs += len(runs)
        entry.window_ms += rep
        return _Timed("ok"), quantiles(runs, (0.5, 0.2, 0.8)), runs

    failed: dict[int, _Timed] = {}
    to_race = contenders(searched, [compat.is_pinned_finalist(search, m) for m in members])
    while to_race:
        contest: Race[_Finalist, _Timed] = Race([finalists[i] for i in to_race], PASSES, MARGIN, SETTLED)
        contest.run(time_one)
        for i in to_race:
            entry = record.finalists[i]
            entry.raced = True
            label = finalists[i].label
            if label in contest.failed:
                failed[i] = contest.failed[label]
                entry.ms = None
                continue
            entry.ms = contest.estimate(label)[0]
            entry.left_after = contest.left.get(label)
        live = [i for i, e in enumerate(record.finalists) if e.ms is not None]
        if not live:
            break
        winner = min(live, key=lambda i: record.finalists[i].ms or math.inf)
        late = [i for i, e in enumerate(record.finalists) if not e.raced and searched[i] <= searched[winner]]
        to_race = sorted([winner, *late]) if late else []
    timed_any = any(e.ms is not None for e in record.finalists)
    answered = [i for i, e in enumerate(record.finalists) if e.raced or timed_any]
    results: list[Any] = []
    traced: list[Any] = []
    for i in answered:
        if not record.finalists[i].raced:
            results.append(math.inf)  # out of the pick; no trace entry: it was not timed
            traced.append(None)
        elif i in failed:
            results.append(compat.IsolatedBenchmarkFailure("error"))  # out of the pick, as Helion's error
            traced.append(compat.IsolatedBenchmarkFailure(failed[i].status))
        else:
            results.append(record.finalists[i].ms)
            traced.append(record.finalists[i].ms)
    compat.apply_final_timings(search, [members[i] for i in answered], results, traced)
    raced = [i for i, e in enumerate(record.finalists) if e.raced]
    timed = [e for e in record.finalists if e.ms is not None]
    record.winner = min(timed, key=lambda e: e.ms or math.inf).config if timed else None
    record.wall_s = time.perf_counter() - started
    search.log.debug(
        f"kiln final round: {len(members)} finalists, {len(raced)} raced, "
        f"{sum(e.passes for e in record.finalists)} passes of {rep} ms in {record.wall_s:.1f} s "
        f"(Helion's target: {target_ms:.0f} ms each); " + "; ".join(_described(e) for e in record.finalists)
    )
    rounds = getattr(provider, "final_rounds", None)
    if isinstance(rounds, list):
        rounds.append(record)
    return True


def _described(entry: FinalistRecord) -> str:
    if not entry.raced:
        return f"{entry.config}: not raced (search: {entry.search_ms:.4f} ms)"
    if entry.ms is None:
        return f"{entry.config}: failed: {entry.failure}"
    left = f", left after pass {entry.left_after}" if entry.left_after else ""
    return f"{entry.config}: {entry.ms:.4f} ms{left}"

"""The final round: which screened configs may win (:func:`eligible`), which are timed again
(the race's contenders), and the round itself (:func:`final_round`).

A config the output check flagged never wins over one it trusts, so only trusted configs race
(all ``ok`` ones when none is trusted). A tuning run screens every config with short runs while
others still compile; the final round then times, on a quiet machine, only the configs that
could still win. How many depends on the spread (close or noisy screenings widen it), at least
two whenever two configs are ok: the screening, taken while the CPU compiles and the GPU idles
between configs, never decides alone. :func:`pooled_estimate` is a finalist's time: do_bench's
median of every run of its passes; after each pass but the last, :func:`outpaced` names the
finalists that leave the race (clearly more than the tolerance behind the leader). :class:`Race`
runs the passes; :func:`final_round` times each call and records the results.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from triton_kiln.autotuner.compile_requests import Candidate
from triton_kiln.autotuner.plan import Phase, Timing
from triton_kiln.autotuner.screening import FAILED, Evaluator, Scores
from triton_kiln.autotuner.tuning_progress import TuningProgress
from triton_kiln.sandbox.timing import quantiles
from triton_kiln.tuning.results import ConfigResult

log = logging.getLogger("kiln.autotune")

_INF = float("inf")


def eligible(candidates: Sequence[Candidate], results: Mapping[str, ConfigResult]) -> list[Candidate]:
    """The configs that may win: the ``ok`` ones the output check trusts (did not flag), or,
    when it trusts none, every ``ok`` one (see :mod:`triton_kiln.autotuner.outputs`)."""
    ok = [c for c in candidates if results[c.label].status == "ok"]
    return [c for c in ok if results[c.label].trusted] or ok


def contenders(
    candidates: Sequence[Candidate],
    results: Mapping[str, ConfigResult],
    margin: float,
    bounds: tuple[int, int],
) -> list[Candidate]:
    """The screened :func:`eligible` configs that may still beat the fastest, fastest first.

    A config contends when the fast end of its screening (``runtime_ms_p20``) is within
    ``margin`` of the slow end of the fastest one's (``runtime_ms_p80``): noisy screenings widen
    the race. At least ``bounds[0]`` and at most ``bounds[1]`` configs.
    """

    def median(c: Candidate) -> float:
        return _first_of(results[c.label].runtime_ms)

    ok = sorted(eligible(candidates, results), key=median)
    if not ok:
        return []
    best = results[ok[0].label]
    best_high = _first_of(best.runtime_ms_p80, best.runtime_ms)
    close = [
        c
        for c in ok
        if _first_of(results[c.label].runtime_ms_p20, results[c.label].runtime_ms) <= best_high * (1 + margin)
    ]
    low, high = bounds
    return ok[: max(low, min(high, len(close)))]


def _first_of(*values: float | None) -> float:
    return next((v for v in values if v is not None), _INF)


def pooled_estimate(passes: list[list[float]], runs: list[float] | None) -> list[float]:
    """A finalist's ``[median, p20, p80]``: do_bench's quantiles of every run of every pass
    (``runs``), or, without them, the median over the passes of each pass's own."""
    if runs:
        return quantiles(runs, (0.5, 0.2, 0.8))
    return [statistics.median(run[i] for run in passes) for i in range(3)]


def outpaced(estimates: Mapping[str, Sequence[float]], margin: float) -> set[str]:
    """The finalists (label -> ``[median, p20, p80]`` so far) that leave the race after a pass:
    more than ``margin`` behind the leader (the lowest median), and their fast end (p20) beyond
    the leader's slow end (p80), so that no overlap of the two spreads could make them the
    faster. What leaves cannot be the config within ``margin`` of the fastest; a difference
    inside either spread is noise, and the finalist stays for the next pass."""
    if len(estimates) < 2:
        return set()
    leader = min(estimates, key=lambda label: estimates[label][0])
    median, _, high = estimates[leader]
    return {
        label
        for label, (other, low, _) in estimates.items()
        if label != leader and other > median * (1 + margin) and low > high
    }


def tied(estimates: Mapping[str, Sequence[float]], within: float) -> bool:
    """Whether the finalists (label -> ``[median, p20, p80]`` so far) are all within ``within``
    of the leader's median: more passes could only reorder them by less than that, so any of
    them is as good a pick as the round could make."""
    medians = [estimate[0] for estimate in estimates.values()]
    return bool(medians) and max(medians) <= min(medians) * (1 + within)


def left_race_note(passes: int, of: int, margin: float) -> str:
    """The note on a finalist that left the race after ``passes`` of the round's ``of`` passes
    (an ``ok`` config's ``reason`` carries notes: the reports show it)."""
    return (
        f"final round: left after pass {passes} of {of}, over {100 * margin:.0f}% behind the leader "
        f"beyond both spreads (its time is from the runs it had)"
    )


class Finalist(Protocol):
    """What a race needs of a finalist (kiln's :class:`Candidate`, or Helion's finalist in
    :mod:`triton_kiln.helion.finalists`): a label unique within the race."""

    @property
    def label(self) -> str: ...


class Outcome(Protocol):
    """What a race needs of one timing's outcome (kiln's :class:`ConfigResult`, ...): its
    status, ``"ok"`` or what failed."""

    @property
    def status(self) -> str: ...


F = TypeVar("F", bound=Finalist)
R = TypeVar("R", bound=Outcome)

TimeOne = Callable[[F, bool], tuple[R, Sequence[float], Sequence[float] | None]]
"""``(finalist, warm) -> (outcome, [median, p20, p80], every run or None)``: one pass of one
finalist; ``warm`` asks for do_bench's warm-up (the round's first call that runs ok)."""


@dataclass
class Race(Generic[F, R]):
    """A final round's passes over its ``finalists``, fastest first: ``passes_n`` alternating
    passes; after each but the last, the finalists :func:`outpaced` by more than ``margin`` leave
    it (``left``: label -> the passes it ran), and it ends when one is left, or, with
    ``settled``, from the second pass on when those still racing are :func:`tied` within it.
    ``failed`` holds
    the outcomes of finalists whose timing failed; :meth:`estimate` is a finalist's time.
    kiln's autotuner races its :class:`Candidate` configs (:func:`final_round`); kiln's Helion
    adapter races Helion's finalists with the same rule."""

    finalists: Sequence[F]
    passes_n: int
    margin: float
    settled: float | None = None
    passes: dict[str, list[list[float]]] = field(init=False)
    runs: dict[str, list[float] | None] = field(init=False)
    failed: dict[str, R] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.passes = {c.label: [] for c in self.finalists}
        self.runs = {c.label: [] for c in self.finalists}

    def run(self, time_one: TimeOne[F, R]) -> None:
        racing = list(self.finalists)
        warmed = False  # until a call has run ok (one that fails may take its sandbox with it)
        for round_ in range(self.passes_n):
            for candidate in racing if round_ % 2 == 0 else racing[::-1]:
                result, times, samples = time_one(candidate, not warmed)
                if result.status != "ok":
                    self.failed[candidate.label] = result
                    continue
                warmed = True
                self.passes[candidate.label].append([float(t) for t in times][:3])
                pooled = self.runs[candidate.label]
                self.runs[candidate.label] = [*pooled, *samples] if pooled is not None and samples else None
            racing = [c for c in racing if c.label not in self.failed]
            if round_ == self.passes_n - 1:
                return
            estimates = {c.label: self.estimate(c.label) for c in racing}
            behind = outpaced(estimates, self.margin)
            self.left.update((label, round_ + 1) for label in behind)
            racing = [c for c in racing if c.label not in behind]
            if len(racing) < 2:
                return
            if (
                round_ >= 1
                and self.settled is not None
                and tied({c.label: estimates[c.label] for c in racing}, self.settled)
            ):
                return

    def estimate(self, label: str) -> list[float]:
        """``label``'s ``[median, p20, p80]`` over the passes it ran (:func:`pooled_estimate`)."""
        return pooled_estimate(self.passes[label], self.runs[label])

    def note(self, label: str) -> str | None:
        """What ``label``'s reason adds: that it left the race, or ``None``."""
        return left_race_note(self.left[label], self.passes_n, self.margin) if label in self.left else None


def final_round(
    name: str, timing: Timing, scores: Scores, evaluator: Evaluator, progress: TuningProgress
) -> None:
    """Time the screened configs that could still win again, on a quiet machine, the way
    ``triton.testing.do_bench`` times them.

    Only *contenders* (see :func:`contenders`: at least two when two configs are ok, so the
    screening taken while the CPU compiled never decides alone) are timed, in
    ``timing.final_passes`` alternating passes that share Triton's single ``rep`` between them
    (drift hits every finalist alike). The GPU is warmed up once, with do_bench's ``warmup``,
    before the round's first run; every later call starts with one warm-up call, the GPU
    busy back to back. Each pass is do_bench's loop (an L2 flush of 256 MB before every run,
    events around each run); every run's time comes back and a finalist's time is do_bench's
    median (and 20th/80th percentiles) of all its runs pooled, the estimate
    ``triton.autotune`` would compute from as many runs. A bencher that sends no runs back
    (in-process) gives each pass's median, and the median over the passes is taken.

    After each pass but the last, a finalist clearly behind the leader (:class:`Race`:
    more than ``timing.final_drop_margin`` behind, beyond both spreads) leaves the race with the
    estimate it has and a note saying so (its ``reason``). The round ends when one is left
    (its time from the passes run so far); a finalist still racing at the end got do_bench's
    ``rep`` of runs in all."""
    results = scores.results
    finalists = contenders(scores.candidates, results, timing.final_margin, timing.final_top_k)
    if len(finalists) < 2:
        return  # nothing left to decide: the screening's timings stand
    progress.phase(f"final round: {len(finalists)} configs")
    passes_n = timing.final_passes
    warm = Phase(timing.warmup_ms, timing.rep_ms / passes_n, check=False, samples=True)
    busy = Phase(0.0, timing.rep_ms / passes_n, check=False, samples=True)  # one warm-up call

    def time_one(candidate: Candidate, first: bool) -> tuple[ConfigResult, Any, list[float] | None]:
        result, times = evaluator.evaluate(candidate, warm if first else busy)
        return result, times, evaluator.last_samples

    race: Race[Candidate, ConfigResult] = Race(finalists, passes_n, timing.final_drop_margin)
    race.run(time_one)
    if race.left:
        log.debug("kiln: %s: final round: %s left the race (more than %.0f%% behind)", name,
                  "; ".join(f"{label} after pass {n}" for label, n in race.left.items()),
                  100 * timing.final_drop_margin)  # fmt: skip
    for candidate in finalists:
        previous = results[candidate.label]
        failure = race.failed.get(candidate.label)
        if failure is None:
            estimate = race.estimate(candidate.label)
            result = replace(previous, runtime_ms=estimate[0], runtime_ms_p20=estimate[1])
            result = replace(result, runtime_ms_p80=estimate[2], screen_ms=previous.runtime_ms)
            if note := race.note(candidate.label):  # why its time rests on fewer runs
                result = replace(result, reason="; ".join(filter(None, (previous.reason, note))))
            scores.put(candidate, result, estimate)
        else:
            scores.put(candidate, failure, list(FAILED))

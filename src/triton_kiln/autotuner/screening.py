"""The first pass over a run's configs: each one benchmarked and checked as its compile finishes.

:class:`Evaluator` runs one config (its compile's failure, or its benchmark in the run's bencher,
then its outputs' check); :class:`Scores` holds what the run knows so far. How the first pass
is shared out is a strategy chosen once per run: :class:`OneGpu` screens every config here;
:class:`~triton_kiln.autotuner.node_share.NodeShared` splits them with processes on the node's
other GPUs and checks here, before they may race or win, the configs those processes screened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from typing import Any, Protocol

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner.bench import classify, reason
from triton_kiln.autotuner.compile_requests import Candidate, candidate_result, launch_grid
from triton_kiln.autotuner.outputs import OutputChecks
from triton_kiln.autotuner.plan import Bencher, Phase
from triton_kiln.autotuner.timesplit import TimeSplit
from triton_kiln.sandbox.compare import Verdict
from triton_kiln.tuning.results import ConfigResult

FAILED = (float("inf"),) * 3
"""The timings of a config that did not run (as ``triton.autotune`` gives it)."""


class Evaluator:
    """Benchmarks and checks the configs of kernel ``name`` in ``bencher`` for a call's ``grid``;
    the time each benchmark takes goes to ``split``."""

    def __init__(self, name: str, bencher: Bencher, grid: Any, split: TimeSplit | None = None) -> None:
        self.name = name
        self.bencher = bencher
        self.grid = grid
        self.split = split if split is not None else TimeSplit()
        self.last_samples: list[float] | None = None  # every run of the latest benchmark, if sent

    def evaluate(
        self, candidate: Candidate, phase: Phase, checker: OutputChecks | None = None
    ) -> tuple[ConfigResult, Any]:
        """Benchmark and check one compiled (or failed) config; returns its result and timings.

        Its outputs' verdict goes to ``checker``: a mismatch with the user's reference rejects
        it here; anything else is decided for all configs at once (:func:`.outputs.apply_rule`).
        """
        future = candidate.future
        assert future is not None
        failed = list(FAILED)
        exc = future.exception()
        if exc is not None:
            return candidate_result(candidate, classify(exc, "compile"), reason(exc), None), failed
        artifact = future.result()
        began = time.monotonic()
        outcome = self.bencher.bench(candidate, artifact, launch_grid(self.grid, candidate, self.name), phase)
        self.split.saw(outcome, time.monotonic() - began)
        self.last_samples = outcome.samples if outcome.status == "ok" else None
        if outcome.status != "ok" or outcome.timings is None:
            return candidate_result(candidate, outcome.status, outcome.reason, artifact.compile_s), failed
        times = [float(t) for t in outcome.timings][:3]
        times += [times[0]] * (3 - len(times))
        max_diff = None
        verdict = outcome.check  # the sandbox checks on the GPU and sends only a verdict
        if verdict is None and outcome.outputs is not None and checker is not None:
            verdict = checker.in_process.check(outcome.outputs, candidate.bound.args)
        if verdict is not None and checker is not None:
            ok, max_diff, detail = verdict[0], verdict[1], verdict[2]
            if checker.user_reference and not ok:
                why = f"differs from your reference: {detail}"
                wrong = candidate_result(candidate, "wrong_output", why, artifact.compile_s, times, max_diff)
                return wrong, failed
            if not checker.user_reference and isinstance(verdict, Verdict):
                checker.verdicts[candidate.label] = verdict
        raw = outcome.raw if outcome.raw is not None else times  # what do_bench returned, as Triton keeps it
        return candidate_result(candidate, "ok", None, artifact.compile_s, times, max_diff), raw


@dataclass
class Scores:
    """What a run knows of its configs so far: each one's result and timings, its outputs'
    verdicts (``checker``), and ``record``, where every new or changed result goes (the progress
    bar and the database)."""

    candidates: list[Candidate]
    checker: OutputChecks
    record: Callable[[ConfigResult], None]
    results: dict[str, ConfigResult] = field(default_factory=dict)
    timings: dict[Any, Any] = field(default_factory=dict)
    first_result_s: float | None = None  # seconds from the run's start to its first result

    def put(self, candidate: Candidate, result: ConfigResult, timings: Any) -> None:
        self.results[candidate.label] = result
        self.timings[candidate.config] = timings
        self.record(result)


def as_compiled(candidates: Sequence[Candidate]) -> Iterator[Candidate]:
    """The candidates in the order their compiles finish (configs sharing a compile together)."""
    by_future: dict[Future[CompiledArtifact], list[Candidate]] = {}
    for candidate in candidates:
        assert candidate.future is not None
        by_future.setdefault(candidate.future, []).append(candidate)
    for future in as_completed(by_future):
        yield from by_future[future]


class Strategy(Protocol):
    """How a run's first pass is shared out, and what a config screened elsewhere needs here."""

    def screen(self, scores: Scores, screen_one: Callable[[Candidate], None]) -> None:
        """Screen every config of ``scores`` (``screen_one``: here), each once compiled."""
        ...

    def confirm(
        self, scores: Scores, finalists: Sequence[Candidate], check_one: Callable[[Candidate], Any]
    ) -> bool:
        """Check here (``check_one``) the ``finalists`` another process screened; whether any
        was (the contenders, or the winner, may change)."""
        ...


class OneGpu:
    """A run on this process's GPU alone: every config is screened here as its compile finishes."""

    def screen(self, scores: Scores, screen_one: Callable[[Candidate], None]) -> None:
        for candidate in as_compiled(scores.candidates):
            screen_one(candidate)

    def confirm(
        self, scores: Scores, finalists: Sequence[Candidate], check_one: Callable[[Candidate], Any]
    ) -> bool:
        return False

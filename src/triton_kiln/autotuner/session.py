"""One tuning run: from a call's pruned configs to the best one, recorded as it goes.

::

    TuningSession(tuner).tune(key, configs, args, kwargs, grid)
      one Candidate per config (specialize.py)
      tuning database: a finished run for this identity? -> adopt its best config, done
      another process of the node tuning it now? -> wait for its run, adopt it (node_tuning.py)
      begin a run; submit every compile to the pool (longest guessed first)
      as each compile finishes (or fails): bench it (bench.py), check its outputs,
          record its ConfigResult in the database (committed at once)
      output rule (outputs.py): reject or flag configs by all configs' outputs at once
      final round (when kiln owns the timing): the best few trusted ones (race.py), full
          length, 3 alternating passes of do_bench's loop, their runs pooled into its median;
          one clearly behind after a pass leaves the race
      best = the fastest trusted config (a flagged one only when all are) -> tuner.cache[key],
          configs_timings, last_run; finish the run; log any faster flagged config passed over
      all along: where the wall time went (sandbox wait, compiling, benchmarking, final
          round: timesplit.py) -> TuningRun.split; at the end, however it ends, the sandbox
          frees the run's inputs (the most it held -> TuningRun.gpu_peak_bytes)
      all along: what the reader sees (progress.py: a bar of configs compiled / timed /
          failed and the best so far, fed by each compile's done callback and every recorded
          result; with TRITON_PRINT_AUTOTUNING, Triton's per-config lines: provenance.py)

A config that fails anywhere is skipped with the status :func:`~triton_kiln.autotuner.bench.classify`
(or the sandbox) gave it; if every one fails, :class:`AutotuneError` lists each with its reason.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, as_completed
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from triton_kiln import triton_compat
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner import candidates as candidates_mod
from triton_kiln.autotuner import node_share, node_tuning, provenance
from triton_kiln.autotuner.bench import Bencher, Phase, classify, ended, make_bencher, reason, screen_phase
from triton_kiln.autotuner.outputs import InProcessCheck, OutputChecks, apply_rule
from triton_kiln.autotuner.prewarm import prewarm
from triton_kiln.autotuner.progress import TuningProgress
from triton_kiln.autotuner.race import Race, contenders, eligible
from triton_kiln.autotuner.run_identity import finished_run, run_identity, tuning_device
from triton_kiln.autotuner.specialize import (
    Candidate,
    candidate_result,
    launch_grid,
    submit_compiles,
)
from triton_kiln.autotuner.timesplit import TimeSplit
from triton_kiln.errors import KilnError
from triton_kiln.sandbox.compare import Verdict
from triton_kiln.tuning.configs import config_label
from triton_kiln.tuning.results import ConfigResult, TuningRun

if TYPE_CHECKING:
    from triton_kiln.autotuner.autotuner import Autotuner

log = logging.getLogger("kiln.autotune")

_INF = float("inf")
_FAILED = [_INF, _INF, _INF]


class AutotuneError(KilnError):
    """Every config of a tuning run failed; the message lists each with its reason."""


class TuningSession:
    """Tunes one key of ``tuner``; the result lands in the tuner's Triton attributes."""

    def __init__(self, tuner: Autotuner) -> None:
        self.tuner = tuner
        self.name = tuner.base_fn.__name__
        self.split = TimeSplit()  # where the run's wall time goes (compile overlaps benchmarking)
        self.progress = TuningProgress(self.name, 0, enabled=False)  # tune() makes the run's own
        self.verbose = False  # TRITON_PRINT_AUTOTUNING: Triton's per-config lines (read by tune())
        self.last_samples: list[float] | None = None  # every run of the latest benchmark, if sent
        self.bencher: Bencher | None = None  # the run's: its sandbox given back however it ends

    def tune(
        self,
        key: tuple[Any, ...],
        configs: Sequence[Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        grid: Any,
    ) -> None:
        tuner = self.tuner
        started = time.monotonic()
        built = candidates_mod.build(tuner, configs, args, kwargs)  # a config refused: failed
        candidates, duplicates = built.candidates, built.duplicates
        device = tuning_device(tuner)  # NoGPUError with none: before anything is recorded
        identity = run_identity(self.name, candidates, key, tuner._local_target(), device)
        database = tuner._get_database()
        lookup = {k: v for k, v in identity.items() if k != "kernel"}
        recorded = database.lookup(**lookup) if database is not None else None
        if recorded is not None and self.adopt(key, candidates, recorded):
            tuner.loaded_from = "database"
            tuner.last_run = recorded
            tuner.tuned[key] = recorded
            provenance.from_database(
                self.name,
                key,
                recorded.best_label or "",
                getattr(database, "path", database),
                recorded.started_at,
                len(recorded.results),
            )
            return
        settings = tuner._settings
        claimed = node_tuning.claim(settings, database, lookup, self.name, device) if database else None
        if claimed is not None and claimed.helper is not None:  # another GPU's process tunes it: help
            node_share.help_tune(self, claimed.helper, candidates, args, kwargs, grid)
            waited = claimed.waited_s
            claimed = node_tuning.claim(settings, database, lookup, self.name, device, helping=False)
            claimed.waited_s += waited
        if claimed is not None and claimed.run is not None and self.adopt(key, candidates, claimed.run):
            node_tuning.adopt(tuner, key, claimed.run, claimed.waited_s, database)
            return
        tuner.loaded_from = None
        if tuner._own_device:  # a miss: the sandbox and the pool start now, beside the compiles
            prewarm(sandbox=bool(tuner._sandbox_wanted), pool=tuner._pool is None)
        self.verbose = triton_compat.print_autotuning()
        try:
            run_id = database.begin_run(default_label=candidates[0].label, **identity) if database else None
            # Shown on a terminal (KILN_PROGRESS forces it on or off); cleared if the run fails or
            # is interrupted, left as the run's last line when it finds a best config.
            with TuningProgress(self.name, len(candidates), tuner._settings.progress) as progress:
                self.progress = progress
                share = claimed.share if claimed is not None else None
                built.record(database, run_id)
                self._tune(key, candidates, identity, database, run_id, started, args, kwargs, grid, share)
                built.apply(tuner)
                progress.finish(time.monotonic() - started)
        finally:
            if claimed is not None:
                claimed.release()
            if self.bencher is not None:  # a failed run too: its sandbox goes once idle
                ended(self.bencher)
        for config, same in duplicates:  # a config listed twice was timed once (as Triton, both)
            tuner.configs_timings[config] = tuner.configs_timings[same]

    def _tune(
        self,
        key: tuple[Any, ...],
        candidates: list[Candidate],
        identity: dict[str, str],
        database: Any,
        run_id: int | None,
        started: float,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        grid: Any,
        share: node_share.Share | None = None,
    ) -> None:
        """The run itself: compile, screen (``share``: with other GPUs' processes), check outputs,
        final round, best config."""
        tuner = self.tuner
        progress = self.progress

        def record(result: ConfigResult) -> None:
            progress.record(result)
            if database is not None and run_id is not None:
                database.record(run_id, result)

        pool = tuner._get_pool()
        bencher = make_bencher(tuner, args, kwargs)  # first: its output-check kernel compiles first
        self.bencher = bencher
        submit_compiles(tuner, pool, candidates)
        by_future: dict[Future[CompiledArtifact], Candidate] = {}
        for candidate in candidates:
            assert candidate.future is not None
            by_future.setdefault(candidate.future, candidate)
        self.split.watch(by_future)
        for future in by_future:
            progress.watch(future, configs=sum(1 for c in candidates if c.future is future))
        results: dict[str, ConfigResult] = {}
        timings: dict[Any, Any] = {}
        # Outputs are checked against the user's reference, else decided across every config at
        # the end of the screening (triton_kiln.autotuner.outputs); in-process outputs are placed here.
        user_reference = bencher.user_reference()
        checker = OutputChecks(user_reference is not None, InProcessCheck(tuner._tolerances, user_reference))
        first_result_s: float | None = None
        # When kiln owns the timing, configs are screened with short runs while others still
        # compile (the CPU is busy, so timings are rough), then the best few are timed again
        # in full once every compile is done. With a user do_bench, one full pass, as Triton.
        two_phase = bencher.owns_timing
        first_pass = screen_phase(tuner, bencher)

        def screen(candidate: Candidate) -> None:
            nonlocal first_result_s
            assert candidate.future is not None
            if self.verbose:
                progress.write(provenance.triton_config_line(self.name, candidate.config))
            result, times = self.evaluate(candidate, candidate.future, bencher, grid, checker, first_pass)
            if self.verbose and result.status != "ok":
                progress.write(provenance.triton_failed_line(result.status, result.reason))
            results[candidate.label] = result
            timings[candidate.config] = times
            if first_result_s is None:
                first_result_s = time.monotonic() - started
            record(result)

        shared: set[str] = set()  # another GPU's ok configs: checked here before they race or win

        def take(candidate: Candidate, record_: dict[str, Any]) -> None:  # another GPU's result
            result, times, verdict, by = node_share.taken(record_)
            results[candidate.label], timings[candidate.config] = result, times
            if verdict is not None and result.status == "ok":
                checker.groups.setdefault(by, {})[candidate.label] = verdict
            if result.status == "ok":
                shared.add(candidate.label)
            record(result)

        def confirm(finalists: list[Candidate]) -> bool:  # another GPU's finalists: checked here
            evaluate = lambda c: self.evaluate(c, c.future, bencher, grid, checker, first_pass)  # noqa: E731
            return node_share.check_here(finalists, shared, results, timings, checker, evaluate, record)

        deferred: list[Candidate] = []
        for future in as_completed(by_future):
            for candidate in [c for c in candidates if c.future is future]:
                if share is not None and not share.take_turn(candidate.label):
                    deferred.append(candidate)  # another GPU's process is benchmarking it
                    continue
                screen(candidate)
                if share is not None:
                    share.put(candidate.label, {"by": "leader"})
        if share is not None:
            share.gather(deferred, screen, take)
        apply_rule(self.name, candidates, results, timings, checker, record)
        if two_phase:
            margin, top_k = tuner._final_margin, tuner._final_top_k
            while confirm(contenders(candidates, results, margin, top_k)):
                pass
            with self.split.phase("final_s"):
                self.final_round(candidates, results, timings, bencher, grid, record)
        # The fastest trusted config wins; flagged ones only when every ok config is flagged.
        while True:
            ok = {c.config: timings[c.config] for c in eligible(candidates, results)}
            best = builtins.min(ok, key=ok.__getitem__) if ok else None
            if not confirm([c for c in candidates if best is not None and c.config is best]):
                break
        bencher.finish()
        if not ok:
            lines = [f"  {c.label}: {results[c.label].status}: {results[c.label].reason}" for c in candidates]
            raise AutotuneError(f"every config of {self.name} failed for key {key}:\n" + "\n".join(lines))
        best = builtins.min(ok, key=ok.__getitem__)
        tuner.cache[key] = best
        tuner.configs_timings = timings
        best_label = config_label(best)
        wall = time.monotonic() - started
        split = self.split.as_dict(started, wall)
        peak = ended(bencher)
        if database is not None and run_id is not None:
            database.finish_run(run_id, best_label, wall, first_result_s, split=split, gpu_peak_bytes=peak)
        results_now = tuple(results[c.label] for c in candidates)
        tuner.last_run = finished_run(
            identity, results_now, best_label, candidates[0].label, wall, split, first_result_s, peak
        )
        tuner.tuned[key] = tuner.last_run
        provenance.log_choice(self.name, key, tuner.last_run)

    def final_round(
        self,
        candidates: list[Candidate],
        results: dict[str, ConfigResult],
        timings: dict[Any, Any],
        bencher: Bencher,
        grid: Any,
        record: Any,
    ) -> None:
        """Time the screened configs that could still win again, on a quiet machine, the way
        ``triton.testing.do_bench`` times them.

        Only *contenders* (see :func:`contenders`: at least two when two configs are ok, so the
        screening taken while the CPU compiled never decides alone) are timed, in
        ``_final_passes`` alternating passes that share Triton's single ``rep`` between them
        (drift hits every finalist alike). The GPU is warmed up once, with do_bench's ``warmup``,
        before the round's first run; every later call starts with one warm-up call, the GPU
        busy back to back. Each pass is do_bench's loop (an L2 flush of 256 MB before every run,
        events around each run); every run's time comes back and a finalist's time is do_bench's
        median (and 20th/80th percentiles) of all its runs pooled, the estimate
        ``triton.autotune`` would compute from as many runs. A bencher that sends no runs back
        (in-process) gives each pass's median, and the median over the passes is taken.

        After each pass but the last, a finalist clearly behind the leader (:class:`Race`:
        more than ``_final_drop_margin`` behind, beyond both spreads) leaves the race with the
        estimate it has and a note saying so (its ``reason``). The round ends when one is left
        (its time from the passes run so far); a finalist still racing at the end got do_bench's
        ``rep`` of runs in all."""
        tuner = self.tuner
        finalists = contenders(candidates, results, tuner._final_margin, tuner._final_top_k)
        if len(finalists) < 2:
            return  # nothing left to decide: the screening's timings stand
        self.progress.phase(f"final round: {len(finalists)} configs")
        passes_n = tuner._final_passes
        warm = Phase(tuner._warmup_ms, tuner._rep_ms / passes_n, check=False, samples=True)
        busy = Phase(0.0, tuner._rep_ms / passes_n, check=False, samples=True)  # one warm-up call

        def time_one(candidate: Candidate, first: bool) -> tuple[ConfigResult, Any, list[float] | None]:
            assert candidate.future is not None
            phase = warm if first else busy
            result, times = self.evaluate(candidate, candidate.future, bencher, grid, None, phase)
            return result, times, self.last_samples

        race = Race(finalists, passes_n, tuner._final_drop_margin)
        race.run(time_one)
        if race.left:
            log.debug("kiln: %s: final round: %s left the race (more than %.0f%% behind)", self.name,
                      "; ".join(f"{label} after pass {n}" for label, n in race.left.items()),
                      100 * tuner._final_drop_margin)  # fmt: skip
        for candidate in finalists:
            previous = results[candidate.label]
            failure = race.failed.get(candidate.label)
            if failure is None:
                estimate = race.estimate(candidate.label)
                result = replace(previous, runtime_ms=estimate[0], runtime_ms_p20=estimate[1])
                result = replace(result, runtime_ms_p80=estimate[2], screen_ms=previous.runtime_ms)
                if note := race.note(candidate.label):  # why its time rests on fewer runs
                    result = replace(result, reason="; ".join(filter(None, (previous.reason, note))))
                timings[candidate.config] = estimate
            else:
                result = failure
                timings[candidate.config] = list(_FAILED)
            results[candidate.label] = result
            record(result)

    def evaluate(
        self,
        candidate: Candidate,
        future: Future[CompiledArtifact],
        bencher: Bencher,
        grid: Any,
        checker: OutputChecks | None,
        phase: Phase,
    ) -> tuple[ConfigResult, Any]:
        """Benchmark and check one compiled (or failed) config; returns its result and timings.

        Its outputs' verdict goes to ``checker``: a mismatch with the user's reference rejects
        it here; anything else is decided for all configs at once (:func:`.outputs.apply_rule`).
        """
        failed = list(_FAILED)
        exc = future.exception()
        if exc is not None:
            return candidate_result(candidate, classify(exc, "compile"), reason(exc), None), failed
        artifact = future.result()
        began = time.monotonic()
        outcome = bencher.bench(candidate, artifact, launch_grid(grid, candidate, self.name), phase)
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

    def adopt(self, key: tuple[Any, ...], candidates: list[Candidate], recorded: TuningRun) -> bool:
        """Take a finished run's best config and timings (``False``: its best is not among ours)."""
        by_label = {c.label: c for c in candidates}
        best = by_label.get(recorded.best_label or "")
        if best is None:
            return False
        self.tuner.cache[key] = best.config
        timings: dict[Any, list[float]] = {}
        for result in recorded.results:
            candidate = by_label.get(result.label)
            if candidate is None:
                continue
            if result.status == "ok" and result.runtime_ms is not None:
                timings[candidate.config] = [
                    result.runtime_ms,
                    result.runtime_ms_p20 or result.runtime_ms,
                    result.runtime_ms_p80 or result.runtime_ms,
                ]
            else:
                timings[candidate.config] = list(_FAILED)
        self.tuner.configs_timings = timings
        return True

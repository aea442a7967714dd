"""One tuning run: from a call's pruned configs to the best one, recorded as it goes.

::

    TuningSession(plan, services).tune(key, configs, args, kwargs, grid)
      candidates: one per config (compile_requests.py); one Triton's backend refuses: failed
      cached? the tuning database has a finished run for this identity -> adopt its best, done;
          another process of the node tunes it now -> wait for its run, adopt it (node_tuning.py),
          or help it first from another GPU (node_share.py)
      strategy, chosen once: this GPU alone (screening.OneGpu), or the node's GPUs together
          (node_share.NodeShared: this process holds the node's lock and leads)
      compile: every config to the pool (longest guessed first); the bencher first of all
      screen: as each compile finishes (or fails), bench it (bench.py), check its outputs,
          record its ConfigResult in the database (committed at once)
      output rule (outputs.py): reject or flag configs by all configs' outputs at once
      final round (when kiln owns the timing): the best few trusted ones (final_round.py), full
          length, 3 alternating passes of do_bench's loop, their runs pooled into its median;
          one clearly behind after a pass leaves the race
      choose: the fastest trusted config (a flagged one only when all are)
      publish: -> kernel.cache[key], configs_timings
      record: finish the run in the database -> last_run, tuned; log any faster flagged config
      all along: where the wall time went (timesplit.py) -> TuningRun.split; at the end, however
          it ends, the sandbox frees the run's inputs (the most it held -> gpu_peak_bytes);
          what the reader sees (tuning_progress.py; with TRITON_PRINT_AUTOTUNING, Triton's
          per-config lines: log_lines.py)

A config that fails anywhere is skipped with the status :func:`~triton_kiln.autotuner.bench.classify`
(or the sandbox) gave it; if every one fails, :class:`AutotuneError` lists each with its reason.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from triton_kiln import program, triton_compat
from triton_kiln.autotuner import log_lines, node_share, node_tuning
from triton_kiln.autotuner.bench import ended, make_bencher, reason, screen_phase
from triton_kiln.autotuner.compile_requests import (
    Candidate,
    ConflictingMetaParameters,
    distinct,
    submit_compiles,
)
from triton_kiln.autotuner.final_round import contenders, eligible, final_round
from triton_kiln.autotuner.gpu import tuning_device
from triton_kiln.autotuner.outputs import InProcessCheck, OutputChecks, apply_rule
from triton_kiln.autotuner.plan import Bencher, LocalDevice, Phase, Services, TunedKernel, TuningPlan
from triton_kiln.autotuner.prewarm import prewarm
from triton_kiln.autotuner.run_record import finished_run, run_identity
from triton_kiln.autotuner.screening import FAILED, Evaluator, OneGpu, Scores, Strategy
from triton_kiln.autotuner.timesplit import TimeSplit
from triton_kiln.autotuner.tuning_progress import TuningProgress
from triton_kiln.errors import KilnError
from triton_kiln.tuning.configs import config_json, config_label
from triton_kiln.tuning.results import ConfigResult, TuningRun


class AutotuneError(KilnError):
    """Every config of a tuning run failed; the message lists each with its reason."""


class TuningSession:
    """Tunes one key of a kernel; the result lands in its autotuner's Triton attributes
    (``services.kernel``)."""

    def __init__(self, plan: TuningPlan, services: Services) -> None:
        self.plan = plan
        self.services = services
        self.kernel = services.kernel
        self.name = plan.name
        self.split = TimeSplit()  # where the run's wall time goes (compile overlaps benchmarking)
        self.progress = TuningProgress(self.name, 0, enabled=False)  # tune() makes the run's own
        self.verbose = False  # TRITON_PRINT_AUTOTUNING: Triton's per-config lines
        self.bencher: Bencher | None = None  # the run's: its sandbox given back however it ends
        self.run_id: int | None = None  # the run's in the database

    def tune(
        self,
        key: tuple[Any, ...],
        configs: Sequence[Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        grid: Any,
    ) -> None:
        """Tune ``key`` over the pruned ``configs`` for this call (see the module docstring)."""
        started = time.monotonic()
        built = build_candidates(self.plan, self.services, configs, args, kwargs)  # one per config
        candidates = built.candidates
        device = tuning_device(self.plan, self.services)  # NoGPUError with none: before anything is recorded
        identity = run_identity(self.name, candidates, key, self.services.target(), device)
        database = self.services.database()
        if self.found_in_database(key, candidates, identity, database):  # tuned before
            return
        claim = self.claim_node(identity, database, device, candidates, args, kwargs, grid)  # tuned now?
        if claim is not None and claim.run is not None and self.adopt(key, candidates, claim.run):
            node_tuning.adopt(self.kernel, self.name, key, claim.run, claim.waited_s, database)
            return
        strategy: Strategy = node_share.NodeShared(claim.share) if claim and claim.share else OneGpu()
        with self.running(built, identity, database, claim, started) as record:
            evaluator = self.compile(candidates, args, kwargs, grid)
            scores = self.scores(candidates, evaluator, record)
            first_pass = screen_phase(self.plan.timing, evaluator.bencher)
            strategy.screen(scores, lambda c: self.screen(c, scores, evaluator, first_pass, started))
            apply_rule(self.name, candidates, scores.results, scores.timings, scores.checker, record)
            if evaluator.bencher.owns_timing:
                self.final_round(scores, evaluator, strategy, first_pass)
            best = self.choose(key, scores, strategy, evaluator, first_pass)
            self.publish(key, best, scores)
            self.record(key, best, scores, identity, database, started)
        for config, same in built.duplicates:  # a config listed twice was timed once (as Triton, both)
            self.kernel.configs_timings[config] = self.kernel.configs_timings[same]

    # -- the steps ----------------------------------------------------------------------------

    def found_in_database(
        self, key: tuple[Any, ...], candidates: list[Candidate], identity: dict[str, str], database: Any
    ) -> bool:
        """A finished run for this identity in the tuning database: its best config adopted."""
        lookup = {k: v for k, v in identity.items() if k != "kernel"}
        recorded = database.lookup(**lookup) if database is not None else None
        if recorded is None or not self.adopt(key, candidates, recorded):
            return False
        self.kernel.loaded_from = "database"
        self.kernel.last_run = recorded
        self.kernel.tuned[key] = recorded
        log_lines.from_database(
            self.name,
            key,
            recorded.best_label or "",
            getattr(database, "path", database),
            recorded.started_at,
            len(recorded.results),
        )
        return True

    def claim_node(
        self,
        identity: dict[str, str],
        database: Any,
        device: LocalDevice,
        candidates: list[Candidate],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        grid: Any,
    ) -> node_tuning.Claim | None:
        """This process's part in the node (:mod:`.node_tuning`): tune (the claim holds the lock,
        or ``None``: no database, tune alone), adopt the run another process finished (``run``),
        after helping it from this GPU when it shares its run (:mod:`.node_share`)."""
        if not database:
            return None
        settings = self.plan.settings
        lookup = {k: v for k, v in identity.items() if k != "kernel"}
        claimed = node_tuning.claim(settings, database, lookup, self.name, device)
        if claimed.helper is not None:  # another GPU's process tunes it: help
            node_share.help_tune(self.plan, self.services, claimed.helper, candidates, args, kwargs, grid)
            waited = claimed.waited_s
            claimed = node_tuning.claim(settings, database, lookup, self.name, device, helping=False)
            claimed.waited_s += waited
        return claimed

    @contextlib.contextmanager
    def running(
        self, built: Built, identity: dict[str, str], database: Any, claim: node_tuning.Claim | None,
        started: float,
    ) -> Iterator[Callable[[ConfigResult], None]]:  # fmt: skip
        """A run begun in the database, its progress shown, its node claim and sandbox given back
        however it ends; yields where each new or changed result goes."""
        self.kernel.loaded_from = None
        if self.plan.own_device:  # a miss: the sandbox and the pool start now, beside the compiles
            prewarm(sandbox=self.plan.sandbox, pool=self.services.shared_pool())
        self.verbose = triton_compat.print_autotuning()
        candidates = built.candidates
        try:
            self.run_id = (
                database.begin_run(default_label=candidates[0].label, **identity) if database else None
            )
            # Shown on a terminal (KILN_PROGRESS forces it on or off); cleared if the run fails or
            # is interrupted, left as the run's last line when it finds a best config.
            with TuningProgress(self.name, len(candidates), self.plan.settings.progress) as progress:
                self.progress = progress
                built.record(database, self.run_id)
                yield self.recorder(database, self.run_id)
                built.apply(self.kernel)
                progress.finish(time.monotonic() - started)
        finally:
            if claim is not None:
                claim.release()
            if self.bencher is not None:  # a failed run too: its sandbox goes once idle
                ended(self.bencher)

    def compile(
        self, candidates: list[Candidate], args: Sequence[Any], kwargs: dict[str, Any], grid: Any
    ) -> Evaluator:
        """Every config to the pool, the bencher made first (its output-check kernel compiles
        first of all); the progress bar and the time split watch each compile."""
        pool = self.services.pool()
        self.bencher = make_bencher(self.plan, self.services, args, kwargs)
        submit_compiles(pool, candidates, self.plan.settings.prebuild_launchers)
        program.note([c.request for c in candidates], "tuning")  # the next run starts them at install()
        futures = {c.future for c in candidates if c.future is not None}
        self.split.watch(futures)
        for future in dict.fromkeys(c.future for c in candidates if c.future is not None):
            self.progress.watch(future, configs=sum(1 for c in candidates if c.future is future))
        return Evaluator(self.name, self.bencher, grid, self.split)

    def scores(
        self, candidates: list[Candidate], evaluator: Evaluator, record: Callable[[ConfigResult], None]
    ) -> Scores:
        """The run's results, empty; outputs are checked against the user's reference, else
        decided across every config at the end of the screening (:mod:`.outputs`)."""
        reference = evaluator.bencher.user_reference()
        checker = OutputChecks(reference is not None, InProcessCheck(self.plan.checks.tolerances, reference))
        return Scores(candidates, checker, record)

    def screen(
        self, candidate: Candidate, scores: Scores, evaluator: Evaluator, phase: Phase, started: float
    ) -> None:
        """One config's first pass here, as its compile finishes."""
        if self.verbose:
            self.progress.write(log_lines.triton_config_line(self.name, candidate.config))
        result, times = evaluator.evaluate(candidate, phase, scores.checker)
        if self.verbose and result.status != "ok":
            self.progress.write(log_lines.triton_failed_line(result.status, result.reason))
        if scores.first_result_s is None:
            scores.first_result_s = time.monotonic() - started
        scores.put(candidate, result, times)

    def final_round(
        self, scores: Scores, evaluator: Evaluator, strategy: Strategy, first_pass: Phase
    ) -> None:
        """When kiln owns the timing, configs are screened with short runs while others still
        compile (the CPU is busy, so timings are rough); the best few are timed again in full
        once every compile is done (:mod:`.final_round`). A contender another GPU screened is
        checked here first. With a user ``do_bench``, the one full pass stands, as Triton's."""
        timing = self.plan.timing
        check_here = functools.partial(evaluator.evaluate, phase=first_pass, checker=scores.checker)
        finalists = functools.partial(contenders, scores.candidates, scores.results, timing.final_margin)
        while strategy.confirm(scores, finalists(timing.final_top_k), check_here):
            pass
        with self.split.phase("final_s"):
            final_round(self.name, timing, scores, evaluator, self.progress)

    def choose(
        self,
        key: tuple[Any, ...],
        scores: Scores,
        strategy: Strategy,
        evaluator: Evaluator,
        first_pass: Phase,
    ) -> Any:
        """The fastest trusted config; flagged ones only when every ok config is flagged. A
        winner another GPU screened is checked here first. :class:`AutotuneError` when none is ok."""
        check_here = functools.partial(evaluator.evaluate, phase=first_pass, checker=scores.checker)
        while True:
            ok = {c.config: scores.timings[c.config] for c in eligible(scores.candidates, scores.results)}
            best = builtins.min(ok, key=ok.__getitem__) if ok else None
            if not strategy.confirm(scores, [c for c in scores.candidates if c.config is best], check_here):
                break
        evaluator.bencher.finish()
        if best is None:
            results = scores.results
            lines = [
                f"  {c.label}: {results[c.label].status}: {results[c.label].reason}"
                for c in scores.candidates
            ]
            raise AutotuneError(f"every config of {self.name} failed for key {key}:\n" + "\n".join(lines))
        return best

    def publish(self, key: tuple[Any, ...], best: Any, scores: Scores) -> None:
        """The choice in the autotuner's Triton attributes: ``cache[key]`` and ``configs_timings``."""
        self.kernel.cache[key] = best
        self.kernel.configs_timings = scores.timings

    def record(
        self,
        key: tuple[Any, ...],
        best: Any,
        scores: Scores,
        identity: dict[str, str],
        database: Any,
        started: float,
    ) -> None:
        """Finish the run in the database; it becomes the autotuner's ``last_run``."""
        run_id = self.run_id
        best_label = config_label(best)
        wall = time.monotonic() - started
        split = self.split.as_dict(started, wall)
        assert self.bencher is not None
        peak = ended(self.bencher)
        first_result_s = scores.first_result_s
        if database is not None and run_id is not None:
            database.finish_run(run_id, best_label, wall, first_result_s, split=split, gpu_peak_bytes=peak)
        results = tuple(scores.results[c.label] for c in scores.candidates)
        default = scores.candidates[0].label
        run = finished_run(identity, results, best_label, default, wall, split, first_result_s, peak)
        self.kernel.last_run = run
        self.kernel.tuned[key] = run
        log_lines.log_choice(self.name, key, run)

    def recorder(self, database: Any, run_id: int | None) -> Callable[[ConfigResult], None]:
        """Where each new or changed result goes: the progress bar, and the run in the database."""

        def record(result: ConfigResult) -> None:
            self.progress.record(result)
            if database is not None and run_id is not None:
                database.record(run_id, result)

        return record

    def adopt(self, key: tuple[Any, ...], candidates: list[Candidate], recorded: TuningRun) -> bool:
        """Take a finished run's best config and timings (``False``: its best is not among ours)."""
        by_label = {c.label: c for c in candidates}
        best = by_label.get(recorded.best_label or "")
        if best is None:
            return False
        self.kernel.cache[key] = best.config
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
                timings[candidate.config] = list(FAILED)
        self.kernel.configs_timings = timings
        return True


# -- a run's candidates ---------------------------------------------------------------------------


@dataclass
class Built:
    """The run's candidates (one per distinct config), duplicates, and configs that failed here.

    Specializing a config runs Triton's backend ``parse_options`` on its compile options, which
    asserts on values it refuses (``num_warps=3``: "num_warps must be a power of 2"; ``num_ctas=2``
    below sm90). Such a config cannot compile, so, as the README promises of a config that fails
    to compile, it is skipped as ``compile_error`` with that message as its reason, and the run
    goes on with the others."""

    candidates: list[Candidate]
    duplicates: list[tuple[Any, Any]]
    failed: list[tuple[Any, ConfigResult]] = field(default_factory=list)

    def record(self, database: Any, run_id: int | None) -> None:
        """Record the configs that failed here in the run's database entry (before it finishes)."""
        if database is not None and run_id is not None:
            for _, result in self.failed:
                database.record(run_id, result)

    def apply(self, kernel: TunedKernel) -> None:
        """Add the configs that failed here to the autotuner's timings and its last run."""
        for config, _ in self.failed:
            kernel.configs_timings[config] = list(FAILED)
        if self.failed and kernel.last_run is not None:
            results = (*kernel.last_run.results, *(r for _, r in self.failed))
            kernel.last_run = replace(kernel.last_run, results=results)


def build_candidates(
    plan: TuningPlan, services: Services, configs: Sequence[Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> Built:
    """Specialize each config for this call; one that Triton's backend refuses is a failed config.
    When every config fails so, :class:`AutotuneError` lists each (the first failure as its
    cause); pruning that leaves no config raises it too, naming ``top_k``."""
    name = plan.name
    if not configs:
        top_k = getattr(services.kernel, "configs_top_k", None)
        raise AutotuneError(
            f"pruning left no configs of {name} to tune: prune_configs_by's top_k={top_k!r} with "
            f"{len(services.kernel.configs)} configs keeps none (a float keeps int(top_k * len(configs))); "
            f"give top_k an int >= 1 or a fraction that keeps at least one config"
        )
    built: list[Candidate] = []
    failed: list[tuple[Any, ConfigResult]] = []
    first: BaseException | None = None
    for config in configs:
        try:
            built.append(services.candidate(config, args, kwargs))
        except ConflictingMetaParameters:
            raise
        except (AssertionError, ValueError) as exc:  # the backend refused the config's options
            first = first or exc
            why = reason(exc) if str(exc).strip() else type(exc).__name__
            result = ConfigResult(
                label=config_label(config), config=config_json(config), status="compile_error", reason=why
            )
            failed.append((config, result))
    if not built:
        lines = [f"  {r.label}: {r.status}: {r.reason}" for _, r in failed]
        raise AutotuneError(f"every config of {name} failed:\n" + "\n".join(lines)) from first
    candidates, duplicates = distinct(built)
    return Built(candidates, duplicates, failed)

"""Every name kiln takes from Helion, private or public, read against Helion 1.5.0 and 1.5.1.

Importing it checks Helion's version (:data:`~triton_kiln.helion.versions.SUPPORTED_HELION`)
and that each private name below exists, and raises
:class:`~triton_kiln.helion.errors.UnsupportedHelionError` naming the first one missing;
:mod:`triton_kiln.helion.adapter` then uses only what this module defines. The names, and what
kiln does with each (the same in 1.5.0 and 1.5.1 unless a difference is named):

* ``helion.autotuner.benchmark_provider``: ``LocalBenchmarkProvider`` (kiln's provider derives
  from it) and its private methods ``_create_precompile_future`` (one config's precompile, which
  kiln's provider replaces), ``_compute_reference_baseline`` (the accuracy baseline, which kiln
  precedes with its own compile), ``_precompile_context`` and ``_next_precompile_result_path``
  (what a ``PrecompileFuture`` is made with); the module's ``_clone_args`` (copies of mutated
  arguments), ``_searching_candidates`` (the context Helion generates candidates' code in) and
  ``_MAX_REFERENCE_BASELINE_ATTEMPTS`` (how often the baseline shrinks its block sizes);
* ``helion.autotuner.precompile_future``: ``PrecompileFuture`` (public: ``skip``,
  ``wait_for_all``, ``failure_reason``), ``_ExtractedLaunchArgs`` (the exception Helion's
  capturing launcher raises with a Triton launch) and ``_write_result_file`` (the result record
  a precompile child writes);
* ``helion.autotuner.base_search.BaseSearch``: its private ``_benchmark_provider_cls`` (the
  provider class a search builds), ``_prepare`` (a search's provider built and its baseline
  computed, without searching) and ``__init__``'s one default argument (the provider class every
  search takes unless told otherwise); a cache wrapper's ``autotuner`` and ``_autotuner_factory``.
* ``helion.autotuner.benchmark_provider.LocalBenchmarkProvider``'s benchmark worker: the instance
  attribute ``_benchmark_worker`` (made in ``__init__``, a ``BenchmarkWorker`` Helion creates on
  first use when it is ``None``, shut down and set back to ``None`` by ``cleanup``,
  ``_shutdown_isolated_worker`` and ``_disable_unloadable_benchmark_worker``), which kiln's
  provider answers with its own worker; ``_subprocess_benchmark_enabled`` (whether Helion
  benchmarks in that worker: ``autotune_benchmark_subprocess``, picklable arguments, no mutated
  arguments, not distributed); ``_run_subprocess_benchmark_job(fn, warmup=1, rep=50)`` and
  ``_run_subprocess_accuracy_check_job(fn)`` (one config's timing and accuracy check, built and
  run exactly as ``_benchmark_function_subprocess`` does; kiln calls them ahead of Helion when a
  config's compile lands). 1.5.1 adds ``args_slot``/``timeout`` to the first and the finalists'
  private argument copies (``steady_window_benchmark_available``, ``benchmark_isolated``'s
  ``args_slots``), which reach the worker through the same ``run``; 1.5.0 has neither.
* ``helion.autotuner.benchmark_worker``: ``BenchmarkWorker``'s interface (``run(job, timeout)``,
  ``alive()``, ``shutdown()``) and its errors ``BenchmarkSubprocessError``, ``BenchmarkTimeout``,
  ``BenchmarkWorkerDied``, ``BenchmarkWorkerUnkillable`` (identical in 1.5.0 and 1.5.1);
  ``helion.autotuner.benchmark_job``'s ``BenchmarkJob``, ``AccuracyCheckJob`` and
  ``AccuracyCheckResult`` (1.5.1 adds ``BenchmarkJob.args_slot``).
* the final verification (kiln's final round, ``KILN_HELION_FINAL_ROUND``;
  :mod:`triton_kiln.helion.finalists`), read against both versions, where they are the same
  unless named: ``helion.autotuner.base_search.PopulationBasedSearch.final_rebenchmark_best(best)``
  (public, not overridden by any search in either version) picks the finalists: the pinned
  seeds' members plus the ``_final_rebenchmark_top_k()`` best distinct configs of the run
  (``HELION_AUTOTUNE_FINAL_REBENCHMARK_TOP_K``, default 8, 32 on CuTe) by their low-water
  timing, plus on 1.5.1 the incumbent; nothing when the budget is spent, ``top_k <= 1`` or
  fewer than two. Where the effort profile has a final selection (1.5.1, ``_final_selection_enabled()``:
  effort ``full``) it runs ``_run_final_selection`` in the benchmark worker (kiln's sandbox
  already); otherwise (1.5.1's ``quick``, every effort of 1.5.0) it calls
  ``self.rebenchmark(finalists, desc=f"Final verification top {n} configs",
  target_ms=_final_rebenchmark_target_ms(), use_isolated=, confirm_suspicious=,
  use_interleaved=not use_isolated, candidate_private_args=use_isolated)`` with
  ``use_isolated`` from ``HELION_AUTOTUNE_FINAL_REBENCHMARK_ISOLATED`` (default off, on for
  CuTe) and ``target_ms`` from ``HELION_AUTOTUNE_FINAL_REBENCHMARK_TARGET_MS`` (default 5000,
  200 to 60000). Not isolated, ``rebenchmark`` times every finalist in the autotuning process
  with the backend's interleaved bench (``helion.autotuner.benchmarking.interleaved_bench``:
  the finalists called in turn, ``repeat = target_ms / slowest finalist's perf`` rounds,
  3..20000, the pass capped at ``target_ms * n`` ms; ``HELION_CAP_REBENCHMARK_REPEAT`` caps the
  repeat), its results go through ``_resolve_isolated_rebenchmark_results(members, results)``
  (a float stays; ``IsolatedBenchmarkFailure("error")``: ``inf``; ``"timeout"`` or ``None``:
  the member's previous perf) and ``_apply_rebenchmark_timings(members, timings,
  failure_statuses=, trace_results=)``: each finalist's timing appended to ``member.perfs``
  (``member.perf`` is the last one), ``best_perf_so_far`` lowered, a ``rebenchmark`` trace
  entry per finalist, the finalist history refreshed. ``final_rebenchmark_best`` then takes
  the live finalist with the lowest ``perf``, a pinned seed within
  ``HELION_AUTOTUNE_FINAL_REBENCHMARK_PINNED_TOLERANCE`` (default 0) of it instead, logs
  ``"Final verification selected a different config: ..."`` when the pick changed, raises
  ``NoConfigFound`` when none is live, and returns it; ``_finalize`` sets ``self.best`` to it
  (a ``BenchmarkWorkerUnkillable`` abandons the verification and keeps the best live member).
  Isolated, ``rebenchmark`` calls the provider's ``benchmark_isolated(fns, warmup=1, rep=,
  desc=, fresh_process=True)``, which logs a failure as ``f"{desc} subprocess failed: {e}"``
  (a sticky CUDA error: ``f"{desc} sticky CUDA error skipped: {e}"``). kiln takes the
  search's ``rebenchmark`` for the duration of ``final_rebenchmark_best``, answers the
  non-isolated final-verification call with its race and gives Helion's
  ``_resolve_isolated_rebenchmark_results`` and ``_apply_rebenchmark_timings`` the race's
  timings; ``helion.autotuner.benchmark_provider.IsolatedBenchmarkFailure``;
  ``helion.autotuner.benchmark_job``'s module globals ``do_bench`` and ``do_bench_generic``
  (what ``BenchmarkJob.__call__`` times with, ``return_mode="median"``), which kiln's finalist
  job (:class:`~triton_kiln.helion.sandbox_jobs.FinalistRunsJob`) asks for every run instead;
  ``BenchmarkJob``'s ``warmup`` field; its ``rep`` and ``fixed_repetitions`` fields, which
  kiln's screening (``KILN_HELION_SCREEN_MS``) reads and shortens for a streamed search timing.
* a batch's re-benchmark (kiln runs it ahead, ``KILN_HELION_VERIFY_AHEAD``; :mod:`.stream`):
  after each batch the searches call ``rebenchmark_population``, which re-times the members
  ``should_rebenchmark`` keeps (``perf < settings.get_rebenchmark_threshold() *
  best_perf_so_far``; the effort profile's threshold, 0.9 at quick: none) through
  ``rebenchmark`` -> ``benchmark_isolated`` -> ``_run_subprocess_benchmark_job(fn, warmup=1,
  rep=PopulationBasedSearch._isolated_rep_ms(_REBENCHMARK_TARGET_MS_DEFAULT,
  autotune_benchmark_timeout))``, one job per member in the benchmark worker.
* public: ``helion.autotuner.logger``'s ``classify_triton_exception``,
  ``match_unrecoverable_runtime_error``, ``maybe_dump_triton_failure``;
  ``helion.runtime.settings.default_autotuner_fn``;
  ``helion.runtime.triton.launcher.compile_only_launch_args``; ``helion.autotuner.LFBOTreeSearch``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from triton_kiln.helion.errors import UnsupportedHelionError
from triton_kiln.helion.versions import SUPPORTED_HELION


def _helion_version() -> str:
    try:
        return importlib.metadata.version("helion")
    except importlib.metadata.PackageNotFoundError:
        raise UnsupportedHelionError("(not installed)", SUPPORTED_HELION) from None


VERSION = _helion_version()
if VERSION not in SUPPORTED_HELION:
    raise UnsupportedHelionError(VERSION, SUPPORTED_HELION)

try:
    from helion.autotuner import base_search as _bs
    from helion.autotuner import benchmark_provider as _bp
    from helion.autotuner import precompile_future as _pf
    from helion.autotuner.base_search import BaseSearch, PopulationBasedSearch
    from helion.autotuner.benchmark_job import AccuracyCheckJob, AccuracyCheckResult, BenchmarkJob
    from helion.autotuner.benchmark_provider import IsolatedBenchmarkFailure, LocalBenchmarkProvider
    from helion.autotuner.benchmark_worker import (
        BenchmarkSubprocessError,
        BenchmarkTimeout,
        BenchmarkWorkerDied,
        BenchmarkWorkerUnkillable,
    )
    from helion.autotuner.logger import (
        classify_triton_exception,
        match_unrecoverable_runtime_error,
        maybe_dump_triton_failure,
    )
    from helion.runtime.settings import default_autotuner_fn
    from helion.runtime.triton.launcher import compile_only_launch_args
except ImportError as exc:  # a supported version that fails to import (e.g. its torch is too old)
    raise UnsupportedHelionError(VERSION, SUPPORTED_HELION, f"importing it failed: {exc}") from exc

for _owner, _name in (
    (_bp, "_clone_args"),
    (_bp, "_searching_candidates"),
    (_bp, "_MAX_REFERENCE_BASELINE_ATTEMPTS"),
    (_pf, "_ExtractedLaunchArgs"),
    (_pf, "_write_result_file"),
    (LocalBenchmarkProvider, "_create_precompile_future"),
    (LocalBenchmarkProvider, "_compute_reference_baseline"),
    (LocalBenchmarkProvider, "_precompile_context"),
    (LocalBenchmarkProvider, "_next_precompile_result_path"),
    (LocalBenchmarkProvider, "_subprocess_benchmark_enabled"),
    (LocalBenchmarkProvider, "_run_subprocess_benchmark_job"),
    (LocalBenchmarkProvider, "_run_subprocess_accuracy_check_job"),
    (BaseSearch, "_prepare"),
    (PopulationBasedSearch, "final_rebenchmark_best"),
    (PopulationBasedSearch, "rebenchmark"),
    (PopulationBasedSearch, "_resolve_isolated_rebenchmark_results"),
    (PopulationBasedSearch, "_apply_rebenchmark_timings"),
    (PopulationBasedSearch, "_isolated_rep_ms"),
    (_bs, "_REBENCHMARK_TARGET_MS_DEFAULT"),
):
    if not hasattr(_owner, _name):
        raise UnsupportedHelionError(VERSION, SUPPORTED_HELION, f"{_owner.__name__}.{_name} is missing")
if "_benchmark_worker" not in LocalBenchmarkProvider.__init__.__code__.co_names:
    raise UnsupportedHelionError(
        VERSION, SUPPORTED_HELION, "LocalBenchmarkProvider.__init__ no longer sets _benchmark_worker"
    )

PrecompileFuture = _pf.PrecompileFuture
ExtractedLaunchArgs: Any = _pf._ExtractedLaunchArgs
"""What Helion's generated host code raises from a capturing launcher (``kernel, grid, args, kwargs``)."""

MAX_REFERENCE_BASELINE_ATTEMPTS: int = _bp._MAX_REFERENCE_BASELINE_ATTEMPTS

__all__ = [
    "MAX_REFERENCE_BASELINE_ATTEMPTS",
    "VERSION",
    "AccuracyCheckJob",
    "AccuracyCheckResult",
    "BaseSearch",
    "BenchmarkJob",
    "BenchmarkSubprocessError",
    "BenchmarkTimeout",
    "BenchmarkWorkerDied",
    "BenchmarkWorkerUnkillable",
    "ExtractedLaunchArgs",
    "IsolatedBenchmarkFailure",
    "LocalBenchmarkProvider",
    "LocalProvider",
    "PopulationBasedSearch",
    "PrecompileFuture",
    "classify_triton_exception",
    "compile_only_launch_args",
    "default_autotuner_fn",
    "match_unrecoverable_runtime_error",
    "maybe_dump_triton_failure",
]


class LocalProvider(LocalBenchmarkProvider):  # type: ignore[misc]  # Helion is untyped
    """Helion's local benchmark provider, its private hooks under kiln's names: a subclass
    overrides :meth:`precompile_future`, :meth:`reference_baseline` and the benchmark worker
    (:meth:`benchmark_worker`, :meth:`set_benchmark_worker`: what Helion reads and writes as
    ``_benchmark_worker``), and calls Helion's own through :meth:`helion_reference_baseline`,
    :meth:`precompile_context` and :meth:`next_result_path`."""

    def _create_precompile_future(self, config: Any, fn: Any) -> Any:
        return self.precompile_future(config, fn)

    def _compute_reference_baseline(self) -> tuple[object, Sequence[object]]:
        return self.reference_baseline()

    def precompile_future(self, config: Any, fn: Any) -> Any:
        """One config's precompile (a ``PrecompileFuture``): Helion's own unless overridden."""
        return super()._create_precompile_future(config, fn)

    def reference_baseline(self) -> tuple[object, Sequence[object]]:
        """The accuracy baseline: Helion's own unless overridden."""
        return self.helion_reference_baseline()

    def helion_reference_baseline(self) -> tuple[object, Sequence[object]]:
        return super()._compute_reference_baseline()  # type: ignore[no-any-return]

    def precompile_context(self) -> Any:
        return self._precompile_context()

    def next_result_path(self) -> Any:
        return self._next_precompile_result_path()

    @property
    def _benchmark_worker(self) -> Any:
        return self.benchmark_worker()

    @_benchmark_worker.setter
    def _benchmark_worker(self, worker: Any) -> None:
        self.set_benchmark_worker(worker)

    def benchmark_worker(self) -> Any:
        """The worker Helion runs its benchmark jobs in (``None``: Helion makes its own on first use)."""
        return self.__dict__.get("helion_benchmark_worker")

    def set_benchmark_worker(self, worker: Any) -> None:
        """What Helion assigns: its own new worker, or ``None`` after shutting one down."""
        self.__dict__["helion_benchmark_worker"] = worker


def clone_args(args: Sequence[object], process_group_name: Any, idx_to_clone: Any = None) -> Any:
    """Copies of a kernel's arguments, as Helion's precompile makes them (``idx_to_clone``: only
    those, else all)."""
    if idx_to_clone is None:
        return _bp._clone_args(args, process_group_name)
    return _bp._clone_args(args, process_group_name, idx_to_clone=idx_to_clone)


def searching_candidates() -> contextlib.AbstractContextManager[Any]:
    """The context Helion generates a candidate config's code in."""
    return _bp._searching_candidates()  # type: ignore[no-any-return]


def write_result_file(path: Any, message: dict[str, object]) -> None:
    """Helion's precompile result record, written where its ``PrecompileFuture`` reads it."""
    _pf._write_result_file(path, message)


def provider_class(search: Any) -> type:
    """The benchmark provider class a Helion search builds."""
    return search._benchmark_provider_cls  # type: ignore[no-any-return]


def set_provider_class(search: Any, cls: type) -> None:
    search._benchmark_provider_cls = cls


def wrapped_search(search: Any) -> Any:
    """The search inside Helion's cache wrapper, or ``None`` when ``search`` is not a wrapper."""
    return getattr(search, "autotuner", None)


def wrap_search_factory(search: Any, wrap: Callable[[Any], Any]) -> None:
    """A cache wrapper's later searches (its ``_autotuner_factory``) passed through ``wrap``."""
    factory = getattr(search, "_autotuner_factory", None)
    if factory is not None:
        search._autotuner_factory = lambda: wrap(factory())


def prepare(search: Any) -> None:
    """A search's provider built and its reference baseline computed, without searching."""
    search._prepare()


def create_precompile_future(provider: Any, config: Any, fn: Any) -> Any:
    """One config's precompile through ``provider``, as Helion's ``benchmark()`` starts it."""
    return provider._create_precompile_future(config, fn)


def default_search(bound_kernel: Any, args: Sequence[object]) -> Any:
    """Helion's default search (``LFBOTreeSearch``) for a bound kernel."""
    from helion.autotuner import LFBOTreeSearch

    return LFBOTreeSearch(bound_kernel, args)


_HELION_DEFAULTS = BaseSearch.__init__.__defaults__


def set_default_provider_class(cls: type | None) -> None:
    """``cls`` the provider class of every search made from now on; ``None``: Helion's own."""
    BaseSearch.__init__.__defaults__ = _HELION_DEFAULTS if cls is None else (cls,)


def default_provider_is(cls: type) -> bool:
    return bool(BaseSearch.__init__.__defaults__ == (cls,))


@contextlib.contextmanager
def wait_for_all_wrapped(
    wrap: Callable[[Callable[[list[Any], str | None], list[bool]]], Callable[..., list[bool]]],
) -> Iterator[None]:
    """``PrecompileFuture.wait_for_all`` (Helion's precompile phase) replaced by ``wrap(original)``
    in this block, then given back."""
    original = PrecompileFuture.__dict__["wait_for_all"]
    PrecompileFuture.wait_for_all = staticmethod(wrap(original.__func__))
    try:
        yield
    finally:
        PrecompileFuture.wait_for_all = original


def subprocess_benchmark_enabled(provider: Any) -> bool:
    """Whether Helion benchmarks ``provider``'s configs in its benchmark worker (else in-process)."""
    return bool(provider._subprocess_benchmark_enabled())


def run_benchmark_job(provider: Any, fn: Any, rep: int = 50) -> float | None:
    """One config's timing job, built and run as Helion's ``_benchmark_function_subprocess`` first
    runs it (``warmup=1, rep=50``); ``None`` when Helion cannot send ``fn`` to a worker."""
    result = provider._run_subprocess_benchmark_job(fn, warmup=1, rep=rep)
    return None if result is None else float(result)


def run_rebenchmark_job(provider: Any, fn: Any) -> float | None:
    """One config's re-benchmark job, built and run as Helion's ``rebenchmark`` runs it for a
    member after a batch (the timing job with its window)."""
    rep = PopulationBasedSearch._isolated_rep_ms(
        _bs._REBENCHMARK_TARGET_MS_DEFAULT, provider.settings.autotune_benchmark_timeout
    )
    return run_benchmark_job(provider, fn, rep)


def rebenchmark_threshold(provider: Any) -> float:
    """The search re-benchmarks a member whose timing is under this many times the best."""
    return float(provider.settings.get_rebenchmark_threshold())


def run_accuracy_job(provider: Any, fn: Any) -> Any:
    """One config's accuracy-check job against Helion's baseline output, as Helion runs it after
    the timing; ``None`` when Helion checks in-process instead."""
    return provider._run_subprocess_accuracy_check_job(fn)


def accuracy_check_on(provider: Any) -> bool:
    """Whether Helion checks each config's output (``autotune_accuracy_check``)."""
    return bool(provider.settings.autotune_accuracy_check)


def job_label(job: object) -> str:
    """A Helion worker job as kiln's logs name it: its kind and the generated function it runs."""
    spec = getattr(job, "fn_spec", None)
    name = getattr(spec, "function_name", None) if spec is not None else None
    kind = type(job).__name__ if not callable(job) or spec is not None else getattr(job, "__name__", "job")
    return f"Helion {kind} of {name}" if name else f"Helion {kind}"


# -- the final verification (kiln's final round) ----------------------------------------------

FINAL_VERIFICATION_DESC = "Final verification top "
"""How ``final_rebenchmark_best``'s ``rebenchmark`` call's ``desc`` begins (``f"Final
verification top {n} configs"``)."""


def is_final_verification(desc: str) -> bool:
    return desc.startswith(FINAL_VERIFICATION_DESC)


def is_pinned_finalist(search: Any, member: Any) -> bool:
    """Whether ``member`` is a pinned seed's (``PopulationBasedSearch._pinned_finalist_configs``,
    1.5.0 and 1.5.1: the configs ``final_rebenchmark_best`` always verifies, and picks within
    its pinned tolerance of the fastest)."""
    return member.config in getattr(search, "_pinned_finalist_configs", ())


HELION_FINAL_REBENCHMARK_BEST: Callable[[Any, Any], Any] = PopulationBasedSearch.__dict__[
    "final_rebenchmark_best"
]
"""Helion's own ``PopulationBasedSearch.final_rebenchmark_best`` (the function)."""


def set_final_rebenchmark_best(function: Callable[[Any, Any], Any] | None) -> None:
    """``function`` every search's ``final_rebenchmark_best``; ``None``: Helion's own again."""
    PopulationBasedSearch.final_rebenchmark_best = function or HELION_FINAL_REBENCHMARK_BEST


def final_rebenchmark_best_is(function: Callable[[Any, Any], Any]) -> bool:
    return PopulationBasedSearch.__dict__["final_rebenchmark_best"] is function


def benchmark_fn_set(search: Any) -> bool:
    """Whether the user times configs with their own ``autotune_benchmark_fn`` (then Helion's
    re-benchmarks call it in-process)."""
    return search.settings.autotune_benchmark_fn is not None


def finalist_job(provider: Any, fn: Any, rep: int, capture: Callable[[Callable[[], object]], Any]) -> Any:
    """Helion's ``BenchmarkJob`` for one finalist (``warmup=1``, ``rep`` ms), built as
    ``_run_subprocess_benchmark_job`` builds it; ``capture`` runs the builder and returns the job
    it sent to the worker (``None``: Helion cannot send ``fn`` to a worker)."""
    return capture(lambda: provider._run_subprocess_benchmark_job(fn, warmup=1, rep=rep))


def with_warmup(job: Any, warmup_ms: int) -> Any:
    """``job`` (a ``BenchmarkJob``) with do_bench's warm-up of ``warmup_ms``."""
    import dataclasses

    return dataclasses.replace(job, warmup=warmup_ms)


def screened(job: Any, rep_ms: int) -> Any | None:
    """``job`` timed with a window of ``rep_ms`` (kiln's screening), where it is a search timing
    (Helion's ``BenchmarkJob`` sized by time) with a longer one; else ``None``."""
    import dataclasses

    if not isinstance(job, BenchmarkJob) or job.fixed_repetitions is not None or job.rep <= rep_ms:
        return None
    return dataclasses.replace(job, rep=rep_ms)


@contextlib.contextmanager
def every_run_of_benchmark_jobs() -> Iterator[None]:
    """In this block (in the sandbox process), ``BenchmarkJob()`` returns every run's time (ms,
    a list) rather than their median: its ``do_bench``/``do_bench_generic`` called with
    ``return_mode="all"``."""
    from helion.autotuner import benchmark_job

    originals = {name: getattr(benchmark_job, name) for name in ("do_bench", "do_bench_generic")}

    def every_run(original: Callable[..., Any]) -> Callable[..., Any]:
        def bench(*args: Any, **kwargs: Any) -> Any:
            kwargs["return_mode"] = "all"
            kwargs.pop("quantiles", None)
            return original(*args, **kwargs)

        return bench

    for name, original in originals.items():
        setattr(benchmark_job, name, every_run(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(benchmark_job, name, original)


def apply_final_timings(
    search: Any, members: Sequence[Any], results: Sequence[Any], traced: Sequence[Any]
) -> None:
    """The finalists' timings set as Helion's ``rebenchmark`` sets them after its own timing:
    ``results`` (a float, or ``IsolatedBenchmarkFailure``) through
    ``_resolve_isolated_rebenchmark_results`` and ``_apply_rebenchmark_timings``; ``traced`` is
    what its trace records for each."""
    timings, statuses = search._resolve_isolated_rebenchmark_results(members, list(results))
    search._apply_rebenchmark_timings(members, timings, failure_statuses=statuses, trace_results=list(traced))

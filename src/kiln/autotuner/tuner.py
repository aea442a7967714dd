"""``kiln.autotune``: ``triton.autotune``'s contract, with parallel compiles and a GPU sandbox.

A tuning run, on the first call for a new key::

    caller thread
      prune configs (early_config_prune, perf_model/top_k: Triton's own code)
      one CompileRequest per config (Triton's specialization of this call's arguments)
      database lookup ---- hit: take the recorded best config, tune nothing ----------+
      submit all to the CompilePool (longest guessed compile first)                    |
      sandbox.start() in the background (torch + CUDA context while compiles run)      |
      as each binary arrives: benchmark it (sandbox, or in-process) -> check outputs   |
           -> record the config in the database (committed at once)                   |
      best = min(timings) -> cache[key], configs_timings, best_config  <---------------+
      launch the best config's binary (loaded from the artifact; no triton.compile)

Configs that fail to compile (Python error, compiler crash, timeout), to load (out of
resources), to run (illegal memory access, hang, crash) or that disagree with the reference
are skipped with their reason recorded; if every config fails, :class:`AutotuneError` lists
each with its reason. User callables that must run in the caller's process (a custom
``do_bench``, ``pre_hook``/``post_hook``, a config's ``pre_hook``) switch that kernel to
in-process benchmarking, as does ``sandbox=False``.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import json
import logging
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triton.runtime.autotuner import Autotuner as _TritonAutotuner

from kiln import settings as settings_mod
from kiln import triton_compat
from kiln.artifacts.artifact import CompiledArtifact
from kiln.autotuner.specialize import BoundCall, config_label, request_for, tuning_key
from kiln.autotuner.variants import FastCache
from kiln.compile.request import CompileRequest, guess_compile_cost
from kiln.errors import (
    CompileTimeoutError,
    KilnError,
    TargetError,
    WorkerCrashedError,
    WorkerMemoryError,
)
from kiln.launch import KernelLauncher, LaunchSpec, param_flags
from kiln.launch.entry import LaunchEntry
from kiln.launch.native import NativeBuildError, native
from kiln.pool import CompilePool, get_pool
from kiln.sandbox.compare import compare

log = logging.getLogger("kiln.autotune")

_INF = float("inf")


class AutotuneError(KilnError):
    """Every config of a tuning run failed; the message lists each with its reason."""


@dataclass(frozen=True)
class Phase:
    """How long to time one config, and whether to check its outputs."""

    warmup_ms: float
    rep_ms: float
    check: bool


@dataclass
class _Candidate:
    config: Any
    label: str
    request: CompileRequest
    bound: BoundCall
    future: Future[CompiledArtifact] | None = None


def _reason(exc: BaseException) -> str:
    """One line saying why a compile failed: kiln's headline, or the error's own last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, KilnError):
        text = lines[0] if lines else type(exc).__name__
    else:  # Triton's CompilationError: source excerpt first, the message last
        text = f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
    return text[:500]


def _compile_status(exc: BaseException) -> str:
    if isinstance(exc, CompileTimeoutError):
        return "timeout"
    if isinstance(exc, (WorkerCrashedError, WorkerMemoryError)):
        return "crashed"
    name = type(exc).__name__
    if name in ("OutOfResources", "PTXASError"):
        return "out_of_resources"
    return "compile_error"


class Autotuner(_TritonAutotuner):  # type: ignore[misc]
    """Drop-in for ``triton.runtime.autotuner.Autotuner`` (see the module docstring)."""

    def __init__(
        self,
        fn: Any,
        arg_names: list[str],
        configs: list[Any],
        key: list[str],
        reset_to_zero: list[str] | None,
        restore_value: list[str] | None,
        pre_hook: Callable[..., Any] | None = None,
        post_hook: Callable[..., Any] | None = None,
        prune_configs_by: dict[str, Any] | None = None,
        warmup: float | None = None,
        rep: float | None = None,
        use_cuda_graph: bool = False,
        do_bench: Callable[..., Any] | None = None,
        cache_results: bool = False,
        *,
        sandbox: bool | None = None,
        check_outputs: bool = True,
        reference: Callable[[dict[str, Any]], Any] | None = None,
        tolerances: tuple[float, float] | None = None,
        pool: CompilePool | None = None,
        database: Any = None,
        target: Any = None,
        bencher: Callable[[Autotuner, Sequence[Any], Mapping[str, Any]], _Bencher] | None = None,
    ) -> None:
        super().__init__(
            fn,
            arg_names,
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
        )
        current = settings_mod.current()
        self._user_do_bench = do_bench is not None or use_cuda_graph or warmup is not None or rep is not None
        self._warmup_ms = 25.0 if warmup is None else float(warmup)
        self._rep_ms = 100.0 if rep is None else float(rep)
        self._screen_ms = (5.0, 20.0)  # warm-up and timing of the first, rough pass
        self._final_top_k = (3, 5)  # the full passes time 10% of the configs, within these bounds
        self._final_passes = 3
        self._sandbox_wanted = current.sandbox if sandbox is None else sandbox
        self._check_outputs = check_outputs
        self._reference = reference
        self._tolerances = tolerances
        self._pool = pool
        self._database = database
        self._target: Any = target
        self._bencher_factory = bencher
        self._kernels: dict[str, tuple[Any, KernelLauncher]] = {}  # request key -> (Triton kernel, launcher)
        self._lock = threading.RLock()
        self.last_run: Any = None  # the kiln.tuning.TuningRun of the latest tuning
        self.loaded_from: str | None = None  # "database" when the last tuning was skipped
        self.tuned: dict[tuple[Any, ...], Any] = {}  # tuning key -> TuningRun (tuned or from the db)
        # Variants launched in this process, for bundles: (tuning key, request key) -> (entry, artifact).
        self._variants: dict[tuple[Any, str], tuple[Any, CompiledArtifact]] = {}
        # The fast path (see fastpath.py): len(args) -> call key -> LaunchEntry.
        self._fast: dict[int, dict[tuple[Any, ...], LaunchEntry]] = {}
        flags = param_flags(fn.params, key)
        self._flags_by_len = [flags[:n] for n in range(len(flags) + 1)]
        self._call_key: Any = None
        self._dispatcher: Any = None  # kiln's C fast path (fastpath.py), when it builds
        try:
            module = native()
            self._call_key = module.call_key
            self._dispatcher = module.Dispatcher(self._fast, list(self._flags_by_len), self, self._full_path)
        except NativeBuildError as exc:
            log.info("kiln: %s has no fast launch path: %s", fn.__name__, exc)

    # The cache (tuning key -> config) drops the fast path's entries whenever it changes.
    @property
    def cache(self) -> dict[Any, Any]:
        return self._cache

    @cache.setter
    def cache(self, value: dict[Any, Any]) -> None:
        self._cache = FastCache(self._drop_fast, value)
        self._drop_fast()

    def _drop_fast(self) -> None:
        fast = getattr(self, "_fast", None)
        if fast:
            fast.clear()

    def __getitem__(self, grid: Any) -> Any:
        if self._dispatcher is not None:
            return self._dispatcher[grid]  # a _kiln_launch.BoundCall: the whole fast path in C
        return super().__getitem__(grid)  # no C helper, no fast path: Triton's proxy to run()

    def _full_path(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What ``kernel[grid](*args, **kwargs)`` does when the fast path has no entry for it."""
        return self.run(*args, grid=grid, warmup=False, **kwargs)

    # -- the contract -------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._run(*args, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        # grid and warmup stay in kwargs: Triton passes them to pruning, perf models and hooks.
        grid = kwargs.get("grid")
        warmup = bool(kwargs.get("warmup", False))
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        key: tuple[Any, ...] | None = None
        if len(self.configs) > 1:
            key = tuning_key(self.arg_names, self.keys, args, kwargs)
            if key not in self.cache and not warmup:
                adopted = self._from_bundle(key, args, kwargs, grid)
                if adopted is not None:
                    self.nargs = None  # type: ignore[assignment]  # as triton.autotune leaves it
                    return adopted
            if key not in self.cache:
                pruned = self.prune_configs(kwargs)
                started = time.time()
                self._tune(key, pruned, args, kwargs, grid)
                self.bench_time = time.time() - started
                if self.loaded_from is None:
                    log.info(
                        "kiln: %s %s: tuned %d configs on this call in %.2f s; best %s",
                        self.base_fn.__name__,
                        key,
                        len(pruned),
                        self.bench_time,
                        config_label(self.cache[key]),
                    )
                full_nargs = {**self.nargs, **kwargs, **self.cache[key].all_kwargs()}
                self.pre_hook(full_nargs, reset_only=True)
            config = self.cache[key]
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        result = None if warmup else self._launch(config, args, kwargs, grid, key)
        self.nargs = None  # type: ignore[assignment]  # as triton.autotune leaves it
        return result

    def precompile(self, *args: Any, **kwargs: Any) -> list[Future[CompiledArtifact]]:
        """Start compiling every (pruned) config for calls like this one; return at once.

        The compiles run in the pool in the background. The first real call with the same
        argument types then waits only for what is still missing: its requests are the same,
        so the pool hands it the futures already in flight (or the cached artifacts).
        """
        from triton.runtime.jit import MockTensor

        args = tuple(MockTensor.wrap_dtype(a) for a in args)  # torch.float16 stands for a tensor
        with self._lock:
            self.nargs = dict(zip(self.arg_names, args, strict=False))
            try:
                configs = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
                candidates = [self._candidate(c, args, kwargs) for c in configs]
            finally:
                self.nargs = None  # type: ignore[assignment]  # as triton.autotune leaves it
            pool = self._get_pool()
            return [pool.submit(c.request, priority=guess_compile_cost(c.request)) for c in candidates]

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every (pruned) config for these arguments, in parallel, without running."""
        kwargs.pop("grid", None)
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        candidates = [self._candidate(c, args, kwargs) for c in self.prune_configs(kwargs)]
        pool = self._get_pool()
        futures = [pool.submit(c.request) for c in candidates]
        self.nargs = None  # type: ignore[assignment]  # as triton.autotune leaves it
        return [f.result() for f in futures]

    # -- tuning -------------------------------------------------------------------------------

    def _tune(
        self,
        key: tuple[Any, ...],
        configs: Sequence[Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        grid: Any,
    ) -> None:
        from kiln.tuning import TuningRun

        started = time.monotonic()
        candidates = [self._candidate(c, args, kwargs) for c in configs]
        identity = self._identity(candidates, key)
        database = self._get_database()
        lookup = {k: v for k, v in identity.items() if k != "kernel"}
        recorded = database.lookup(**lookup) if database is not None else None
        if recorded is not None and self._adopt(key, candidates, recorded):
            self.loaded_from = "database"
            self.last_run = recorded
            self.tuned[key] = recorded
            log.info(
                "kiln: %s %s: best config %s from the tuning database",
                self.base_fn.__name__,
                key,
                recorded.best_label,
            )
            return
        self.loaded_from = None
        run_id = database.begin_run(default_label=candidates[0].label, **identity) if database else None

        pool = self._get_pool()
        by_future: dict[Future[CompiledArtifact], _Candidate] = {}
        for candidate in candidates:
            candidate.future = pool.submit(candidate.request, priority=guess_compile_cost(candidate.request))
            by_future.setdefault(candidate.future, candidate)
        bencher = self._bencher(args, kwargs)
        results: dict[str, Any] = {}
        timings: dict[Any, list[float]] = {}
        # A user reference is known up front; otherwise the first config that runs cleanly is it.
        reference = bencher.user_reference()
        first_result_s: float | None = None
        # When kiln owns the timing, configs are screened with short runs while others still
        # compile (the CPU is busy, so timings are rough), then the best few are timed again
        # in full once every compile is done. With a user do_bench, one full pass, as Triton.
        two_phase = bencher.owns_timing
        first_pass = (
            Phase(*self._screen_ms, check=True) if two_phase else Phase(self._warmup_ms, self._rep_ms, True)
        )

        for future in as_completed(by_future):
            for candidate in [c for c in candidates if c.future is future]:
                result, outputs, times = self._evaluate(
                    candidate, future, bencher, grid, reference, first_pass
                )
                if result.status == "ok" and reference is None and outputs is not None:
                    reference = outputs
                results[candidate.label] = result
                timings[candidate.config] = times
                if first_result_s is None:
                    first_result_s = time.monotonic() - started
                if database is not None and run_id is not None:
                    database.record(run_id, result)
        if two_phase:
            self._final_round(candidates, results, timings, bencher, grid, database, run_id)
        bencher.finish()

        ok = {c.config: timings[c.config] for c in candidates if results[c.label].status == "ok"}
        if not ok:
            lines = [f"  {c.label}: {results[c.label].status}: {results[c.label].reason}" for c in candidates]
            raise AutotuneError(
                f"every config of {self.base_fn.__name__} failed for key {key}:\n" + "\n".join(lines)
            )
        best = builtins.min(ok, key=ok.__getitem__)
        self.cache[key] = best
        self.configs_timings = timings
        best_label = config_label(best)
        wall = time.monotonic() - started
        if database is not None and run_id is not None:
            database.finish_run(run_id, best_label, wall, first_result_s)
        self.last_run = TuningRun(
            kernel=identity["kernel"],
            kernel_key=identity["kernel_key"],
            key_repr=identity["key_repr"],
            device_name=identity["device_name"],
            capability=identity["capability"],
            triton_version=identity["triton_version"],
            results=tuple(results[c.label] for c in candidates),
            best_label=best_label,
            default_label=candidates[0].label,
            started_at=time.time() - wall,
            wall_s=wall,
            first_result_s=first_result_s,
        )
        self.tuned[key] = self.last_run

    def _final_round(
        self,
        candidates: list[_Candidate],
        results: dict[str, Any],
        timings: dict[Any, Any],
        bencher: _Bencher,
        grid: Any,
        database: Any,
        run_id: int | None,
    ) -> None:
        """Time the best screened configs again, in full, on a quiet machine."""
        ok = [c for c in candidates if results[c.label].status == "ok"]
        ok.sort(key=lambda c: results[c.label].runtime_ms)
        count = max(self._final_top_k[0], min(self._final_top_k[1], -(-len(ok) // 10)))
        finalists = ok[:count]
        full = Phase(self._warmup_ms, self._rep_ms, check=False)
        # Several passes in alternating order, so that clock and thermal drift during the round
        # hits every finalist alike; each config's timing is the median over the passes.
        passes: dict[str, list[list[float]]] = {c.label: [] for c in finalists}
        failed: dict[str, Any] = {}
        for round_ in range(self._final_passes):
            for candidate in finalists if round_ % 2 == 0 else finalists[::-1]:
                if candidate.label in failed:
                    continue
                assert candidate.future is not None
                result, _, times = self._evaluate(candidate, candidate.future, bencher, grid, None, full)
                if result.status != "ok":
                    failed[candidate.label] = result
                else:
                    passes[candidate.label].append([float(t) for t in times][:3])
        for candidate in finalists:
            previous = results[candidate.label]
            result = failed.get(candidate.label)
            if result is None:
                runs = passes[candidate.label]
                times = [statistics.median(run[i] for run in runs) for i in range(3)]
                result = replace(
                    previous, runtime_ms=times[0], runtime_ms_p20=times[1], runtime_ms_p80=times[2]
                )
                timings[candidate.config] = times
            else:
                timings[candidate.config] = [_INF, _INF, _INF]
            results[candidate.label] = result
            if database is not None and run_id is not None:
                database.record(run_id, result)

    def _evaluate(
        self,
        candidate: _Candidate,
        future: Future[CompiledArtifact],
        bencher: _Bencher,
        grid: Any,
        reference: dict[str, Any] | None,
        phase: Phase,
    ) -> tuple[Any, dict[str, Any] | None, list[float]]:
        """Benchmark and check one compiled (or failed) config; returns its record and timings."""
        failed = [_INF, _INF, _INF]
        exc = future.exception()
        if exc is not None:
            return _result(candidate, _compile_status(exc), _reason(exc), None), None, failed
        artifact = future.result()
        outcome = bencher.bench(candidate, artifact, self._grid(grid, candidate, candidate.config), phase)
        if outcome.status != "ok" or outcome.timings is None:
            return _result(candidate, outcome.status, outcome.reason, artifact.compile_s), None, failed
        times = [float(t) for t in outcome.timings][:3]
        times += [times[0]] * (3 - len(times))
        max_diff = None
        verdict = outcome.check  # the sandbox checks on the GPU and sends only a verdict
        if verdict is None and outcome.outputs is not None and reference is not None:
            comparison = compare(outcome.outputs, reference, self._tolerances)
            verdict = (comparison.ok, comparison.max_abs_diff, comparison.detail)
        if verdict is not None:
            ok, max_diff, detail = verdict
            if not ok:
                record = _result(candidate, "wrong_output", detail, artifact.compile_s, times, max_diff)
                return record, None, failed
        raw = outcome.raw if outcome.raw is not None else times  # what do_bench returned, as Triton keeps it
        return _result(candidate, "ok", None, artifact.compile_s, times, max_diff), outcome.outputs, raw

    def _adopt(self, key: tuple[Any, ...], candidates: list[_Candidate], recorded: Any) -> bool:
        by_label = {c.label: c for c in candidates}
        best = by_label.get(recorded.best_label)
        if best is None:
            return False
        self.cache[key] = best.config
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
                timings[candidate.config] = [_INF, _INF, _INF]
        self.configs_timings = timings
        return True

    # -- launching ----------------------------------------------------------------------------

    def _launch(
        self, config: Any, args: Sequence[Any], kwargs: dict[str, Any], grid: Any, key: tuple[Any, ...] | None
    ) -> Any:
        candidate = self._candidate(config, args, kwargs)
        hit = self._kernels.get(candidate.request.key)
        if hit is None:
            pool = self._get_pool()
            artifact = pool.compile(candidate.request)
            kernel = pool.load_kernel(candidate.request, artifact)
            launcher = KernelLauncher(artifact, LaunchSpec.from_request(candidate.request), triton=kernel)
            hit = (kernel, launcher)
            self._kernels[candidate.request.key] = hit
        kernel, launcher = hit
        bounds = self._grid(grid, candidate, config)
        full_args = tuple(candidate.bound.args.values())
        launcher.launch(bounds, full_args)
        self._register_fast(config, args, kwargs, candidate, kernel, launcher, key)
        if (key, candidate.request.key) not in self._variants:
            self._record_variant(key, config, candidate, launcher)
        return kernel

    # -- bundles ------------------------------------------------------------------------------

    @functools.cached_property
    def _bundle_identity(self) -> tuple[str, list[Any]]:
        """The kernel's hash (source, helpers, globals) and parameter records, computed once."""
        from kiln.bundle.format import ParamRecord
        from kiln.compile.kernel_spec import KernelSpec

        flags = self._flags_by_len[-1].decode()
        params = []
        for param, flag in zip(self.fn.params, flags, strict=True):
            default = param.default if param.has_default else None
            has_default = bool(param.has_default) and _json_able(default)
            params.append(ParamRecord(param.name, flag, has_default, default if has_default else None))
        kernel_hash = hashlib.sha256(str(KernelSpec.of(self.fn).identity).encode()).hexdigest()
        return kernel_hash, params

    def _kernel_record(self) -> Any:
        """A new, empty KernelRecord for this kernel (entries are the caller's to add)."""
        from kiln.bundle.format import KernelRecord

        kernel_hash, params = self._bundle_identity
        return KernelRecord(self.base_fn.__name__, kernel_hash, list(params))

    def _record_variant(
        self, key: tuple[Any, ...] | None, config: Any, candidate: _Candidate, launcher: KernelLauncher
    ) -> None:
        """Remember the variant for save_bundle, and record it in the cache for `kiln bundle save`."""
        from kiln.bundle.format import entry_for
        from kiln.bundle.index import write_record

        key_values = {k: candidate.bound.args[k] for k in self.keys if k in candidate.bound.args}
        run = self.tuned.get(key) if key is not None else None
        try:
            entry = entry_for(
                self.base_fn.__name__,
                launcher.artifact,
                launcher.spec,
                key_values,
                _config_json(config),
                run.to_json() if run is not None else None,
                self.loaded_from or ("tuned" if key is not None else "single config"),
            )
        except KilnError as exc:
            log.info("kiln: %s: this variant cannot go into a bundle: %s", self.base_fn.__name__, exc)
            return
        self._variants[(key, candidate.request.key)] = (entry, launcher.artifact)
        pool = self._get_pool()
        if pool.store is not None:  # beside the binaries, in the pool's cache
            try:
                write_record(pool.settings.cache_dir, self._kernel_record(), entry)
            except OSError as exc:
                name = self.base_fn.__name__
                log.warning("kiln: could not record %s for `kiln bundle save`: %s", name, exc)

    def bundle_record(self) -> tuple[Any, dict[str, CompiledArtifact]]:
        """This kernel's variants launched in this process, as a bundle's KernelRecord + binaries."""
        record = self._kernel_record()
        artifacts: dict[str, CompiledArtifact] = {}
        for entry, artifact in self._variants.values():
            record.entries.append(entry)
            artifacts[artifact.key] = artifact
        return record, artifacts

    def _from_bundle(
        self, key: tuple[Any, ...], args: Sequence[Any], kwargs: Mapping[str, Any], grid: Any
    ) -> Any:
        """Launch from a loaded bundle's variant for this call, if one matches; None otherwise."""
        from kiln.bundle.runtime import BundleMissError, registered_bundles

        bundles = registered_bundles()
        if not bundles or self._call_key is None or any(k not in ("grid", "warmup") for k in kwargs):
            return None
        record = self._kernel_record()
        for bundle in reversed(bundles):
            kernel = bundle.find(record.name, record.kernel_hash)
            if kernel is None:
                continue
            try:
                variant = kernel.variant_for(tuple(args))
            except BundleMissError:
                continue
            launcher = variant.ensure_launcher()
            config = _config_from_json(variant.entry.config)
            self.cache[key] = config
            self.best_config = config
            self.loaded_from = f"bundle {bundle.path}"
            log.info(
                "kiln: %s %s: best config %s from bundle %s",
                self.base_fn.__name__,
                key,
                config_label(config),
                bundle.path,
            )
            call_key = self._call_key(tuple(args), self._flags_by_len[len(args)])
            entry = LaunchEntry(
                launcher, variant.names, variant.tail, variant.meta_extra, config, launcher, self.loaded_from
            )
            self._fast.setdefault(len(args), {})[call_key] = entry
            return entry.launch(grid, tuple(args))
        return None

    def _register_fast(
        self,
        config: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        candidate: _Candidate,
        kernel: Any,
        launcher: KernelLauncher,
        key: tuple[Any, ...] | None,
    ) -> None:
        """Let later calls like this one skip everything but the launch (see fastpath.py)."""
        if self._call_key is None or config.pre_hook is not None:
            return
        if any(k not in ("grid", "warmup") for k in kwargs):
            return
        args = tuple(args)
        names = tuple(candidate.bound.args)
        if len(args) > len(names):
            return
        try:
            call_key = self._call_key(args, self._flags_by_len[len(args)])
            hash(call_key)
        except (TypeError, AttributeError, OverflowError, ValueError):
            return
        source = self.loaded_from or "tuned"
        tail = tuple(candidate.bound.args.values())[len(args) :]
        entry = LaunchEntry(launcher, names, tail, dict(config.all_kwargs()), config, kernel, source)
        self._fast.setdefault(len(args), {})[call_key] = entry

    def _grid(self, grid: Any, candidate: _Candidate, config: Any) -> tuple[int, ...]:
        if grid is None:
            raise ValueError(f"{self.base_fn.__name__}: launch it as kernel[grid](...)")
        if callable(grid):
            grid = grid({**candidate.bound.args, **config.all_kwargs()})
        dims = tuple(int(g) for g in grid)
        return dims + (1,) * (3 - len(dims))

    # -- helpers --------------------------------------------------------------------------------

    def _candidate(self, config: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> _Candidate:
        request, bound = request_for(self.fn, config, args, kwargs, self._local_target())
        return _Candidate(config, config_label(config), request, bound)

    def _local_target(self) -> Any:
        if self._target is None:
            target = triton_compat.local_target()
            if target is None:
                raise TargetError(
                    f"kiln.autotune needs a GPU to tune {self.base_fn.__name__} on, and none was found."
                )
            self._target = target
        return self._target

    def _identity(self, candidates: list[_Candidate], key: tuple[Any, ...]) -> dict[str, str]:
        device_name, capability = _device_identity(self._local_target())
        spec = candidates[0].request.spec
        configs = json.dumps([c.label for c in candidates])
        kernel_key = hashlib.sha256(f"{spec.identity}|{configs}".encode()).hexdigest()
        return {
            "kernel": self.base_fn.__name__,
            "kernel_key": kernel_key,
            "key_repr": json.dumps([repr(v) for v in key]),
            "device_name": device_name,
            "capability": capability,
            "triton_version": triton_compat.triton_version(),
        }

    def _get_pool(self) -> CompilePool:
        return self._pool if self._pool is not None else get_pool()

    def _get_database(self) -> Any:
        if self._database is False:
            return None
        if self._database is not None:
            return self._database
        current = settings_mod.current()
        # With the database off, Triton's semantics: remember across autotuners only when
        # cache_results asks, and not when a config has a pre_hook (Triton cannot save those).
        triton_would_cache = self.cache_results and not any(c.pre_hook for c in self.configs)
        if not current.use_tuning_db and not triton_would_cache:
            return None
        from kiln.tuning import TuningDatabase, default_database_path

        return _shared_database(default_database_path(current), TuningDatabase)

    def _bencher(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> _Bencher:
        if self._bencher_factory is not None:
            return self._bencher_factory(self, args, kwargs)
        needs_process = (
            self._user_do_bench
            or self.user_defined_pre_hook
            or self.user_defined_post_hook
            or any(c.pre_hook for c in self.configs)
        )
        if self._sandbox_wanted and not needs_process:
            return _SandboxBencher(self, args, kwargs)
        if self._sandbox_wanted:
            log.info(
                "kiln: %s benchmarks in-process: it has user hooks or a custom do_bench, which run in "
                "the caller's process",
                self.base_fn.__name__,
            )
        return _InProcessBencher(self, args, kwargs)


class _Bencher:
    tuner: Autotuner
    args: Sequence[Any]
    owns_timing = True  # kiln times the kernel itself (no user do_bench or hooks in the loop)

    def bench(
        self, candidate: _Candidate, artifact: CompiledArtifact, grid: tuple[int, ...], phase: Phase
    ) -> Any:
        raise NotImplementedError

    def user_reference(self) -> dict[str, Any] | None:
        """Outputs of the user's ``reference`` function, if one was given (else ``None``)."""
        if self.tuner._reference is None or not self.tuner._check_outputs:
            return None
        return _user_reference(self.tuner._reference, self.args, self.tuner.arg_names)

    def finish(self) -> None:
        return None


_SANDBOXES: dict[int, Any] = {}
_DATABASES: dict[Path, Any] = {}
_SHARED_LOCK = threading.Lock()


def _shared_database(path: Path, factory: Any) -> Any:
    with _SHARED_LOCK:
        database = _DATABASES.get(path)
        if database is None:
            database = factory(path)
            _DATABASES[path] = database
        return database


def _sandbox_for(device: int) -> Any:
    from kiln.sandbox import Sandbox

    with _SHARED_LOCK:
        sandbox = _SANDBOXES.get(device)
        if sandbox is None:
            sandbox = Sandbox(device, timeout_s=settings_mod.current().bench_timeout_s)
            _SANDBOXES[device] = sandbox
            import atexit

            atexit.register(sandbox.close)
        return sandbox


class _SandboxBencher(_Bencher):
    def __init__(self, tuner: Autotuner, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        import torch

        self.tuner = tuner
        self.sandbox = _sandbox_for(torch.cuda.current_device())
        self.sandbox.start()  # warms up (torch, CUDA context) while the configs compile
        self.inputs_set = False
        self.kwargs = kwargs
        self.args = args
        self.want_outputs = tuner._check_outputs

    def bench(
        self, candidate: _Candidate, artifact: CompiledArtifact, grid: tuple[int, ...], phase: Phase
    ) -> Any:
        from kiln.sandbox import BenchSpec

        if not self.inputs_set:
            tuner = self.tuner
            self.sandbox.set_inputs(dict(candidate.bound.args), tuner.reset_to_zero, tuner.restore_value)
            expected = self.user_reference()
            if expected is not None:
                self.sandbox.set_reference(expected, tuner._tolerances)
            self.inputs_set = True
        group = self.tuner._get_pool().triton_files(artifact)
        spec = BenchSpec(
            key=artifact.key,
            group=group,
            hash=str(artifact.metadata.get("hash", artifact.key)),
            arg_names=list(candidate.bound.args),
            signature=dict(candidate.request.signature),
            constexprs=dict(candidate.request.constexprs),
            grid=grid,
            warmup=phase.warmup_ms,
            rep=phase.rep_ms,
            want_outputs=self.want_outputs and phase.check,
        )
        return self.sandbox.bench(spec)


class _InProcessBencher(_Bencher):
    """Benchmarks in the caller's process, exactly as ``triton.autotune`` does (hooks included).

    Output checks need kiln to own every run of the kernel, so they are off when the kernel has
    user hooks or a custom ``do_bench`` (those see exactly the calls Triton would make).
    """

    def __init__(self, tuner: Autotuner, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        import torch

        self.tuner = tuner
        self.args = args
        self.kwargs = dict(kwargs)
        self.snapshot: dict[str, Any] | None = None
        self.user_code = (
            tuner._user_do_bench
            or tuner.user_defined_pre_hook
            or tuner.user_defined_post_hook
            or any(c.pre_hook for c in tuner.configs)
        )
        self.owns_timing = not self.user_code
        if tuner._check_outputs and not self.user_code:
            named = dict(zip(tuner.arg_names, args, strict=False))
            self.snapshot = {k: v.clone() for k, v in named.items() if isinstance(v, torch.Tensor)}

    def user_reference(self) -> dict[str, Any] | None:
        return None if self.snapshot is None else super().user_reference()

    def _restore(self) -> None:
        if self.snapshot is None:
            return
        named = dict(zip(self.tuner.arg_names, self.args, strict=False))
        for name, clone in self.snapshot.items():
            named[name].copy_(clone)

    def bench(
        self, candidate: _Candidate, artifact: CompiledArtifact, grid: tuple[int, ...], phase: Phase
    ) -> Any:
        import torch
        from triton.compiler.errors import CompileTimeAssertionFailure
        from triton.runtime.errors import OutOfResources, PTXASError

        from kiln.sandbox import BenchOutcome

        tuner = self.tuner
        config = candidate.config
        started = time.monotonic()
        kernel = tuner._get_pool().load_kernel(candidate.request, artifact)
        ordered = list(candidate.bound.args.values())
        full_nargs = {**tuner.nargs, **self.kwargs, **config.all_kwargs()}

        def kernel_call() -> None:
            if config.pre_hook:
                config.pre_hook(full_nargs)
            tuner.pre_hook(full_nargs)
            try:
                kernel[grid](*ordered)  # loads the binary on first use: OutOfResources shows here
            except Exception as exc:
                try:
                    tuner.post_hook(full_nargs, exception=exc)
                finally:
                    raise
            tuner.post_hook(full_nargs, exception=None)

        outputs = None
        try:
            if self.snapshot is not None and phase.check:
                self._restore()
                kernel_call()
                torch.cuda.synchronize()
                outputs = {k: v.clone() for k, v in full_nargs.items() if isinstance(v, torch.Tensor)}
                self._restore()
            if self.user_code:
                timings = tuner.do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
            else:
                import triton.testing

                timings = triton.testing.do_bench(
                    kernel_call, warmup=phase.warmup_ms, rep=phase.rep_ms, quantiles=(0.5, 0.2, 0.8)
                )
            torch.cuda.synchronize()
        except (OutOfResources, CompileTimeAssertionFailure, PTXASError) as exc:
            return BenchOutcome("out_of_resources", reason=str(exc), seconds=time.monotonic() - started)
        except Exception as exc:
            if self.user_code:
                raise  # as triton.autotune does: the user's benchmark or hook failed, not the config
            return BenchOutcome(
                "bench_error", reason=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - started
            )
        finally:
            self._restore()
        values = [float(timings)] * 3 if isinstance(timings, (int, float)) else [float(t) for t in timings]
        return BenchOutcome(
            "ok", timings=values, outputs=outputs, raw=timings, seconds=time.monotonic() - started
        )

    def finish(self) -> None:
        self._restore()


def _user_reference(
    reference: Callable[[dict[str, Any]], Any], args: Sequence[Any], names: list[str]
) -> dict[str, Any]:
    """Run the user's reference on clones of the arguments; its outputs are the tensors after."""
    import torch

    named = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in zip(names, args, strict=False)}
    reference(named)
    return {k: v.detach().cpu() for k, v in named.items() if isinstance(v, torch.Tensor)}


def _device_identity(target: Any) -> tuple[str, str]:
    """The current GPU's name and capability; without one (a bencher that needs none), the target."""
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(device)
            return torch.cuda.get_device_name(device), f"{major}.{minor}"
    except ImportError:
        pass
    return f"no GPU ({target.backend} target)", str(target.arch)


def _json_able(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _config_from_json(data: Mapping[str, Any]) -> Any:
    from triton import Config

    names = ("num_warps", "num_stages", "num_ctas", "maxnreg")
    options = {k: data[k] for k in names if data.get(k) is not None}
    return Config(dict(data.get("kwargs", {})), **options)


def _config_json(config: Any) -> dict[str, Any]:
    return {
        "kwargs": {
            k: (v if isinstance(v, (int, float, str, bool)) or v is None else repr(v))
            for k, v in config.kwargs.items()
        },
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas,
        "maxnreg": config.maxnreg,
    }


def _result(
    candidate: _Candidate,
    status: str,
    reason: str | None,
    compile_s: float | None,
    times: list[float] | None = None,
    max_diff: float | None = None,
) -> Any:
    from kiln.tuning import ConfigResult

    return ConfigResult(
        label=candidate.label,
        config=_config_json(candidate.config),
        status=status,
        reason=reason,
        compile_s=compile_s,
        runtime_ms=times[0] if times else None,
        runtime_ms_p20=times[1] if times else None,
        runtime_ms_p80=times[2] if times else None,
        max_abs_diff=max_diff,
        artifact_key=candidate.request.key,
    )


def autotune(
    configs: list[Any],
    key: list[str],
    prune_configs_by: dict[str, Any] | None = None,
    reset_to_zero: list[str] | None = None,
    restore_value: list[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: float | None = None,
    rep: float | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool = False,
    *,
    sandbox: bool | None = None,
    check_outputs: bool = True,
    reference: Callable[[dict[str, Any]], Any] | None = None,
    tolerances: tuple[float, float] | None = None,
    pool: CompilePool | None = None,
    database: Any = None,
    target: Any = None,
    precompile: Sequence[Sequence[Any]] | None = None,
) -> Callable[[Any], Autotuner]:
    """``triton.autotune`` with parallel compiles, a crash-proof GPU sandbox and a tuning database.

    Same arguments and attributes as ``triton.autotune``; kiln's own (keyword-only):

    * ``sandbox``: benchmark in a separate GPU process (default ``KILN_SANDBOX``, on);
    * ``check_outputs``: compare each config's outputs with the reference (default on);
    * ``reference``: ``f(args: dict) -> None`` writing the expected outputs into (clones of)
      the arguments; default: the first config that ran cleanly;
    * ``tolerances``: ``(rtol, atol)`` for the output check (default: by dtype);
    * ``pool``: the :class:`~kiln.CompilePool` to compile in (default: :func:`kiln.get_pool`);
    * ``database``: a ``kiln.tuning.TuningDatabase``, or ``False`` for none (default: the one
      at ``KILN_TUNING_DB``);
    * ``target``: the ``GPUTarget`` to compile for (default: the local GPU's);
    * ``precompile``: example argument tuples (dtypes stand for tensors, e.g.
      ``[(torch.float16, torch.float16, 4096)]``) whose configs start compiling in the pool at
      definition time, in the background; the first real call with matching arguments waits
      only for what is still compiling. Without it, the kernel tunes on its first call with
      real inputs, or loads a result from a loaded bundle or the tuning database (logged at INFO).
    """

    def decorator(fn: Any) -> Autotuner:
        tuner = Autotuner(
            fn,
            fn.arg_names,
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
            sandbox=sandbox,
            check_outputs=check_outputs,
            reference=reference,
            tolerances=tolerances,
            pool=pool,
            database=database,
            target=target,
        )
        for example in precompile or ():
            tuner.precompile(*example)
        return tuner

    return decorator

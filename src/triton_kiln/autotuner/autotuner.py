"""``triton_kiln.autotune``: ``triton.autotune``'s contract, with parallel compiles and a GPU sandbox.

:class:`Autotuner` takes ``triton.autotune``'s arguments and fills the same attributes
(``cache``, ``best_config``, ``configs_timings``, ``bench_time``, ``nargs``); this module holds
the contract and hands the work to one module each::

    kernel[grid](*args)  -> kiln's C dispatcher (launch_tables.py, triton_kiln.launch.dispatch): a
                            call like an earlier one launches its variant without entering Python
        miss -> run(*args, grid=grid)
                  a loaded bundle has this call? adopt it                     (launch_tables.py)
                  key not in cache: prune (Triton's code), then tune          (session.py:
                      compile all in the pool, bench each (bench.py), database)
                  launch the best config's binary, register the variant       (launch_tables.py)

``kernel[grid](...)`` returns Triton's ``CompiledKernel`` of the launched config on every path
(:mod:`.launch_tables`). Settings are resolved once, when the autotuner is made, and passed down
in the run's plan and services (:mod:`.plan`), which every part below takes instead of this
object. User
callables that must run in the caller's process (a custom ``do_bench``, ``pre_hook`` /
``post_hook``, a config's ``pre_hook``) switch it to in-process benchmarking, as does
``sandbox=False``. A library's subclass whose ``run`` drives its own search and times configs with
``self._bench`` (FlagGems' ``LibTuner``) is served by :meth:`_bench` (:mod:`.library_search`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar

from triton_kiln import settings as settings_mod
from triton_kiln import triton_compat
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner import log_lines
from triton_kiln.autotuner.call_conventions import CallShape, unwrap
from triton_kiln.autotuner.compile_requests import (
    Candidate,
    RequestCache,
    call_meta,
    candidate_for,
    tuning_key,
)
from triton_kiln.autotuner.gpu import require_gpu
from triton_kiln.autotuner.launch_tables import TuningCache, Variants
from triton_kiln.autotuner.library_search import LibrarySearch, place_subclass
from triton_kiln.autotuner.plan import BencherFactory, Checks, LocalDevice, Services, Timing, TuningPlan
from triton_kiln.autotuner.prewarm import prepare
from triton_kiln.autotuner.session import TuningSession
from triton_kiln.bundle.format import KernelRecord
from triton_kiln.compile.request import guess_compile_cost
from triton_kiln.errors import TargetError
from triton_kiln.pool import CompilePool, get_pool
from triton_kiln.tuning.configs import config_label
from triton_kiln.tuning.results import ConfigResult

log = logging.getLogger("kiln.autotune")

_TritonAutotuner: Any = triton_compat.triton_autotuner_class()

TRITON_ONLY_METHODS = ("_bench", "check_disk_cache", "_run", "_full_path", "_lookup", "_candidate")
"""Methods of Triton's ``Autotuner`` that kiln's own search never calls (``check_disk_cache``;
``_bench``, which kiln serves to a library's own search and a subclass replacing it times its own
way) or kiln's own internals: a subclass that overrides one is put back on Triton's class, since
kiln would silently skip (or clash with) what it changes."""


class Autotuner(_TritonAutotuner):  # type: ignore[misc]
    """Drop-in for ``triton.runtime.autotuner.Autotuner`` (see the module docstring)."""

    _own_run: ClassVar[bool] = False
    """Its ``run`` is a library's own (:func:`.library_search.role`: not kiln's, nor calling
    ``super().run``): ``kernel[grid]`` must reach that ``run``, so it takes Triton's proxy,
    never kiln's C dispatcher (whose misses run kiln's own tuning)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A library's own autotuner class derived from kiln's (:func:`triton_kiln.install` routes
        Triton's ``Autotuner`` name here): kept on kiln unless it overrides what kiln relies on,
        or its ``run`` reaches nothing of kiln's; the log says which part of kiln it uses
        (:func:`.library_search.place_subclass`)."""
        super().__init_subclass__(**kwargs)
        place_subclass(cls, Autotuner, _TritonAutotuner, TRITON_ONLY_METHODS, _ending_the_search)

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
    ) -> None:
        # Resolved once, here; every part below takes the plan and services built from them.
        self._settings = settings_mod.current()
        self._pool = pool
        self._database = database
        self._target: Any = target
        self._bencher_factory: BencherFactory | None = None  # tests put a stand-in for the GPU here
        self._device: LocalDevice | None = None  # and the GPU's identity here (gpu.py)
        self._requests = RequestCache()  # the full path builds a request once per kind of call
        self._services = Services(
            kernel=self,
            pool=self._get_pool,
            shared_pool=lambda: self._pool is None,
            database=self._get_database,
            target=self._local_target,
            device=lambda: self._device,
            stand_in=lambda: self._bencher_factory,
            candidate=self._candidate,
        )
        # Built before Triton's __init__, which assigns ``self.cache`` (emptying these tables).
        jit_fn, layers = unwrap(fn)
        self._shape = CallShape(jit_fn, layers, configs)
        self._variants = Variants(
            self._services,
            self._settings,
            self._shape,
            key,
            self._full_path,
            self._shape.normalizer(self._lookup),
        )
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
        # Triton's deprecated warmup/rep make its do_bench triton.testing.do_bench(warmup, rep):
        # in-process for kiln's own tuning (its screening would not honour them); a library's
        # own search (_bench) times with exactly these lengths in the sandbox. The screening and
        # the final round keep Timing's lengths (docs/TIMING.md).
        timing = Timing(
            warmup_ms=25.0 if warmup is None else float(warmup),
            rep_ms=100.0 if rep is None else float(rep),
            lengths_given=warmup is not None or rep is not None,
        )
        self._plan = TuningPlan(
            name=self.base_fn.__name__,
            jit_fn=jit_fn,
            arg_names=tuple(self.arg_names),
            keys=tuple(self.keys),
            timing=timing,
            checks=Checks(check_outputs, reference, tolerances),
            sandbox=bool(self._settings.sandbox if sandbox is None else sandbox),
            user_hooks=bool(
                do_bench is not None
                or use_cuda_graph
                or self.user_defined_pre_hook
                or self.user_defined_post_hook
            ),
            user_timing=bool(do_bench is not None or use_cuda_graph),
            own_device=target is None,  # tunes on this machine's GPU: prewarm.py starts its parts
            settings=self._settings,
        )
        self._lock = threading.RLock()
        self.last_run: Any = None  # the triton_kiln.tuning.TuningRun of the latest tuning
        self.loaded_from: str | None = None  # "database" when the last tuning was skipped
        self.tuned: dict[tuple[Any, ...], Any] = {}  # tuning key -> TuningRun (tuned or from the db)
        self._told: set[tuple[Any, ...]] = set()  # keys whose source was logged (log_lines.py)
        self.nargs: Any = None  # dict of the call in progress; None between calls, as in Triton
        # a library's own search through _bench (library_search.py): the one in progress, its depth, results
        self._search: LibrarySearch | None = None
        self._search_depth = 0
        self.searched: dict[tuple[Any, ...], dict[str, ConfigResult]] = {}
        if self._plan.own_device:  # (prewarm.py) a tuning's first miss starts the rest
            prepare(database, shared_pool=pool is None)

    # The cache (tuning key -> config) empties the launch tables whenever it changes.
    @property
    def cache(self) -> Any:
        return self._cache

    @cache.setter
    def cache(self, value: Any) -> None:
        # A subclass may assign its own store (anything with `in`, `[]`, `[]=`, `get`, `pop`):
        # kept as it is, behind a view that empties the launch tables when it changes.
        self._cache = TuningCache.over(self._variants.clear, value)
        self._variants.clear()

    def __getitem__(self, grid: Any) -> Any:
        if self._own_run:  # the library's run, through Triton's proxy
            return super().__getitem__(grid)
        bound = self._variants.tables.bind(grid)  # a _kiln_launch.BoundCall: the whole fast path in C
        return bound if bound is not None else super().__getitem__(grid)  # no C helper: Triton's proxy

    def _full_path(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What ``kernel[grid](*args, **kwargs)`` does when the C dispatcher has no entry for it."""
        with self._lock:
            return self._run(*args, grid=grid, warmup=False, **kwargs)

    def _lookup(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The config a call would launch, for the dispatcher's normal form (TypeError: none yet)."""
        if len(self.configs) <= 1:
            return self.configs[0]
        config = self.cache.get(tuning_key(self.arg_names, self.keys, args, kwargs))
        if config is None:
            raise TypeError("not tuned for this key yet")
        return config

    # -- the contract -------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Triton's ``run``: a launch (``grid=``, not ``warmup``) goes through the C dispatcher
        like ``kernel[grid](...)`` (callers such as ``@triton.heuristics`` over the autotuner
        come here); the rest, and every miss, take the full path."""
        grid = kwargs.get("grid")
        if grid is not None and not kwargs.get("warmup", False):
            bound = self._variants.tables.bind(grid)
            if bound is not None:
                return bound(*args, **call_meta(kwargs))
        with self._lock:
            return self._run(*args, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        # grid and warmup stay in kwargs: Triton passes them to pruning, perf models and hooks.
        grid = kwargs.get("grid")
        warmup = bool(kwargs.get("warmup", False))
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        key: tuple[Any, ...] | None = None
        tuned_now = False
        if len(self.configs) > 1:
            key = tuning_key(self.arg_names, self.keys, args, kwargs)
            if key not in self.cache and not warmup:
                adopted = self._variants.from_bundle(key, args, kwargs, grid)
                if adopted is not None:
                    self._told.add(key)  # from_bundle said where it came from
                    self.nargs = None  # as triton.autotune leaves it
                    return adopted
            if key in self.cache and key not in self._told:
                log_lines.from_memory(self.base_fn.__name__, key, config_label(self.cache[key]))
                self._told.add(key)
            if key not in self.cache:
                triton_compat.seed_caller_triton_key(self._settings.triton_key_dir)
                pruned = self.prune_configs(kwargs)
                started = time.time()
                TuningSession(self._plan, self._services).tune(key, pruned, args, kwargs, grid)
                self.bench_time = time.time() - started
                self._told.add(key)
                if self.loaded_from is None:  # else the session said "from the tuning database"
                    tuned_now = True
                    best = config_label(self.cache[key])
                    log_lines.tuned(self.base_fn.__name__, key, len(pruned), self.bench_time, best)
                full_nargs = {**self.nargs, **kwargs, **self.cache[key].all_kwargs()}
                self.pre_hook(full_nargs, reset_only=True)
            config = self.cache[key]
        else:
            config = self.configs[0]
            if not warmup and not self._plan.own_device:  # NoGPUError, not the driver's, for target=
                require_gpu(self.base_fn.__name__, self._target, launch=True)
        self.best_config = config
        if tuned_now and triton_compat.print_autotuning():  # as triton.autotune prints it
            print(log_lines.triton_done_lines(self.base_fn.__name__, key, self.bench_time, config))
        forms = None
        if config.pre_hook is not None:
            forms = None if warmup else self._variants.forms(args, kwargs)  # before the hook
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        result = None if warmup else self._variants.launch(config, args, kwargs, grid, key, forms)
        self.nargs = None  # as triton.autotune leaves it
        return result

    def _bench(self, *args: Any, config: Any, **kwargs: Any) -> list[float]:
        """Triton's ``Autotuner._bench``, for a subclass whose ``run`` drives its own search:
        ``[median, p20, p80]`` in ms for ``config`` on this call, or ``[inf, inf, inf]`` when the
        config cannot run (a compile error, out of resources, a crashed or timed-out compile, a
        crash or error in the benchmark), the reason logged; it does not raise for those.

        On its first call for a call's arguments, every config the search may ask for (pruned by
        ``prune_configs``) is submitted to kiln's pool at once: parallel compiles, each in a
        crash-isolated worker. Each call waits for its config's binary and times it in kiln's
        GPU sandbox (or in-process where user hooks or a custom ``do_bench`` must run in the
        caller, as kiln's own tuning does). Outputs are not checked: the check decides across
        all of a search's configs, and here the library, not kiln, picks the winner from the
        timings. The search is recorded in :attr:`searched` (each config's status), not in the
        tuning database or report: the library keeps its own. The winner's launch is the
        library's (``self.fn.run``, Triton's JIT): each config that ran is written to Triton's
        on-disk cache under the key ``triton.compile`` gives it, so the JIT loads the winner
        rather than compiling it again when its key is the same.
        kiln's own ``run`` never calls this.
        """
        with self._lock:
            restore = self.nargs
            if self.nargs is None:
                self.nargs = dict(zip(self.arg_names, args, strict=False))
            try:
                search = self._search
                if search is None or not search.matches(args, kwargs):
                    self._end_search()
                    search = LibrarySearch(self._plan, self._services, args, kwargs)
                    self._search = search
                    self.searched[search.key] = search.results
                return search.bench(config, kwargs)
            finally:
                self.nargs = restore

    def _end_search(self) -> None:
        """End the library's search in progress (its bencher finishes, its arguments are let go)."""
        search, self._search = self._search, None
        if search is not None:
            search.end()

    def precompile(self, *args: Any, **kwargs: Any) -> list[Future[CompiledArtifact]]:
        """Start compiling every (pruned) config for calls like this one; return at once.

        The compiles run in the pool in the background. The first real call with the same
        argument types then waits only for what is still missing: its requests are the same,
        so the pool hands it the futures already in flight (or the cached artifacts).
        """
        args = triton_compat.wrap_dtypes(args)  # torch.float16 stands for a tensor
        with self._lock:
            self.nargs = dict(zip(self.arg_names, args, strict=False))
            try:
                configs = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
                candidates = [self._candidate(c, args, kwargs) for c in configs]
            finally:
                self.nargs = None  # as triton.autotune leaves it
            pool = self._get_pool()
            return [pool.submit(c.request, priority=guess_compile_cost(c.request)) for c in candidates]

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every (pruned) config for these arguments, in parallel, without running."""
        kwargs.pop("grid", None)
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        candidates = [self._candidate(c, args, kwargs) for c in self.prune_configs(kwargs)]
        pool = self._get_pool()
        futures = [pool.submit(c.request) for c in candidates]
        self.nargs = None  # as triton.autotune leaves it
        return [f.result() for f in futures]

    def bundle_record(self) -> tuple[KernelRecord, dict[str, CompiledArtifact]]:
        """This kernel's variants launched in this process, as a bundle's KernelRecord + binaries."""
        return self._variants.bundle_record()

    # -- the services it gives the parts below (plan.py's Services) ----------------------------

    def _candidate(self, config: Any, args: Sequence[Any], kwargs: Any) -> Candidate:
        if config.pre_hook is not None and triton_compat.has_host_descriptor([*args, *kwargs.values()]):
            # the hook may set a descriptor's block shape, which is part of the specialization
            args, kwargs = triton_compat.after_config_hook(config, self.arg_names, args, kwargs)
        kwargs = self._shape.with_heuristics(self.arg_names, args, kwargs, config)
        return candidate_for(
            self._shape.jit_fn,
            config,
            args,
            kwargs,
            self._local_target(),
            self._requests,
            self._settings.triton_key_dir,
        )

    def _local_target(self) -> Any:
        if self._target is None:
            target = triton_compat.local_target()
            if target is None:
                raise TargetError(
                    f"kiln.autotune needs a GPU to tune {self.base_fn.__name__} on, and none was found."
                )
            self._target = target
        return self._target

    def _get_pool(self) -> CompilePool:
        return self._pool if self._pool is not None else get_pool()

    def _get_database(self) -> Any:
        if self._database is False:
            return None
        if self._database is not None:
            return self._database
        # With the database off, Triton's semantics: remember across autotuners only when
        # cache_results asks, and not when a config has a pre_hook (Triton cannot save those).
        triton_would_cache = self.cache_results and not any(c.pre_hook for c in self.configs)
        if not self._settings.use_tuning_db and not triton_would_cache:
            return None
        from triton_kiln.tuning import default_database_path

        remote = self._settings if self._settings.remote_cache is not None else None
        return _shared_database(default_database_path(self._settings), remote)


def _ending_the_search(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` of a class that drives its own search, ending kiln's search state when the
    outermost call returns (the arguments and the bencher are released)."""

    @functools.wraps(run)
    def run_then_end_search(self: Autotuner, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._search_depth += 1
            try:
                return run(self, *args, **kwargs)
            finally:
                self._search_depth -= 1
                if self._search_depth == 0:
                    self._end_search()

    run_then_end_search.__kiln_run__ = run  # type: ignore[attr-defined]  # role() reads the library's code
    return run_then_end_search


_DATABASES: dict[tuple[Path, str | None], Any] = {}
_DATABASES_LOCK = threading.Lock()


def _shared_database(path: Path, remote: settings_mod.Settings | None = None) -> Any:
    """The process's :class:`~triton_kiln.tuning.TuningDatabase` at ``path`` (one per file), with
    ``remote``'s remote cache behind it (:mod:`triton_kiln.remote`) when one is given."""
    from triton_kiln.tuning import TuningDatabase

    url = remote.remote_cache if remote is not None else None
    with _DATABASES_LOCK:
        database = _DATABASES.get((path, url))
        if database is None:
            local = _DATABASES.get((path, None)) or TuningDatabase(path)
            _DATABASES[(path, None)] = local
            if remote is not None and url is not None:
                from triton_kiln.remote import remote_tuning

                database = remote_tuning(local, remote)
            else:
                database = local
            _DATABASES[(path, url)] = database
        return database

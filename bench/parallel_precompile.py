"""Stock ``triton.autotune`` with each tuning's configs compiled in parallel before its benchmarks.

The ``triton_parallel`` arm of ``bench/realworld.py`` and ``bench/autotune.py``: the strongest
baseline a Triton user has without kiln. Triton's autotuner runs as shipped and times every config
with its own ``Autotuner._bench``; the one change is the approach of Triton's PR #11847
(``TRITON_AUTOTUNING_COMPILE_WORKERS``): when a tuning key is tuned for the first time, every
config left after pruning is first compiled in a process pool, so that Triton's in-process compile
at each config's first benchmark is a hit in ``TRITON_CACHE_DIR``. Nothing of kiln is imported.

::

    the arm's process                                       pool worker (spawn, one per usable core)
      Autotuner.run -> prune_configs (wrapped here)
        per pruned config: its pre_hook, then
        fn.run(..., warmup=True) with the JITFunction's
        compile replaced by a capture: the ASTSource's
        signature, constexprs, attrs, the target and the
        options are kept; nothing is compiled
        CompileJob per distinct compile  --- pickled --->     import the kernel's module, find its
                                                              JITFunction, triton.compile(ASTSource(
                                                              ...), target, options): the binary
                                                              lands in TRITON_CACHE_DIR
        waits for every job  <--- JobResult (ok or text) ---
      prune_configs returns; Triton's own benchmark loop
        runs, each compile a cache hit

The pool starts at the first tuning (inside the timed first call, as a user's pool would) and
stays up for later keys. A config whose capture or compile fails, or whose kernel cannot be found
by module and name in a worker, is left to Triton's own compile in ``_bench``: the arm then pays
that compile serially, as stock Triton does. Failures are counted in :meth:`Precompiler.stats`,
never raised.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import multiprocessing
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# Modules a worker refuses to import: the arm is stock Triton, and an import of kiln there is an
# error that shows, not a silent change of what is measured.
REFUSED = ("triton_kiln",)


@dataclass(frozen=True)
class CompileJob:
    """One compile, as Triton's JIT would make it: enough for a worker to rebuild the ASTSource."""

    module: str  # the kernel function's module
    qualname: str  # the kernel function's qualified name in it
    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], Any]
    target: Any  # triton.backends.compiler.GPUTarget
    options: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"

    def identity(self) -> str:
        """Equal for two jobs that compile to one cache entry (configs differing only in hooks)."""
        return repr((self.name, self.signature, self.constexprs, self.attrs, self.target, self.options))


@dataclass(frozen=True)
class JobResult:
    """What a worker answers: ``error`` is None when the binary is in the cache."""

    name: str
    seconds: float
    error: str | None = None


@dataclass
class Tuning:
    """One key's first tuning: its configs, the compiles sent to the pool and how they ended."""

    kernel: str
    configs: int
    jobs: int = 0
    already_compiled: int = 0  # the JIT held the binary already: nothing to send
    failed: list[str] = field(default_factory=list)
    wall_s: float = 0.0  # capture, pool start (the first time) and every compile, waited for


class _Captured(Exception):  # a signal out of JITFunction.run, caught in capture()
    def __init__(self, src: Any, target: Any, options: dict[str, Any]) -> None:
        super().__init__("compile captured")
        self.src, self.target, self.options = src, target, options


def jit_function(kernel: Any) -> Any:
    """The ``JITFunction`` under an autotuner, heuristics or other wrapper (each has ``fn``)."""
    from triton.runtime.jit import JITFunction

    fn = kernel
    while not isinstance(fn, JITFunction):
        fn = fn.fn
    return fn


def capture(kernel: Any, call: Callable[[], Any]) -> CompileJob | None:
    """Run ``call`` (a ``run(..., warmup=True)`` of ``kernel``) with the compile replaced by a
    capture: the job it would have compiled, or None when the JIT had the binary already.

    ``JITFunction.run`` compiles through the instance's ``compile``, which it binds with the
    device's binder; the binder is made first, so the replacement stands for this one call."""
    from triton.runtime.driver import driver

    fn = jit_function(kernel)
    fn.device_caches[driver.active.get_current_device()]  # makes the binder: it sets fn.compile
    bound = fn.compile

    def captured(src: Any, target: Any = None, options: dict[str, Any] | None = None, **_: Any) -> Any:
        raise _Captured(src, target, dict(options or {}))

    fn.compile = captured
    try:
        call()
    except _Captured as got:
        src = got.src
        return CompileJob(
            module=src.fn.module,
            qualname=src.fn.fn.__qualname__,
            signature=dict(src.signature),
            constexprs=dict(src.constants),
            attrs=dict(src.attrs),
            target=got.target,
            options=got.options,
        )
    finally:
        fn.compile = bound
    return None


def find_kernel(module: str, qualname: str) -> Any:
    """The ``JITFunction`` of ``module.qualname``, imported here (a worker's view of the kernel)."""
    if "<locals>" in qualname:
        raise LookupError(f"{module}.{qualname} is defined inside a function: a worker cannot import it")
    # a script's kernels live in the worker as __mp_main__ (multiprocessing's name for the script)
    loaded = sys.modules.get("__mp_main__") if module == "__main__" else importlib.import_module(module)
    if loaded is None:
        raise LookupError(f"{module} is not importable in a worker")
    obj: Any = loaded
    for part in qualname.split("."):
        obj = getattr(obj, part)
    fn = jit_function(obj)
    if fn.fn.__qualname__ != qualname:
        raise LookupError(f"{module}.{qualname} names another kernel ({fn.fn.__qualname__}) in a worker")
    return fn


def compile_job(job: CompileJob) -> JobResult:
    """In a worker: Triton's own compile of one job into ``TRITON_CACHE_DIR``."""
    import triton
    from triton.compiler import ASTSource

    started = time.perf_counter()
    try:
        fn = find_kernel(job.module, job.qualname)
        src = ASTSource(fn, job.signature, job.constexprs, job.attrs)
        triton.compile(src, target=job.target, options=job.options)
    except Exception as exc:  # the config is left to Triton's compile in _bench
        return JobResult(job.name, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:500])
    return JobResult(job.name, time.perf_counter() - started)


def refuse(modules: tuple[str, ...]) -> None:
    """From now on an import of each of ``modules`` in this process raises ``ImportError``."""
    for name in modules:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ImportError


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


class Precompiler:
    """The pool and its record: :meth:`compile` sends jobs and waits; :meth:`tune` is what the
    wrapped ``prune_configs`` calls for one tuning."""

    def __init__(self, workers: int | None = None, refuse: tuple[str, ...] = REFUSED) -> None:
        self.workers = workers or usable_cores()
        self.refuse = refuse
        self.tunings: list[Tuning] = []
        self.pool_start_s: float | None = None
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            started = time.perf_counter()
            # spawn: the arm's process holds a CUDA context and threads, which a fork must not copy
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=refuse,
                initargs=(self.refuse,),
            )
            self.pool_start_s = time.perf_counter() - started
        return self._pool

    def compile(self, jobs: Iterable[CompileJob]) -> list[JobResult]:
        """Every job compiled in the pool, waited for; a job that cannot be sent fails alone."""
        results: list[JobResult] = []
        futures = []
        for job in jobs:
            try:
                pickle.dumps(job)
            except Exception as exc:
                results.append(JobResult(job.name, 0.0, f"not picklable: {type(exc).__name__}: {exc}"))
                continue
            futures.append((job, self._executor().submit(compile_job, job)))
        for job, future in futures:
            try:
                results.append(future.result())
            except Exception as exc:  # a worker died: this job's compile is left to Triton
                results.append(JobResult(job.name, 0.0, f"{type(exc).__name__}: {exc}"[:500]))
        return results

    def tune(self, tuner: Any, configs: list[Any], kwargs: dict[str, Any]) -> None:
        """Compile ``configs`` of ``tuner`` for this call's arguments, as ``_bench`` will call it."""
        started = time.perf_counter()
        record = Tuning(f"{tuner.base_fn.__module__}.{tuner.base_fn.__qualname__}", len(configs))
        args = tuple((tuner.nargs or {}).values())  # run() keeps the positional arguments there
        jobs: dict[str, CompileJob] = {}
        for config in configs:
            if kwargs.keys() & config.kwargs.keys():
                continue  # _bench raises on the conflict, as it does without this arm
            current = {**kwargs, **config.all_kwargs(), "warmup": True}
            try:
                if config.pre_hook:  # it may set what the signature holds (a descriptor's block)
                    config.pre_hook({**tuner.nargs, **current})
                job = capture(tuner.fn, lambda current=current: tuner.fn.run(*args, **current))
            except Exception as exc:
                record.failed.append(f"capture: {type(exc).__name__}: {exc}"[:300])
                continue
            if job is None:
                record.already_compiled += 1
            else:
                jobs.setdefault(job.identity(), job)
        record.jobs = len(jobs)
        record.failed += [f"{r.name}: {r.error}" for r in self.compile(jobs.values()) if r.error]
        record.wall_s = time.perf_counter() - started
        self.tunings.append(record)

    def stats(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "pool_start_s": self.pool_start_s,
            "tunings": len(self.tunings),
            "configs": sum(t.configs for t in self.tunings),
            "jobs": sum(t.jobs for t in self.tunings),
            "already_compiled": sum(t.already_compiled for t in self.tunings),
            "failed": sum(len(t.failed) for t in self.tunings),
            "wall_s": sum(t.wall_s for t in self.tunings),
            "failures": [f for t in self.tunings for f in t.failed][:20],
        }

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


@contextmanager
def installed(workers: int | None = None) -> Iterator[Precompiler]:
    """Triton's ``Autotuner.prune_configs`` wrapped so each tuning compiles its configs in the
    pool first; put back, and the pool shut down, on leaving.

    ``prune_configs`` is where a key's first tuning starts in ``Autotuner.run`` and in the runs of
    libraries' subclasses that tune through it (FLA's ``CachedAutotuner`` calls ``super().run``,
    FlagGems' ``LibTuner`` prunes then benches config by config): the configs it returns are the
    ones about to be benchmarked, with the call's arguments in ``self.nargs``."""
    from triton.runtime.autotuner import Autotuner

    plan = Precompiler(workers)
    original = Autotuner.prune_configs

    def prune_configs(self: Any, kwargs: dict[str, Any]) -> list[Any]:
        configs = original(self, kwargs)
        if len(configs) > 1:
            plan.tune(self, list(configs), kwargs)
        return configs

    Autotuner.prune_configs = prune_configs  # type: ignore[method-assign]
    try:
        yield plan
    finally:
        Autotuner.prune_configs = original  # type: ignore[method-assign]
        plan.shutdown()

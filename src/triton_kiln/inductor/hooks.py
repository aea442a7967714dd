"""``triton_kiln.inductor.install()`` / ``uninstall()`` / ``KILN_INDUCTOR=1``: Inductor's Triton
compiles through kiln's pool.

It replaces seven attributes of Inductor's (:mod:`triton_kiln.triton_compat.inductor` names them), and
``uninstall()`` puts the very same objects back:

* ``AsyncCompile.process_pool``: returns an :class:`~triton_kiln.inductor.process_pool.InductorPool`, whose
  warm-up answer is ready at once (so Inductor never compiles in this process while a pool
  warms up) and which serves ``_worker_compile_triton`` jobs with kiln's pool; other jobs go to
  Inductor's own pool, made on first need. Its first call (Inductor's ``warm_pool()``, where
  stock Inductor starts its own compile processes) starts kiln's Inductor sidecar
  (:mod:`~triton_kiln.inductor.sidecar`), which then does each job's in-process work;
* ``CachingAutotuner._precompile_worker``: every config of a kernel compiled in kiln's pool at
  once before Inductor's own loop, a config whose compile died dropped
  (:meth:`~triton_kiln.inductor.config_compiler.ConfigCompiler.compile_all`);
* ``CachingAutotuner._precompile_config``: the one config compiled in kiln's pool first, then
  Inductor's own code, which finds Triton's cache filled (coordinate descent, runtime autotune,
  the C++-wrapper's lazy compile, template benchmarks all come here);
* ``CachingAutotuner._coordinate_descent_tuning`` (the tuning, which Inductor's public
  ``coordinate_descent_tuning`` calls only for a kernel it tunes): the neighbours of the starting
  config (its first ring, every tunable field) compile in kiln's pool at once, then Inductor's
  own tuning runs and finds each compile done (so no compile runs beside its timings);
* ``AlgorithmSelectorCache.make_precompile_fn`` and ``AsyncCompile.use_process_pool``: while
  max-autotune hands its template choices to their precompile, the pool is refused, so each
  choice is compiled (in kiln's pool) and loaded by its own ``precompile()`` in Inductor's
  threads, as stock Inductor does before its pool has warmed up: a choice that cannot load
  fails there, as under stock, instead of reaching the benchmarks;
* ``GraphLowering.__init__``, which only starts compile processes: Inductor lowers a graph only
  when its caches missed, and Triton compiles follow, so the sidecar's kiln pool starts then
  (and this process's own kiln pool too, for the jobs that come before the sidecar is ready, or
  all of them with ``KILN_INDUCTOR_SIDECAR=0``), in the background, while Inductor lowers and
  generates code. A process whose graphs all come from Inductor's caches (a warm process)
  starts no process of kiln's (no sidecar, no pool, no benchmark sandbox of
  ``sandbox_benchmarks``: each starts when a graph is lowered), unless it loads
  a kernel coordinate descent will tune: kiln's pool starts then, in the background, for the
  neighbours that tuning compiles on the kernel's first launch
  (:meth:`~triton_kiln.inductor.config_compiler.ConfigCompiler.submit`). Any compile that reaches kiln starts
  kiln's pool too.

And, unless ``KILN_INDUCTOR_QUIET_BENCHMARKS=0``, each GPU timing method of Inductor's
benchmarker classes (``benchmark_gpu``; :func:`triton_kiln.triton_compat.inductor.benchmark_points`):
kiln's compile processes are held still while it runs (:mod:`~triton_kiln.pool.pause`), since the time
of a short kernel includes the host's launch, which kiln's compiles beside it slow (max-autotune
would then pick ATen convolutions stock Inductor does not, and the compiled model would run slower).
Each is counted on the progress line (:mod:`~triton_kiln.inductor.progress`), so while that is
shown they are wrapped with ``KILN_INDUCTOR_QUIET_BENCHMARKS=0`` too (to count, not hold).

With ``sandbox_benchmarks=True`` (or ``KILN_INDUCTOR_SANDBOX=1``) two more, in one sandbox process:

* ``AlgorithmSelectorCache.make_benchmark_fn``: max-autotune's GPU template choices are timed in a
  kiln sandbox process (:mod:`~triton_kiln.inductor.benchmarks`), so an illegal memory access or a hang
  costs one choice (time ``inf``), never the parent's CUDA context;
* ``CachingAutotuner.benchmark_all_configs``: a kernel's runtime autotune (its configs timed at its
  first call, with its inputs) in that process (:mod:`~triton_kiln.inductor.runtime_autotune`).

With ``KILN_REMOTE_CACHE``, ``PersistentCache.lookup``: template timings shared through the remote
cache (:mod:`~triton_kiln.inductor.shared_timings`).

Kernels and modules Inductor made before ``install()`` keep working; their later compiles go
through kiln too (the methods are the class's). Both are logged at INFO on ``kiln.inductor``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triton_kiln import triton_compat
from triton_kiln.errors import KilnError
from triton_kiln.inductor.config_compiler import ConfigCompiler
from triton_kiln.inductor.errors import InductorUnsupportedError
from triton_kiln.inductor.process_pool import InductorPool, in_compile_job
from triton_kiln.inductor.progress import InductorProgress
from triton_kiln.inductor.sidecar import Sidecar
from triton_kiln.pool import CompilePool
from triton_kiln.pool.pause import PAUSE
from triton_kiln.triton_compat import inductor as compat

if TYPE_CHECKING:  # the sandbox's modules load only with sandbox_benchmarks, the remote's with one
    from triton_kiln.inductor.benchmarks import SandboxBenchmarks
    from triton_kiln.inductor.runtime_autotune import RuntimeAutotune
    from triton_kiln.inductor.shared_best_configs import SharedBestConfigs
    from triton_kiln.inductor.shared_timings import SharedTimings

log = logging.getLogger("kiln.inductor")


class InductorUnavailableError(KilnError, ImportError):
    """torch (with Inductor) cannot be imported, so there is nothing to route."""


def _patch_points(sandboxed: bool) -> list[compat.PatchPoint]:
    """The attributes :func:`install` replaces, each checked present on this torch (with the
    sandbox's, which is returned apart by :func:`_sandbox_on`, when ``sandboxed``)."""
    try:
        points = [
            compat.process_pool_point(),
            compat.precompile_worker_point(),
            compat.precompile_config_point(),
            compat.coordinate_descent_point(),
            compat.graph_lowering_point(),
            compat.use_process_pool_point(),
            compat.make_precompile_fn_point(),
        ]
        sandbox_points = [compat.make_benchmark_fn_point(), compat.benchmark_all_configs_point()]
        checked = [*points, *sandbox_points] if sandboxed else points
    except ImportError as exc:  # a module or class moved
        raise InductorUnsupportedError(compat.torch_version(), [f"{exc.name or exc}"]) from exc
    _require(checked)
    return points


def _require(points: list[compat.PatchPoint], outcome: str = "nothing is routed") -> None:
    """Raise :class:`InductorUnsupportedError` (saying ``outcome``) naming every point this
    torch's Inductor lacks."""
    missing = [point.qualname for point in points if not point.present]
    if missing:
        raise InductorUnsupportedError(compat.torch_version(), missing, outcome)


@dataclass
class _Installed:
    saved: list[tuple[compat.PatchPoint, Any]]
    pool: InductorPool
    compiler: ConfigCompiler
    progress: InductorProgress
    shared: SharedTimings | None
    best_configs: SharedBestConfigs | None
    benchmarks: _Benchmarks | None = None


@dataclass
class _Benchmarks:
    """The sandbox's patch points, what each held, and the template benchmarker and runtime
    autotune that share its process."""

    saved: list[tuple[compat.PatchPoint, Any]]
    benchmarks: SandboxBenchmarks
    runtime: RuntimeAutotune


_lock = threading.Lock()
_state: _Installed | None = None


def install(*, sandbox_benchmarks: bool | None = None, sidecar: bool | None = None) -> None:
    """Route every Triton compile torch Inductor starts through kiln's compile pool (idempotent).

    ``sandbox_benchmarks``: time max-autotune's GPU template choices in a kiln sandbox process
    (``None``: the ``KILN_INDUCTOR_SANDBOX`` setting); calling again with another value turns the
    sandbox on or off. ``sidecar``: do each compile job's in-process work in kiln's Inductor
    sidecar process (:mod:`~triton_kiln.inductor.sidecar`) rather than in this process's threads
    (``None``: the ``KILN_INDUCTOR_SIDECAR`` setting, on by default); fixed at the first
    ``install()`` until ``uninstall()``. Raises :class:`~triton_kiln.errors.SettingsError` naming a
    malformed ``KILN_*`` variable, :class:`InductorUnavailableError` without torch, and
    :class:`InductorUnsupportedError` when this torch's Inductor lacks an attribute kiln
    replaces; nothing is routed then.
    """
    global _state
    from triton_kiln import settings

    current = settings.current()
    sandboxed = current.inductor_sandbox if sandbox_benchmarks is None else bool(sandbox_benchmarks)
    if not compat.inductor_available():
        raise InductorUnavailableError(
            "kiln.inductor.install() needs torch with Inductor (torch._inductor could not be "
            "imported); install torch, or leave KILN_INDUCTOR unset."
        )
    with _lock:
        if _state is None:
            points = _patch_points(sandboxed)  # first: an unsupported torch changes nothing
            compat.set_worker_paths()
            kiln_pool = _kiln_pool()  # not started: the first compile that reaches it starts it
            # Triton's key, asked for where a binary loads or a cache slot is computed: kiln's
            # stored key, not a 0.3-0.8 s hash of libtriton.so (read at the first ask)
            triton_compat.seed_caller_triton_key(kiln_pool.settings.triton_key_dir)
            compiler = ConfigCompiler(kiln_pool)
            progress = InductorProgress(current.progress)
            hold = current.inductor_quiet_benchmarks
            timings = compat.benchmark_points() if hold or progress.shown else []
            saved = [(point, point.current()) for point in [*points, *timings]]
            original_pool = saved[0][1].__func__  # the lru_cache'd function inside the staticmethod
            # each thread waits on its kernel's compiles and does the parent's share between them
            threads = max(8, 2 * current.workers)
            use_sidecar = current.inductor_sidecar if sidecar is None else bool(sidecar)
            helper = _sidecar(threads, current.zygote_start_timeout_s) if use_sidecar else None
            pool = InductorPool(original_pool, threads=threads, sidecar=helper, progress=progress)
            points[0].set(staticmethod(_process_pool(pool)))
            points[1].set(_precompile_worker(saved[1][1], compiler, progress))
            points[2].set(_precompile_config(saved[2][1], compiler))
            points[3].set(_coordinate_descent_tuning(saved[3][1], compiler))
            points[4].set(
                _starting_on_lowering(saved[4][1], functools.partial(_on_lowering, helper, kiln_pool))
            )
            points[5].set(_use_process_pool_unless_choosing(saved[5][1]))
            points[6].set(_choosing_templates(saved[6][1]))
            for point, original in saved[len(points) :]:
                point.set(_timing(original, hold, progress))
            shared_saved, shared, best_configs = _share_through_remote(current)
            saved.extend(shared_saved)
            compat.reset_ready_future()
            _state = _Installed(saved, pool, compiler, progress, shared, best_configs)
            log.info(
                "kiln: Inductor's Triton compiles (torch %s) now run in kiln's compile pool",
                compat.torch_version(),
            )
        if sandboxed and _state.benchmarks is None:
            _state.benchmarks = _sandbox_on(current.bench_timeout_s, _state.compiler, _state.progress)
        elif not sandboxed and _state.benchmarks is not None:
            _sandbox_off(_state.benchmarks)
            _state.benchmarks = None


def _share_through_remote(
    current: Any,
) -> tuple[list[tuple[compat.PatchPoint, Any]], SharedTimings | None, SharedBestConfigs | None]:
    """With ``KILN_REMOTE_CACHE``: template timings and autotunes' best configs shared through it
    (the points replaced and what they held, and each sharer where it is installed)."""
    if current.remote_cache is None:
        return [], None, None
    from triton_kiln.inductor import shared_best_configs, shared_timings

    saved: list[tuple[compat.PatchPoint, Any]] = []
    timings = shared_timings.install(current)
    if timings is not None:
        saved.append(timings[:2])
    best = shared_best_configs.install(current)
    if best is not None:
        saved.extend(best[0])
    return saved, timings[2] if timings else None, best[1] if best else None


def _sandbox_on(timeout_s: float, compiler: ConfigCompiler, progress: InductorProgress) -> _Benchmarks:
    from triton_kiln.inductor.benchmarks import SandboxBenchmarks, make_sandbox
    from triton_kiln.inductor.runtime_autotune import RuntimeAutotune

    templates, runtime_autotune = compat.make_benchmark_fn_point(), compat.benchmark_all_configs_point()
    stay = "template benchmarks and runtime autotunes stay in this process (the compiles are routed)"
    _require([templates, runtime_autotune], stay)  # (the first install() checked: this is a later one)
    sandbox = make_sandbox(timeout_s)  # one process, both kinds of timing (its calls take turns)
    benchmarks = SandboxBenchmarks(sandbox, compiler.key_parts_for, progress.timed_one)
    runtime = RuntimeAutotune(sandbox, progress.timed_one)
    saved = [(templates, templates.current()), (runtime_autotune, runtime_autotune.current())]
    templates.set(benchmarks.make_benchmark_fn(saved[0][1]))
    runtime_autotune.set(runtime.benchmark_all_configs(saved[1][1]))
    log.info(
        "kiln: Inductor's template benchmarks and runtime autotunes now run in a kiln sandbox "
        "process (%g s each at most)",
        timeout_s,
    )
    return _Benchmarks(saved, benchmarks, runtime)


def _sandbox_off(record: _Benchmarks) -> None:
    for point, value in reversed(record.saved):
        point.set(value)
    record.benchmarks.close()
    log.info("kiln: Inductor's template benchmarks and runtime autotunes run where Inductor runs them again")


def uninstall() -> None:
    """Give Inductor its pool and methods back (the same objects ``install()`` replaced)."""
    global _state
    with _lock:
        state, _state = _state, None
        if state is None:
            return
        if state.benchmarks is not None:
            _sandbox_off(state.benchmarks)
        for point, value in reversed(state.saved):
            point.set(value)
        compat.reset_ready_future()
    state.progress.close()
    state.pool.shutdown(wait=False)
    log.info("kiln: uninstalled: Inductor compiles in its own pool again")


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _state is not None


def install_from_environment() -> None:
    """``KILN_INDUCTOR=1`` at ``import triton_kiln``: install, and never raise (the reason is
    logged on ``kiln.inductor`` at WARNING, and nothing is routed)."""
    from triton_kiln import notices, settings
    from triton_kiln.errors import SettingsError

    try:
        wanted = settings.parse_variable("inductor")
        if wanted:
            install()
    except (SettingsError, InductorUnavailableError, InductorUnsupportedError) as exc:
        notices.warn(log, f"kiln: {exc} Inductor's compiles are not routed through kiln.")


def current_pool() -> InductorPool | None:
    """The pool Inductor is given while installed (for tests and benchmarks)."""
    state = _state
    return state.pool if state is not None else None


def current_benchmarks() -> SandboxBenchmarks | None:
    """The sandbox benchmarker while installed with ``sandbox_benchmarks`` (for tests and benchmarks)."""
    state = _state
    return state.benchmarks.benchmarks if state is not None and state.benchmarks is not None else None


def current_shared_timings() -> SharedTimings | None:
    """Template timings shared through the remote cache while installed with one (for tests)."""
    return _state.shared if _state is not None else None


def current_shared_best_configs() -> SharedBestConfigs | None:
    """Best configs shared through the remote cache while installed with one (for tests)."""
    return _state.best_configs if _state is not None else None


def current_runtime_autotune() -> RuntimeAutotune | None:
    """The sandboxed runtime autotune while installed with ``sandbox_benchmarks`` (for tests)."""
    state = _state
    return state.benchmarks.runtime if state is not None and state.benchmarks is not None else None


def _kiln_pool() -> CompilePool:
    """kiln's process-wide pool, not started: :func:`_on_lowering` starts it when Inductor lowers
    its first graph and the sidecar is not ready (its zygote and workers then get ready while
    Inductor lowers and generates code, so the first compile finds them: no warm-up window in
    this process); any compile that reaches it starts it too."""
    from triton_kiln.pool import get_pool

    return get_pool()


def _sidecar(threads: int, start_timeout_s: float) -> Sidecar:
    """kiln's Inductor sidecar, not started: the first graph Inductor lowers starts it."""
    return Sidecar(threads, start_timeout_s)


# --- the replacements ---


def _process_pool(pool: InductorPool) -> Any:
    def process_pool() -> InductorPool:
        # Starts nothing: Inductor asks for its pool in a warm process too (its graphs from
        # Inductor's caches, nothing to compile); the first graph lowered starts the sidecar.
        return pool

    # Inductor calls AsyncCompile.process_pool.cache_clear() after a fork and at shutdown.
    process_pool.cache_clear = lambda: None  # type: ignore[attr-defined]
    return process_pool


def _precompile_worker(original: Any, compiler: ConfigCompiler, progress: InductorProgress) -> Any:
    @functools.wraps(original)
    def _precompile_worker(self: Any) -> Any:
        # Counted here on the serial path only: a job's kernel is counted by its future
        # (InductorPool), and a kernel whose configs are compiled (a job's result) compiles nothing.
        serial = not in_compile_job() and compat.kernel_configs(self) is not None
        with progress.compiling() if serial else contextlib.nullcontext():
            settled = compiler.compile_all(self)
            PAUSE.wait_running()  # Inductor's loading (under the GIL) waits while it times a kernel
            with compiler.loading(settled):  # Inductor's loop: those configs only load
                return original(self)

    return _precompile_worker


_choosing = threading.local()  # ``active`` while this thread hands template choices to their precompile


def _choosing_templates(original: Any) -> Any:
    """``AlgorithmSelectorCache.make_precompile_fn`` with the process pool refused while it hands
    the choices out (:func:`_use_process_pool_unless_choosing`)."""

    @functools.wraps(original)
    def make_precompile_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        _choosing.active = True
        try:
            return original(self, *args, **kwargs)
        finally:
            _choosing.active = False

    return make_precompile_fn


def _use_process_pool_unless_choosing(original: Any) -> Any:
    """``AsyncCompile.use_process_pool`` that answers no to max-autotune's template choices.

    Through the pool a choice is only compiled; through its own ``precompile()`` (in a thread of
    Inductor's, its compile still in kiln's pool: ``_precompile_worker``) it is also loaded, so one
    that cannot run here (more shared memory than the GPU has) fails there, is counted as
    Inductor's precompilation failure and is never benchmarked. Stock Inductor takes that path
    until its pool has warmed up, which for a model's first autotunes it has not; kiln's pool is
    ready at once, so without this kiln would hand Inductor a different choice set from
    stock's (tests/test_inductor_choices_gpu.py)."""
    use_process_pool = original.__func__

    def use_process_pool_unless_choosing(cls: Any) -> bool:
        if getattr(_choosing, "active", False):
            return False
        return bool(use_process_pool(cls))

    return classmethod(use_process_pool_unless_choosing)


def _timing(original: Any, hold: bool, progress: InductorProgress) -> Any:
    """One of Inductor's GPU timing methods, counted on the progress line, and with ``hold`` run
    with kiln's compile processes held still (:mod:`triton_kiln.pool.pause`): what it times
    includes the host's launches, which kiln's compiles running beside it would slow."""

    @functools.wraps(original)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        with progress.timing(), PAUSE.hold() if hold else contextlib.nullcontext():
            return original(self, *args, **kwargs)

    return timed


def _on_lowering(sidecar: Sidecar | None, kiln_pool: CompilePool) -> None:
    """A graph is being lowered: the sidecar's kiln pool starts; this process's own starts too
    unless the sidecar is ready to take every job; with ``sandbox_benchmarks``, the benchmark
    sandbox (torch's import and its CUDA context, while Inductor lowers: template choices are
    timed during lowering)."""
    from triton_kiln.sandbox.registry import gpu_present

    installed = _state
    if installed is not None and installed.benchmarks is not None and gpu_present():
        installed.benchmarks.benchmarks.start()  # idempotent
    if sidecar is not None:
        sidecar.start()
        sidecar.want_pool()
        if sidecar.phase == "ready":
            return
    kiln_pool.start()  # idempotent; the zygote starts on the pool's manager thread


def _starting_on_lowering(original: Any, start: Callable[[], object]) -> Any:
    """``GraphLowering.__init__`` that first calls ``start`` (:func:`_on_lowering`)."""

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            start()  # idempotent, in the background: a process spawned on kiln's own thread
        except Exception as exc:  # what cannot start fails (or falls back) with the reason, later
            log.debug("kiln: the compile processes did not start on lowering: %s", exc)
        original(self, *args, **kwargs)

    return __init__


def _coordinate_descent_tuning(original: Any, compiler: ConfigCompiler) -> Any:
    """``CachingAutotuner._coordinate_descent_tuning`` that first starts the neighbours
    compiling, once per kernel. Not the public ``coordinate_descent_tuning``: Inductor calls that
    on every launch of a kernel whose config coordinate descent has not marked as its own (a
    template kernel: it returns at once), so a wrapper there would sit on the compiled model's
    call path and cost every call; this method runs only for a kernel being tuned."""
    looked_at: weakref.WeakSet[Any] = weakref.WeakSet()

    @functools.wraps(original)
    def _coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        if self not in looked_at:
            looked_at.add(self)
            compiler.compile_neighbours_ahead(self, launcher)
        return original(self, launcher, *args, **kwargs)

    return _coordinate_descent_tuning


def _precompile_config(original: Any, compiler: ConfigCompiler) -> Any:
    @functools.wraps(original)
    def _precompile_config(self: Any, cfg: Any) -> Any:
        if compiler.is_settled(cfg):  # compile_all put it in Triton's cache a moment ago
            return original(self, cfg)
        job = compiler.submit(self, cfg)
        if job is not None:
            compiler.finish(self, job)
        return original(self, cfg)

    return _precompile_config

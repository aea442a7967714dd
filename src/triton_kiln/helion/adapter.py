"""kiln in Helion's autotuner: its benchmark provider, and the two ways to put it in place.

Every Helion name it uses, private or public, comes from :mod:`triton_kiln.helion.compat`, which
checks Helion's version (1.5.0, 1.5.1) and those names at import and raises
:class:`~triton_kiln.helion.errors.UnsupportedHelionError` on anything else. What it plugs in::

    helion autotune (caller thread)                      kiln pool (zygote + workers)
      BaseSearch._prepare -> KilnBenchmarkProvider(...)
        sandbox.start() (warms up in the background)
        _compute_reference_baseline:
          reference config -> codegen -> extract launch ─ CompileRequest ─► worker compiles
          crash/timeout: next smaller config (Helion's     ◄── artifact / typed failure ──
          own back-off), or BaselineCompileError
          -> Helion's own baseline run: Triton cache hit (kiln placed the binary there)
      benchmark(configs):                                  (a BenchmarkStream for the batch)
        codegen per config (Helion)
        _create_precompile_future(config, fn):
          host code with a capturing launcher -> (JITFunction, args)
          -> launch_compile -> pool.submit ─────────────────────────► worker compiles
          -> PrecompileFuture(process=KilnCompileProcess)   compile done ─► stream: binary to
        PrecompileFuture.wait_for_all (Helion's, unchanged)   Triton's cache, Helion's timing and
          exitcode -> _finish: artifact -> Triton's cache     accuracy jobs to the sandbox now
          (TRITON_CACHE_DIR = Helion's per-autotune dir);     (:mod:`.stream`)
          Helion's result file with kiln's typed failure
          and Helion's classification (skip, or raise)
        benchmark loop (Helion's): _benchmark_function -> _benchmark_function_subprocess
          -> self._benchmark_worker.run(job)  = KilnBenchmarkWorker (:mod:`.sandbox_worker`):
             the streamed outcome, or the job run now in kiln's call sandbox; a crash, a sticky
             CUDA error or a hang is Helion's worker error for that config: inf, skipped
      final selection / rebenchmark (Helion's): benchmark_isolated -> the same worker

Two ways in: :func:`autotuner_fn` (Helion's ``autotuner_fn`` setting, one kernel) sets the
provider class on the searches Helion's default autotuner function builds; :func:`install`
makes it the default provider class of every search of the process (``BaseSearch``'s
``benchmark_provider_cls`` default), :func:`uninstall` restores Helion's. Both start kiln's pool
and its benchmark sandbox in the background.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NoReturn

from triton_kiln.errors import (
    CompileTimeoutError,
    JobFailure,
    KilnError,
    RemoteCompileError,
    WorkerCrashedError,
    WorkerMemoryError,
    ZygoteDiedError,
)
from triton_kiln.helion import compat, finalists
from triton_kiln.helion import config as kiln_config
from triton_kiln.helion.compat import PrecompileFuture
from triton_kiln.helion.errors import BaselineCompileError
from triton_kiln.helion.finalists import FinalRoundRecord
from triton_kiln.helion.process import KilnCompileProcess
from triton_kiln.helion.requests import LaunchCompile, launch_compile, place_in_triton_cache
from triton_kiln.helion.sandbox_worker import KilnBenchmarkWorker
from triton_kiln.helion.stream import BenchmarkStream, Verify

# Helion's own clock on a kiln-backed future only guards against a lost job: kiln enforces
# ``autotune_compile_timeout`` per compile from the moment a worker takes it.
_HELION_SIDE_TIMEOUT_S = 7 * 24 * 3600.0


def classify(error: BaseException) -> str:
    """Helion's verdict on a failed precompile: ``"raise"``, ``"warn"`` or ``"debug"``.

    The job's own exception (a ``CompilationError``, ``PTXASError``, ``OutOfResources``...) goes
    to Helion's ``classify_triton_exception``, exactly as in Helion's fork mode. kiln's failures
    of one job (crash, timeout, memory limit, lost zygote) are config-specific: the config is
    skipped. A broken pool (zygote cannot start, pool closed) fails every config: raise.
    """
    if isinstance(error, WorkerCrashedError | ZygoteDiedError):
        return "warn"
    if isinstance(error, CompileTimeoutError | WorkerMemoryError):
        return "debug"
    if isinstance(error, RemoteCompileError):
        return str(compat.classify_triton_exception(error))
    if isinstance(error, KilnError):
        return "raise"
    return str(compat.classify_triton_exception(error))


def _result_message(error: BaseException | None, decorator: str) -> dict[str, object]:
    """Helion's precompile result record (what its fork/spawn children write) for a kiln outcome."""
    if error is None:
        return {"status": "ok"}
    stderr = "\n".join(error.stderr_tail) if isinstance(error, JobFailure) else ""
    return {
        "status": "error",
        "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
        "decorator": decorator,
        "exc_type": type(error).__name__,
        "exc_module": type(error).__module__,
        "exc_args": (str(error),),
        "classification": classify(error),
        "captured_output": stderr or None,
    }


def extract_launch(fn: Callable[..., Any], args: Sequence[object]) -> LaunchCompile:
    """Run Helion's generated host code with a launcher that captures the Triton launch."""

    def capture(
        kernel: object, grid: tuple[int, ...], *launch_args: object, **launch_kwargs: object
    ) -> NoReturn:
        raise compat.ExtractedLaunchArgs(kernel, grid, launch_args, launch_kwargs)

    try:
        fn(*args, _launcher=capture)
    except compat.ExtractedLaunchArgs as captured:
        call_args, call_kwargs = compat.compile_only_launch_args(*captured.args, **captured.kwargs)
        target = kiln_config.current().target
        if target is None:
            from triton_kiln.triton_compat import local_target

            target = local_target()
            if target is None:
                raise KilnError(
                    "triton_kiln.helion: no GPU found to compile Helion's configs for; call "
                    "triton_kiln.helion.configure(target=GPUTarget('cuda', 90, 32)) to compile for one."
                ) from None
        return launch_compile(captured.kernel, call_args, call_kwargs, target)
    raise RuntimeError("Helion's generated code returned without launching a Triton kernel")


class KilnBenchmarkProvider(compat.LocalProvider):
    """Helion's local benchmark provider with every Triton compile sent to kiln's pool first and,
    with ``KILN_HELION_SANDBOX=1``, every benchmark job run in kiln's sandbox (streamed as the
    compiles land unless ``KILN_HELION_STREAM=0``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from triton_kiln import settings

        current = settings.current()
        self._placing = threading.Lock()
        self._helion_worker: Any = None
        self.sandbox_worker: KilnBenchmarkWorker | None = None
        if current.helion_sandbox:
            screen_ms = current.helion_screen_ms if current.helion_stream else None
            self.sandbox_worker = KilnBenchmarkWorker(kiln_config.sandbox(), screen_ms)
            self.sandbox_worker.sandbox.start()  # it warms up while Helion computes its baseline
        self._stream_batches = current.helion_stream
        self._verify_ahead = current.helion_verify_ahead
        self._verify: Verify | None = None  # made at the first batch (Helion's settings are set by then)
        self._stream: BenchmarkStream | None = None
        self.final_rounds: list[FinalRoundRecord] = []  # kiln's final rounds (KILN_HELION_FINAL_ROUND)
        self.compile_failures: collections.Counter[str] = collections.Counter()  # by error type
        super().__init__(*args, **kwargs)

    def benchmark_worker(self) -> Any:
        """kiln's sandbox worker (``KILN_HELION_SANDBOX=1``), or Helion's own."""
        return self._helion_worker if self.sandbox_worker is None else self.sandbox_worker

    def set_benchmark_worker(self, worker: Any) -> None:
        if self.sandbox_worker is None:
            self._helion_worker = worker
        # else Helion drops the worker it shut down (None): kiln's stays, and starts a fresh
        # sandbox process for the next job

    def benchmark(self, configs: list[Any], **kwargs: Any) -> Any:
        """Helion's ``benchmark``, with each config benchmarked in kiln's sandbox as its compile lands."""
        worker = self.sandbox_worker
        if worker is not None:
            worker.forget(kept=True)  # the last batch's re-benchmarks run ahead, if Helion left any
        if worker is not None and self._stream_batches and compat.subprocess_benchmark_enabled(self):
            check = (
                functools.partial(compat.run_accuracy_job, self) if compat.accuracy_check_on(self) else None
            )
            self._stream = BenchmarkStream(
                worker, functools.partial(compat.run_benchmark_job, self), check, self._verifying()
            )
        stream = self._stream
        try:
            results = super().benchmark(configs, **kwargs)
        except BaseException:
            if stream is not None:
                stream.stop(wait=False)
            raise
        finally:
            self._stream = None
        if stream is not None:
            stream.stop()
        return results

    def _verifying(self) -> Verify | None:
        """What the stream needs to run this search's re-benchmarks ahead (``None``: the setting
        is off, or the search re-benchmarks nothing: a threshold of 1 or less)."""
        if self._verify is None and self._verify_ahead:
            threshold = compat.rebenchmark_threshold(self)
            if threshold > 1.0:
                self._verify = Verify(functools.partial(compat.run_rebenchmark_job, self), threshold)
        return self._verify

    def precompile_future(self, config: Any, fn: Any) -> Any:
        ctx = self.precompile_context()
        if not self.settings.autotune_precompile:
            return PrecompileFuture.skip(ctx, config, True)
        args = self.args
        if len(self.mutated_arg_indices) > 0:
            args = compat.clone_args(
                self.args, self.kernel.env.process_group_name, idx_to_clone=self.mutated_arg_indices
            )
        decorator = self.kernel.format_kernel_decorator(config, self.settings)
        try:
            launch = extract_launch(fn, args)
        except Exception as error:  # what Helion's fork mode does with a failed extraction
            error.__traceback__ = None
            if compat.match_unrecoverable_runtime_error(error):
                raise
            compat.maybe_dump_triton_failure(self.kernel, config, error)
            self.log.warning(f"Helion autotuner precompile error for {decorator}: {error}")
            verdict = compat.classify_triton_exception(error)
            if verdict == "raise" and not self.settings.autotune_ignore_errors:
                raise
            return PrecompileFuture.skip(ctx, config, False)
        future = kiln_config.pool().submit(
            launch.request, timeout_s=float(self.settings.autotune_compile_timeout)
        )
        stream = self._stream
        if stream is not None:
            future.add_done_callback(
                lambda done: stream.landed(fn, functools.partial(self._place, done, launch))
            )
        holder: list[Any] = []
        process = KilnCompileProcess(
            future, lambda done: self._finish(done, launch, decorator, holder[0]), launch.request.label()
        )
        precompile = PrecompileFuture(
            ctx=ctx,
            config=config,
            process=process,
            timeout=_HELION_SIDE_TIMEOUT_S,
            result_path=self.next_result_path(),
        )
        holder.append(precompile)
        return precompile

    def _finish(self, future: Future[Any], launch: LaunchCompile, decorator: str, precompile: Any) -> int:
        """The exit code Helion reads for this config; writes its result file first."""
        error: BaseException | None
        error = future.exception() if not future.cancelled() else KilnError("the compile was cancelled")
        if error is None:
            try:
                with self._placing:
                    place_in_triton_cache(launch, future.result())
            except OSError as exc:
                error = exc
        if error is not None:
            self.compile_failures[type(error).__name__] += 1
        if isinstance(error, JobFailure) and not self.settings.autotune_ignore_errors:
            self.log.warning(f"kiln: {error}")
        if isinstance(error, CompileTimeoutError):
            precompile.failure_reason = "timeout"
        compat.write_result_file(precompile.result_path, _result_message(error, decorator))
        if error is None:
            return 0
        if isinstance(error, JobFailure) and error.returncode is not None and error.returncode != 0:
            return error.returncode
        return 1

    def _place(self, future: Future[Any], launch: LaunchCompile) -> bool:
        """The compiled binary in Triton's cache, for a benchmark ahead of Helion's result read;
        ``False`` when the compile failed."""
        if future.cancelled() or future.exception() is not None:
            return False
        with self._placing:
            place_in_triton_cache(launch, future.result())
        return True

    def reference_baseline(self) -> tuple[object, Sequence[object]]:
        """Compile the reference config in kiln first, then let Helion run it (a cache hit).

        A compile failure in kiln backs off to smaller block sizes as Helion's own baseline
        does for config-specific failures; when none compiles, :class:`BaselineCompileError`.
        """
        reference = self.config_spec.autotune_reference_config()
        chosen = self._precompile_reference(reference)
        if chosen is reference:
            return self.helion_reference_baseline()
        spec = self.config_spec
        spec.autotune_reference_config = lambda: chosen
        try:
            return self.helion_reference_baseline()
        finally:
            del spec.autotune_reference_config

    def _precompile_reference(self, config: Any) -> Any:
        tried: list[str] = []
        error: BaseException | None = None
        for _attempt in range(compat.MAX_REFERENCE_BASELINE_ATTEMPTS):
            try:
                with compat.searching_candidates():
                    fn = self.kernel.compile_config(config, allow_print=False)
                launch = extract_launch(fn, compat.clone_args(self.args, self.kernel.env.process_group_name))
            except Exception:
                return config  # codegen failed: Helion's own baseline reports it as it always does
            future = kiln_config.pool().submit(
                launch.request, timeout_s=float(self.settings.autotune_compile_timeout)
            )
            error = future.exception()
            if error is None:
                place_in_triton_cache(launch, future.result())
                return config
            tried.append(self.kernel.format_kernel_decorator(config, self.settings))
            if classify(error) == "raise":
                if isinstance(error, KilnError):
                    raise BaselineCompileError(self.kernel.kernel.name, tuple(tried), str(error)) from error
                return config  # a Python compile error: Helion's baseline raises it as it always does
            self.log.warning(f"kiln: the autotuning reference config failed to compile: {error}")
            smaller = self.config_spec.shrink_block_sizes_once(config)
            if smaller is None:
                break
            config = smaller
        raise BaselineCompileError(self.kernel.kernel.name, tuple(tried), str(error))


def use_kiln(search: Any) -> Any:
    """Make ``search`` (a Helion autotuner, possibly inside its cache wrapper) compile through kiln
    (and, with ``KILN_HELION_FINAL_ROUND``, verify its finalists with kiln's final round)."""
    from triton_kiln import settings

    inner = compat.wrapped_search(search)
    if inner is not None:
        use_kiln(inner)
        compat.wrap_search_factory(search, use_kiln)
    if isinstance(search, compat.BaseSearch):
        provider = compat.provider_class(search)
        if provider is not compat.LocalBenchmarkProvider and not issubclass(provider, KilnBenchmarkProvider):
            raise KilnError(
                f"triton_kiln.helion: this search uses its own benchmark provider "
                f"({provider.__name__}); kiln replaces only Helion's local one."
            )
        compat.set_provider_class(search, KilnBenchmarkProvider)
        if settings.current().helion_final_round:
            finalists.hook(search)
    return search


def autotuner_fn(bound_kernel: Any, args: Sequence[object], **kwargs: object) -> Any:
    """Helion's default autotuner (search, effort, cache), with every compile and benchmark through kiln."""
    _start_services()  # now, while Helion generates code
    return use_kiln(compat.default_autotuner_fn(bound_kernel, args, **kwargs))


def install() -> None:
    """Every Helion search of this process compiles and benchmarks through kiln (until :func:`uninstall`);
    with ``KILN_HELION_FINAL_ROUND``, its finalists race in kiln's final round."""
    from triton_kiln import settings

    compat.set_default_provider_class(KilnBenchmarkProvider)
    if settings.current().helion_final_round:
        finalists.install()
    _start_services()


def _start_services() -> None:
    """kiln's pool and (``KILN_HELION_SANDBOX``) its benchmark sandbox, started in the background
    (the sandbox as :func:`~triton_kiln.helion.config.start_sandbox_ahead` says)."""
    from triton_kiln import settings

    kiln_config.pool()
    if settings.current().helion_sandbox:
        kiln_config.start_sandbox_ahead(settings.current().idle_s)


def uninstall() -> None:
    compat.set_default_provider_class(None)
    finalists.uninstall()


def installed() -> bool:
    return compat.default_provider_is(KilnBenchmarkProvider)


def prepare_search(bound_kernel: Any, args: Sequence[object]) -> Any:
    """Helion's default search for ``bound_kernel``, compiling through kiln, prepared (its provider
    built, the reference baseline computed) but not run: for :func:`precompile_phase`."""
    search = use_kiln(compat.default_search(bound_kernel, args))
    compat.prepare(search)
    search.benchmark_provider.setup()
    return search


def precompile_phase(search: Any, configs: Sequence[Any]) -> list[str]:
    """Helion's precompile phase for ``configs`` (what ``benchmark()`` runs before timing them):
    Helion's codegen, kiln's compile, Helion's ``PrecompileFuture.wait_for_all`` and its
    classification. Returns Helion's status per config (``"ok"``, ``"error"``, ``"timeout"``);
    nothing runs on a GPU, so it also warms kiln's cache for a later autotune."""
    provider = search.benchmark_provider
    fns = [search.kernel.compile_config(config, allow_print=False) for config in configs]
    futures = [compat.create_precompile_future(provider, c, fn) for c, fn in zip(configs, fns, strict=True)]
    oks = PrecompileFuture.wait_for_all(futures)
    return ["ok" if ok else str(f.failure_reason) for f, ok in zip(futures, oks, strict=True)]


@dataclass
class PrecompilePhase:
    """One precompile phase of a Helion autotune (one ``wait_for_all``), whichever mode ran it."""

    configs: int
    ok: int
    failed: int
    timeouts: int
    seconds: float


@contextlib.contextmanager
def probe_precompile(
    on_start: Callable[[int], None] | None = None,
    on_end: Callable[[int], None] | None = None,
) -> Iterator[list[PrecompilePhase]]:
    """Record every precompile phase Helion runs in this block (fork, spawn or kiln): for
    benchmarks and diagnostics. ``on_start(n)`` is called as a phase of ``n`` configs begins,
    ``on_end(n)`` once it is recorded (outside its seconds)."""
    phases: list[PrecompilePhase] = []

    def wrap(original: Callable[[list[Any], str | None], list[bool]]) -> Callable[..., list[bool]]:
        def wait_for_all(futures: list[Any], desc: str | None = None) -> list[bool]:
            if on_start is not None:
                on_start(len(futures))
            started = time.perf_counter()
            oks = original(futures, desc)
            seconds = time.perf_counter() - started
            timeouts = sum(f.failure_reason == "timeout" for f in futures)
            failed = sum(not ok for ok in oks)
            phases.append(PrecompilePhase(len(futures), sum(oks), failed, timeouts, seconds))
            if on_end is not None:
                on_end(len(futures))
            return oks

        return wait_for_all

    with compat.wait_for_all_wrapped(wrap):
        yield phases

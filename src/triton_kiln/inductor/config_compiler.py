"""An Inductor kernel's configs compiled in kiln's pool, and put where Inductor's own precompile
finds them.

For each config, Inductor's own helpers (``_create_compile_meta``, ``_create_compile_options``,
via :func:`triton_kiln.triton_compat.inductor.config_compile`) give ``triton.compile``'s arguments; kiln
compiles them in a worker (which rebuilds the kernel from its source and never imports torch)
and writes the result into Triton's cache under the hash ``triton.compile`` gives those
arguments. Inductor's own ``_precompile_config`` then runs unchanged and finds a cache hit: the
``CompiledKernel``, the static launcher's cubin and every object Inductor makes are its own.

A config Triton's cache already holds (a warm process: the binary an earlier compile left under
the hash ``triton.compile`` computes) is not sent to kiln's pool: Inductor's own
``_precompile_config`` loads it, as stock Inductor does. Loading is not compiling, and no
compiler runs in this process. A kernel loaded so that coordinate descent will tune starts
kiln's pool in the background: the tuning compiles its neighbours on the kernel's first launch.

A config whose compile dies (a signal, the job timeout, the memory limit) is a
:class:`~triton_kiln.errors.JobFailure`: the kernel loses that config (:func:`compile_all`), or, where
Inductor compiles one config alone, :class:`InductorConfigCrashedError` is raised and Inductor
treats the config as failed. Any other error is the compile's own (a ``CompilationError``, a
``PTXASError``) and reaches Inductor as itself, as ``triton.compile`` would have raised it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.artifacts import triton_seed
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.triton_seed import TritonSlot, triton_slot
from triton_kiln.compile.kernel_spec import KernelSpec
from triton_kiln.compile.parse import again_after_ast_race
from triton_kiln.compile.request import CompileRequest
from triton_kiln.errors import JobFailure, PoolClosedError, RemoteCompileError, RequestError
from triton_kiln.inductor.errors import InductorConfigCrashedError, InductorKernelError
from triton_kiln.pool import CompilePool
from triton_kiln.pool.pause import PAUSE
from triton_kiln.triton_compat import inductor as compat

log = logging.getLogger("kiln.inductor")

RECENT_KERNELS = 512
"""How many kernels' last compile inputs :class:`ConfigCompiler` keeps (for ``key_parts_for``)."""


@dataclass(frozen=True)
class _Remembered:
    """A config's compile inputs, the kernel weakly: a kernel's ``JITFunction`` keeps its generated
    module alive, and with it the module's ``CachingAutotuner``, so a strong reference here kept up
    to ``RECENT_KERNELS`` modules alive after Inductor let them go."""

    fn: weakref.ref[Any]
    inputs: compat.ConfigCompile  # its ``fn`` is ``None``

    @classmethod
    def of(cls, inputs: compat.ConfigCompile) -> _Remembered:
        return cls(weakref.ref(inputs.fn), replace(inputs, fn=None))

    def get(self) -> compat.ConfigCompile | None:
        """The inputs, or ``None`` once the kernel is gone."""
        fn = self.fn()
        return None if fn is None else replace(self.inputs, fn=fn)


ROUTED_BACKENDS = ("cuda", "hip")
"""The devices whose Inductor compiles go to kiln's pool (the backends kiln compiles for)."""


def is_crash(exc: BaseException) -> bool:
    """Whether a failed compile died (signal, timeout, memory) rather than raised."""
    return isinstance(exc, JobFailure) and not isinstance(exc, RemoteCompileError)


@dataclass
class ConfigJob:
    """One config of one kernel, on its way through kiln's pool."""

    config: Any
    compile: compat.ConfigCompile
    slot: TritonSlot
    request: CompileRequest
    future: Future[CompiledArtifact]


class _Settled(threading.local):
    """The configs this thread's ``compile_all`` settled, while Inductor's own loop loads them."""

    def __init__(self) -> None:
        self.ids: frozenset[int] = frozenset()


class ConfigCompiler:
    """Compiles Inductor configs in ``pool``; remembers a compile's own error for the moment
    Inductor's ``_precompile_config`` asks for that config (it is raised then, not compiled again)."""

    def __init__(self, pool: CompilePool) -> None:
        self.pool = pool
        self._errors: dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self.triton_cache_hits = 0  # configs Inductor loaded from Triton's cache, not sent to kiln
        self._settled = _Settled()
        # the last inputs per (kernel name, constexpr values), the most recent last
        self._recent: OrderedDict[tuple[str, str], _Remembered] = OrderedDict()

    # -- one config ---------------------------------------------------------------------------

    def submit(self, autotuner: Any, cfg: Any) -> ConfigJob | None:
        """Start ``cfg``'s compile; ``None`` when Inductor's own code is to run here: the config
        is in Triton's cache already (a load, no compile), the device is one kiln does not compile
        for, or kiln cannot describe the kernel (logged)."""
        try:
            return again_after_ast_race(lambda: self._submit(autotuner, cfg))
        except Exception as exc:
            log.warning(
                "kiln: %s (%s) config %s is compiled by Inductor in this process, not in kiln's pool: %s",
                compat.kernel_name(autotuner),
                compat.kernel_file(autotuner),
                _label(cfg),
                exc,
            )
            return None

    def _submit(self, autotuner: Any, cfg: Any) -> ConfigJob | None:
        """:meth:`submit`'s work, which raises where kiln cannot describe the kernel; done again
        from the start where a parse met CPython's AST race (each step before it is safe to repeat)."""
        inputs = compat.config_compile(autotuner, cfg)
        if inputs.target.backend not in ROUTED_BACKENDS:
            return None  # Inductor's Triton-on-CPU (or another device's) compiles stay Inductor's
        self._remember(inputs)
        slot = _slot(inputs)
        if slot.cached():
            with self._lock:
                self.triton_cache_hits += 1
            self._ready_for_tuning(autotuner)
            return None  # Triton's cache holds the binary: Inductor's own code only loads it
        request = self._request(inputs)
        error = self.take_error(request.key)
        future = _failed(error) if error is not None else self.pool.submit(request)
        return ConfigJob(cfg, inputs, slot, request, future)

    def _ready_for_tuning(self, autotuner: Any) -> None:
        """A kernel loaded from Triton's cache that coordinate descent will tune on its first
        launch: start kiln's pool now (in the background), so its zygote is ready when the
        tuning compiles the neighbours rather than being waited for (a zygote's start imports
        Triton: a second or more). A warm process starts nothing else."""
        if self.pool.started:
            return
        try:
            if compat.will_coordesc_tune(autotuner):
                self.pool.start()
        except PoolClosedError:  # a pool shut down starts nothing
            pass
        except Exception as exc:  # an optimization: a kernel kiln cannot read still loads
            log.debug(
                "kiln: %s: the pool not started ahead of its tuning: %s", compat.kernel_name(autotuner), exc
            )

    def _request(self, inputs: compat.ConfigCompile) -> CompileRequest:
        """kiln's request for exactly the compile ``triton.compile`` would make of ``inputs``."""
        arg_names = triton_compat.jit_arg_names(inputs.fn)
        odd = [path for path in inputs.attrs if len(path) != 1] + [
            k for k in inputs.constants if not isinstance(k, str)
        ]
        if odd:
            raise RequestError(f"arguments addressed by path {odd} (tuple arguments) are not sent to kiln")
        allowed = triton_compat.backend_option_names(inputs.target)
        return CompileRequest(
            inputs.fn,
            inputs.signature,
            inputs.constants,
            # what Triton's parse_options would drop anyway (the binary does not depend on it)
            options={k: v for k, v in inputs.options.items() if k in allowed},
            target=inputs.target,
            attrs={arg_names[path[0]]: value for path, value in inputs.attrs.items()},
            triton_key_dir=self.pool.settings.triton_key_dir,
        )

    def finish(self, autotuner: Any, job: ConfigJob) -> None:
        """Wait for ``job``; on success seed Triton's cache; raise what it failed with."""
        try:
            artifact = job.future.result()
        except JobFailure as exc:
            if isinstance(exc, RemoteCompileError):
                raise  # the compile's own error, as triton.compile would have raised it
            raise InductorConfigCrashedError(
                compat.kernel_name(autotuner), compat.kernel_file(autotuner), _label(job.config), exc
            ) from exc
        seed_triton_cache(job, artifact)

    def prefetch(self, autotuner: Any, configs: list[Any]) -> list[Future[CompiledArtifact]]:
        """Start these configs' compiles now, all at once (coordinate descent's neighbours): when
        Inductor asks for one, its compile is done or in flight. Returns the compiles started
        (a config in Triton's cache, or not kiln's to compile, starts none)."""
        with KernelSpec.batch():
            jobs = [self.submit(autotuner, cfg) for cfg in configs]
        return [job.future for job in jobs if job is not None]

    def compile_neighbours_ahead(self, autotuner: Any, launcher: Any) -> None:
        """Coordinate descent's first ring from ``launcher``'s config, compiled in parallel and
        waited for before the tuning's first timing: kiln holds its compile processes still while
        Inductor times, but not a worker's ``ptxas``, so a compile left running would run beside
        the timings (the tuning times each neighbour anyway; one that fails is the tuning's to
        meet, as it would have)."""
        try:
            neighbours = compat.coordesc_neighbours(autotuner, launcher.config)
            if neighbours and compat.ensure_kernel_loaded(autotuner):
                started = self.prefetch(autotuner, neighbours)
                wait(started)
                log.debug(
                    "kiln: %s: %d coordinate-descent neighbours compiled ahead",
                    compat.kernel_name(autotuner),
                    len(started),
                )
        except Exception as exc:  # compiling ahead is an optimization: it never breaks the tuning
            log.debug("kiln: %s: neighbours not compiled ahead: %s", compat.kernel_name(autotuner), exc)

    def _remember(self, inputs: compat.ConfigCompile) -> None:
        name = str(getattr(inputs.fn, "__name__", "?"))
        ident = (name, triton_compat.constants_label(inputs.constants))
        with self._lock:
            self._recent[ident] = _Remembered.of(inputs)
            self._recent.move_to_end(ident)
            while len(self._recent) > RECENT_KERNELS:
                self._recent.popitem(last=False)

    def key_parts_for(self, kernel_name: str, constants: str | None = None) -> dict[str, str] | None:
        """The key parts (:func:`~triton_kiln.triton_compat.compiling.compile_key_parts`) this process
        gave ``kernel_name`` with these constexpr values (a
        :func:`~triton_kiln.triton_compat.compiling.constants_label`), else its last config's (marked
        ``"same_config": "no"``), else ``None``: to tell why another process (the benchmark
        sandbox) keyed the same compile differently."""
        with self._lock:
            exact = self._recent.get((kernel_name, constants)) if constants is not None else None
            inputs = exact.get() if exact is not None else None
            same = inputs is not None
            if inputs is None:  # the kernel's most recent config still alive
                alive = (r.get() for (name, _), r in reversed(self._recent.items()) if name == kernel_name)
                inputs = next((i for i in alive if i is not None), None)
        if inputs is None:
            return None
        parts = triton_compat.compile_key_parts(
            _source(inputs), triton_compat.make_backend(inputs.target), dict(inputs.options)
        )
        return {**parts, "same_config": "yes" if same else "no"}

    def remember_error(self, job: ConfigJob, exc: BaseException) -> None:
        with self._lock:
            self._errors[job.request.key] = exc

    def take_error(self, key: str) -> BaseException | None:
        with self._lock:
            return self._errors.pop(key, None)

    # -- every config of a kernel -----------------------------------------------------------

    @contextlib.contextmanager
    def loading(self, settled: list[Any]) -> Iterator[None]:
        """While Inductor's own loop runs in this thread: ``settled`` (what :meth:`compile_all`
        returned) go straight to Inductor's ``_precompile_config`` (:meth:`is_settled`)."""
        previous = self._settled.ids
        self._settled.ids = frozenset(id(cfg) for cfg in settled)
        try:
            yield
        finally:
            self._settled.ids = previous

    def is_settled(self, cfg: Any) -> bool:
        """Whether ``cfg`` was settled by this thread's :meth:`compile_all` (in Triton's cache
        now, or not kiln's to compile): checking it again would find the same."""
        return id(cfg) in self._settled.ids

    def compile_all(self, autotuner: Any) -> list[Any]:
        """Compile every config ``_precompile_worker`` is about to compile, at once; drop those
        whose compile died (logged with kiln's reason); :class:`InductorKernelError` if none is
        left. A config that raised stays, with its error kept for ``_precompile_config``.
        Returns the configs settled: in Triton's cache now, or left to Inductor (not one that
        raised, whose error ``_precompile_config`` must raise)."""
        configs = compat.kernel_configs(autotuner)
        if not configs:
            return []
        with KernelSpec.batch():  # one kernel, its configs together: described once
            jobs = [(cfg, self.submit(autotuner, cfg)) for cfg in configs]
        wait([job.future for _, job in jobs if job is not None])
        kept: list[Any] = []
        settled: list[Any] = []
        crashes: list[tuple[str, JobFailure]] = []
        for cfg, job in jobs:
            if job is None:
                kept.append(cfg)
                settled.append(cfg)
                continue
            exc = job.future.exception()
            if exc is None:
                seed_triton_cache(job, job.future.result())
                kept.append(cfg)
                settled.append(cfg)
            elif is_crash(exc):
                assert isinstance(exc, JobFailure)
                crashes.append((_label(cfg), exc))
                log.warning(
                    "kiln: Inductor kernel %s (%s): config %s skipped: %s",
                    compat.kernel_name(autotuner),
                    compat.kernel_file(autotuner),
                    _label(cfg),
                    exc,
                )
            else:
                self.remember_error(job, exc)
                kept.append(cfg)
        if not kept:
            raise InductorKernelError(compat.kernel_name(autotuner), compat.kernel_file(autotuner), crashes)
        if crashes:
            compat.keep_configs(autotuner, kept)
        return settled


def seed_triton_cache(job: ConfigJob, artifact: CompiledArtifact) -> None:
    """Write ``artifact`` into Triton's cache (``TRITON_CACHE_DIR``, Triton's layout: binary,
    metadata and the text IRs kiln kept) under the hash ``triton.compile`` gives the config.
    Not while Inductor times a kernel in another thread (:mod:`triton_kiln.pool.pause`): this is work
    under the GIL."""
    PAUSE.wait_running()
    triton_seed.seed_triton_cache(job.slot, artifact)


def _source(inputs: compat.ConfigCompile) -> Any:
    return triton_compat.ASTSource(inputs.fn, inputs.signature, inputs.constants, inputs.attrs or None)


def _slot(inputs: compat.ConfigCompile) -> TritonSlot:
    """Where ``triton.compile`` keeps this config's binary in Triton's cache."""
    return triton_slot(_source(inputs), triton_compat.make_backend(inputs.target), dict(inputs.options))


def _label(cfg: Any) -> str:
    return str(cfg)


def _failed(error: BaseException) -> Future[CompiledArtifact]:
    future: Future[CompiledArtifact] = Future()
    future.set_exception(error)
    return future

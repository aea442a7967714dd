"""Every private name of torch Inductor kiln touches (:mod:`triton_kiln.inductor`), and every difference
between the torch versions it was checked against: torch 2.11.0 (Triton 3.6.0) and 2.13.0
(Triton 3.7.1).

What kiln uses, and where it lives in both versions:

* ``torch._inductor.async_compile.AsyncCompile.process_pool`` (a ``staticmethod`` around an
  ``lru_cache(1)`` function) and ``AsyncCompile._ready_future``: the pool Inductor submits its
  compiles to, and the warm-up job that says it is ready;
* ``torch._inductor.runtime.compile_tasks._worker_compile_triton(load_kernel, extra_env,
  extra_config)``: the job a codegen kernel, a template choice or a user-defined Triton kernel
  arrives as (``load_kernel`` is ``functools.partial(codecache._load_triton_kernel_from_source,
  kernel_name, source_code)``), and ``_set_triton_ptxas_path`` (the worker's ptxas);
* ``torch._inductor.runtime.triton_heuristics.CachingAutotuner``: ``_precompile_worker`` (a
  kernel's configs compiled in turn), ``_precompile_config`` (one config: every compile the parent
  makes, coordinate descent and runtime autotune included), ``_create_compile_meta`` and
  ``_create_compile_options`` (Inductor's own helpers for ``triton.compile``'s arguments),
  ``prepare_for_pickle`` (what a worker does before sending the kernel back);
* ``torch._inductor.graph.GraphLowering.__init__``: a graph is being lowered (Inductor's caches
  missed), the moment kiln's pool starts;
* ``CachingAutotuner._coordinate_descent_tuning`` (the tuning itself, which the public
  ``coordinate_descent_tuning`` calls only for a kernel it tunes: the public one runs on every
  launch of a template kernel, so kiln stays off it) and its ``coordesc_tuner``
  (``tunable_fields``, ``get_neighbour_values``, ``is_valid_config``;
  ``coordinate_descent_tuner.get_field`` / ``set_field``): the neighbours coordinate descent will
  ask for, compiled ahead;
* ``torch._inductor.codecache.PyCodeCache.write`` and ``compile_tasks._reload_python_module``
  (a kernel's module written where Inductor writes it, and loaded privately);
* ``torch._inductor.runtime.benchmarking``: the benchmarker classes' ``benchmark_gpu`` (and 2.13's
  ``benchmark_gpu_with_cuda_graph``), during which kiln holds its compile processes still;
* ``torch._inductor.select_algorithm.AlgorithmSelectorCache``: ``make_benchmark_fn`` (a
  classmethod: which benchmarker times a list of choices), ``_is_extern`` and
  ``benchmark_in_current_process`` (ATen/extern choices, timed in the parent as Inductor's own
  subprocess mode does); a choice's ``bmreq`` (its picklable ``BenchmarkRequest``, whose
  ``benchmark()`` makes its own inputs: what ``autotune_in_subproc`` ships to its subprocess), with
  the ``TORCHINDUCTOR_CACHE_DIR`` / ``TRITON_CACHE_DIR`` Inductor sends with it;
* ``torch._inductor.codecache.PersistentCache.lookup`` (template timings kept on disk, keyed by
  ``CacheBase.get_system()``'s hash, the operation, the inputs and the float32 matmul precision;
  a choice's ``hash_key()``), the same in both: kiln's remote cache behind it;
* ``CachingAutotuner.benchmark_all_configs`` and ``bench`` (a kernel with several configs timing
  each with its first call's inputs: the runtime autotune, the C++ wrapper's lazy compile's
  first run included), with ``prepare_for_pickle`` / ``__getstate__`` / ``__setstate__`` /
  ``restore_after_unpickle`` and ``_make_launchers`` (the kernel sent to kiln's sandbox and its
  launchers made there), and 2.13's ``benchmark_failure_reasons``;
* ``torch._inductor.runtime.triton_lazy_compile`` (2.13; not in 2.11): the C++ wrapper's lazy
  compile. Its ``start_kernel_compile`` ``eval``s the kernel's ``async_compile.triton(...)`` on
  the module's own ``AsyncCompile()``, cached in ``_async_compile`` for the process's life; that
  instance reads ``process_pool`` and ``_ready_future`` from its class, so the patch on
  ``AsyncCompile.process_pool`` routes it and ``uninstall()`` gives it back, with nothing of
  kiln's kept on the instance (:func:`lazy_compile_module`, for the tests).

Version differences (each handled here, nowhere else):

* the compile target's warp size: 2.11 ``triton_heuristics.cc_warp_size(cc)``, 2.13
  ``device_props.warp_size_or_default``;
* ``_set_triton_libdevice_path`` (the CUDA toolkit's libdevice, ``eager_numerics``) is 2.13's
  only;
* whether a kernel is coordinate-descent tuned: 2.13's ``_should_coordesc_tune`` property, 2.11's
  same test inline in ``coordinate_descent_tuning``; reloading the function: 2.13's
  ``_ensure_kernel_loaded``, 2.11's inline ``self.fn = self._reload_kernel().fn``;
* the benchmarker classes: ``TorchProfilerBenchmarker`` and ``Benchmarker``'s
  ``benchmark_gpu_with_cuda_graph`` are 2.13's only (:func:`benchmark_points` finds what each
  version defines);
* the C++ wrapper's lazy compile (``triton_lazy_compile``) is 2.13's only: 2.11's C++ wrapper
  compiles and autotunes its Triton kernels at compile time, through ``AsyncCompile.triton``;
* why a config's runtime-autotune time is ``inf`` (``benchmark_failure_reasons``,
  ``BenchmarkFailureReason``) is 2.13's only; ``prepare_for_pickle`` saves 7 values in 2.13, 6
  in 2.11 (kiln hands them back unread);
* ``make_benchmark_fn``: the same signature in both; 2.13 also sends CUTLASS choices to its
  subprocess unasked (2.11 only with ``autotune_in_subproc``): kiln's sandbox takes every
  non-extern choice on a GPU in both.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import pickle
from dataclasses import dataclass
from typing import Any

CHECKED_TORCH_VERSIONS = ("2.11.0", "2.13.0")
"""The torch releases whose Inductor this module was read against."""


def inductor_available() -> bool:
    """Whether torch with Inductor can be imported (kiln does not depend on torch)."""
    try:
        import torch._inductor.async_compile  # noqa: F401
    except ImportError:
        return False
    return True


def torch_version() -> str:
    import torch

    return str(torch.__version__)


# --- the patch points ---


@dataclass(frozen=True)
class PatchPoint:
    """An attribute of Inductor's that :mod:`triton_kiln.inductor` replaces (and gives back)."""

    owner: Any
    name: str

    def current(self) -> Any:
        """The attribute as stored on its class (a ``staticmethod`` stays one)."""
        return self.owner.__dict__[self.name]

    @property
    def present(self) -> bool:
        """Whether this torch's class defines the attribute itself."""
        return self.name in self.owner.__dict__

    @property
    def qualname(self) -> str:
        return f"{getattr(self.owner, '__name__', self.owner)}.{self.name}"

    def set(self, value: Any) -> None:
        setattr(self.owner, self.name, value)


def async_compile_class() -> Any:
    from torch._inductor.async_compile import AsyncCompile

    return AsyncCompile


def caching_autotuner_class() -> Any:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    return CachingAutotuner


def process_pool_point() -> PatchPoint:
    return PatchPoint(async_compile_class(), "process_pool")


def precompile_worker_point() -> PatchPoint:
    return PatchPoint(caching_autotuner_class(), "_precompile_worker")


def precompile_config_point() -> PatchPoint:
    return PatchPoint(caching_autotuner_class(), "_precompile_config")


def coordinate_descent_point() -> PatchPoint:
    return PatchPoint(caching_autotuner_class(), "_coordinate_descent_tuning")


def use_process_pool_point() -> PatchPoint:
    """``AsyncCompile.use_process_pool`` (a classmethod): whether a compile goes to the pool."""
    return PatchPoint(async_compile_class(), "use_process_pool")


def make_precompile_fn_point() -> PatchPoint:
    """``AlgorithmSelectorCache.make_precompile_fn``: max-autotune's template choices handed to
    their precompile (2.11 and 2.13: each choice to the process pool where
    ``use_process_pool()`` says so, else ``choice.precompile()`` in a thread)."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    return PatchPoint(AlgorithmSelectorCache, "make_precompile_fn")


def graph_lowering_point() -> PatchPoint:
    """``GraphLowering.__init__``: Inductor is about to lower a graph, so its caches missed and
    Triton compiles follow (a cached graph, FX or AOTAutograd, is loaded without one).
    ``torch._inductor.graph`` is imported here; ``torch.compile`` imports it on every path
    (``compile_fx`` does, at its top)."""
    from torch._inductor.graph import GraphLowering

    return PatchPoint(GraphLowering, "__init__")


BENCHMARK_METHODS = ("benchmark_gpu", "benchmark_gpu_with_cuda_graph")
"""The methods of Inductor's benchmarkers that time GPU work (``benchmark_gpu_with_cuda_graph``
is 2.13's only)."""


def benchmark_points() -> list[PatchPoint]:
    """Every GPU timing method that a benchmarker class of ``torch._inductor.runtime.benchmarking``
    defines itself (the abstract ``Benchmarker.benchmark_gpu`` excepted): 2.11 and 2.13 have
    ``TritonBenchmarker`` and ``InductorBenchmarker``, 2.13 also ``TorchProfilerBenchmarker`` and
    ``Benchmarker.benchmark_gpu_with_cuda_graph``; which class ``benchmarker`` is depends on
    Inductor's config, so kiln wraps each."""
    from torch._inductor.runtime import benchmarking

    base = benchmarking.Benchmarker
    points = []
    for value in vars(benchmarking).values():
        if isinstance(value, type) and issubclass(value, base):
            for name in BENCHMARK_METHODS:
                if name in value.__dict__ and not (value is base and name == "benchmark_gpu"):
                    points.append(PatchPoint(value, name))
    return points


def reset_ready_future() -> None:
    """Forget the warm-up job, so the next ``use_process_pool()`` asks the (new) pool again."""
    async_compile_class()._ready_future = None


def ready_job() -> Any:
    """The no-op job ``use_process_pool()`` submits to learn that the pool is ready."""
    return async_compile_class()._get_ready


def is_triton_compile_job(fn: Any) -> bool:
    """Whether a job submitted to ``AsyncCompile.process_pool()`` is a Triton compile."""
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    return fn is _worker_compile_triton


def lazy_compile_module() -> Any | None:
    """``torch._inductor.runtime.triton_lazy_compile`` (the C++ wrapper's lazy compile, 2.13),
    or ``None`` on a torch without it (2.11)."""
    try:
        from torch._inductor.runtime import triton_lazy_compile
    except ImportError:
        return None
    return triton_lazy_compile


def lazy_compile_async_compile() -> Any:
    """The ``AsyncCompile`` the lazy compile's ``start_kernel_compile`` evaluates its kernels
    on (``None`` until its first call)."""
    return getattr(lazy_compile_module(), "_async_compile", None)


def set_lazy_compile_async_compile(value: Any) -> None:
    """Set that cached ``AsyncCompile`` (tests: a process's first load, and putting it back)."""
    module = lazy_compile_module()
    if module is not None:
        module._async_compile = value


# --- a kernel's module, loaded in the parent as the worker would ---


def load_job_kernel(load_kernel: Any) -> Any:
    """The ``CachingAutotuner`` a ``_worker_compile_triton`` job's ``load_kernel`` makes, from a
    private copy of its module: written where Inductor writes it (the path is in the binary's line
    info), executed apart from Inductor's module cache, whose kernel objects stay untouched."""
    from torch._inductor.codecache import PyCodeCache, _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _reload_python_module

    if not (
        isinstance(load_kernel, functools.partial)
        and load_kernel.func is _load_triton_kernel_from_source
        and len(load_kernel.args) == 2
        and not load_kernel.keywords
    ):
        return load_kernel()
    kernel_name, source_code = load_kernel.args
    key, path = PyCodeCache.write(source_code)
    module = _reload_python_module(key, path, set_sys_modules=False)
    return getattr(module, kernel_name)


def set_worker_paths() -> None:
    """What Inductor's worker sets before compiling (ptxas; libdevice on 2.13), set here so the
    ``TRITON_*`` variables kiln's requests carry are the ones the worker would compile with."""
    import os

    from torch._inductor.runtime import compile_tasks

    from triton_kiln.triton_compat.compiling import forget_ptxas_version

    before = os.environ.get("TRITON_PTXAS_PATH")
    compile_tasks._set_triton_ptxas_path()
    libdevice = getattr(compile_tasks, "_set_triton_libdevice_path", None)  # 2.13, not 2.11
    if libdevice is not None:
        libdevice()
    if os.environ.get("TRITON_PTXAS_PATH") != before:
        # This process may have asked its ptxas's version already (a compile or a load before
        # install()): its keys would then differ from every fresh process's, the template
        # benchmarks' sandbox included, which would compile again rather than load kiln's binaries.
        forget_ptxas_version()


def precompile_warm(kernel: Any) -> None:
    """``kernel.precompile(warm_cache_only=True)``, as Inductor's worker does, in this process.

    Each compile there registers its binary with Inductor's ``TritonBundler`` (what an FX graph
    cache entry bundles). A worker's registrations die with the worker; here they would stay,
    and the parent's own ``_precompile_worker`` registers each binary again: every kernel twice
    in the bundle, which the warm process then reads. So the ones made here are dropped."""
    from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key
    from torch._inductor.triton_bundler import TritonBundler

    before = {id(entry) for entry in getattr(TritonBundler, "_entries", None) or ()}
    kernel.precompile(warm_cache_only=True)
    entries = getattr(TritonBundler, "_entries", None)
    if not entries:
        return
    mine = {triton_hash_to_path_key(result.kernel.hash) for result in kernel.compile_results}
    for entry in [e for e in entries if id(e) not in before and e.kernel_hash in mine]:
        with contextlib.suppress(ValueError):  # list.remove: atomic beside other threads' appends
            entries.remove(entry)


def as_sent_by_worker(kernel: Any) -> Any:
    """The kernel as Inductor's worker sends it back: ``prepare_for_pickle``, then pickled and
    unpickled (static-launcher kernels drop their cubin path in ``__getstate__``). The kernel
    given is restored afterwards (``restore_after_unpickle``): in a worker it would die, here its
    ``JITFunction`` is the one kiln's config compiler keeps, which must keep its ``fn`` and hash
    lock (without them ``cache_key`` raises ``TypeError``)."""
    old = kernel.prepare_for_pickle()
    try:
        blob = pickle.dumps(kernel, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        restore = getattr(kernel, "restore_after_unpickle", None)
        if restore is not None and old:
            restore(old)
    return pickle.loads(blob)


# --- one config's compile, described with Inductor's own helpers ---


@dataclass(frozen=True)
class ConfigCompile:
    """What ``CachingAutotuner._precompile_config`` passes to ``triton.compile`` for one config."""

    fn: Any
    signature: dict[str, str]
    constants: dict[str, Any]
    attrs: dict[tuple[int, ...], Any]
    target: Any  # triton's GPUTarget
    options: dict[str, Any]


def config_compile(autotuner: Any, cfg: Any) -> ConfigCompile:
    """``triton.compile``'s arguments for ``cfg``, built by Inductor's own helpers."""
    from triton.backends.compiler import GPUTarget

    meta = autotuner._create_compile_meta(cfg)
    options = autotuner._create_compile_options(cfg, meta)
    props = autotuner.device_props
    warp_size = getattr(props, "warp_size_or_default", None)  # 2.13
    if warp_size is None:  # 2.11
        from torch._inductor.runtime.triton_heuristics import cc_warp_size  # type: ignore[attr-defined]

        warp_size = cc_warp_size(meta["cc"])
    configs = meta.get("configs") or [{}]
    return ConfigCompile(
        fn=autotuner.fn,
        signature=dict(meta["signature"]),
        constants=dict(meta["constants"]),
        attrs=dict(configs[0]),
        target=GPUTarget(meta["device_type"], meta["cc"], warp_size),
        options=options,
    )


def kernel_name(autotuner: Any) -> str:
    meta = getattr(autotuner, "inductor_meta", None) or {}
    name = meta.get("kernel_name")
    if isinstance(name, str):
        return name
    return str(getattr(autotuner.fn, "__name__", "triton_kernel"))


def kernel_file(autotuner: Any) -> str:
    """The generated module's path (templates are made without ``filename``: their code's)."""
    filename = getattr(autotuner, "filename", None)
    if filename:
        return str(filename)
    code = getattr(getattr(autotuner.fn, "fn", None), "__code__", None)
    return str(code.co_filename) if code is not None else "<unknown file>"


def kernel_configs(autotuner: Any) -> list[Any] | None:
    """The configs ``_precompile_worker`` is about to compile (``None``: already compiled)."""
    if autotuner.compile_results or not autotuner.configs:
        return None
    return list(autotuner.configs)


def keep_configs(autotuner: Any, configs: list[Any]) -> None:
    autotuner.configs = configs


# --- coordinate descent ---


def _should_coordesc_tune(autotuner: Any) -> bool:
    known = getattr(type(autotuner), "_should_coordesc_tune", None)  # 2.13: a cached property
    if known is not None:
        return bool(autotuner._should_coordesc_tune)
    from torch._inductor.runtime.hints import HeuristicType  # 2.11: the same test, inline

    kind = autotuner.heuristic_type
    if kind in (HeuristicType.TEMPLATE, HeuristicType.USER_AUTOTUNE, HeuristicType.FIXED):
        return False
    reductions = (HeuristicType.REDUCTION, HeuristicType.PERSISTENT_REDUCTION, HeuristicType.SPLIT_SCAN)
    return not (autotuner.deterministic_mode and kind in reductions)


def ensure_kernel_loaded(autotuner: Any) -> bool:
    """Load the kernel's function in this process if a worker's pickling dropped it, as
    coordinate descent does first (2.13 ``_ensure_kernel_loaded``, 2.11 inline); whether it is
    loaded."""
    if getattr(autotuner.fn, "fn", None) is not None:
        return True
    reload = getattr(autotuner, "_reload_kernel", None)
    if reload is None:
        return False
    autotuner.fn = reload().fn
    return autotuner.fn.fn is not None


def will_coordesc_tune(autotuner: Any) -> bool:
    """Whether coordinate descent tunes this kernel on its first launch (and compiles its
    neighbours then)."""
    meta = getattr(autotuner, "inductor_meta", None) or {}
    return bool(meta.get("coordinate_descent_tuning")) and _should_coordesc_tune(autotuner)


def coordesc_neighbours(autotuner: Any, config: Any) -> list[Any]:
    """The configs coordinate descent benchmarks first from ``config``: each valid neighbour
    along each tunable field (its first ring, before an improvement moves the working point)."""
    if not will_coordesc_tune(autotuner):
        return []
    from torch._inductor.runtime.coordinate_descent_tuner import get_field, set_field

    tuner = autotuner.coordesc_tuner
    found = []
    for field in tuner.tunable_fields:
        value = get_field(config, field)  # type: ignore[no-untyped-call]
        if value is None:
            continue
        for neighbour in tuner.get_neighbour_values(field, value):
            candidate = copy.deepcopy(config)
            set_field(candidate, field, neighbour)  # type: ignore[no-untyped-call]
            if tuner.is_valid_config(candidate):
                found.append(candidate)
    return found


# --- template benchmarks (triton_kiln.inductor.benchmarks) ---


def make_benchmark_fn_point() -> PatchPoint:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    return PatchPoint(AlgorithmSelectorCache, "make_benchmark_fn")


# --- max-autotune's template timings, shared through kiln's remote cache ---


def persistent_cache_lookup_point() -> PatchPoint:
    """``PersistentCache.lookup(choices, op, inputs, benchmark, hint_override=None)``: the
    template timings Inductor keeps on disk; ``benchmark(choices)`` runs where they miss."""
    from torch._inductor.codecache import PersistentCache

    return PatchPoint(PersistentCache, "lookup")


def remote_autotune_cache_points() -> tuple[PatchPoint, PatchPoint]:
    """Inductor's remote autotune cache (a kernel's best config, read as its module loads,
    written when its autotune or coordinate descent ends): ``_should_use_remote_autotune_cache``
    of ``runtime/autotune_cache.py`` (whether a kernel, by its ``inductor_meta``, uses it: off
    where ``autotune_remote_cache`` is unset, outside fbcode) and
    ``RemoteAutotuneCache.backend_override_cls``, the backend it uses instead of Redis (torch
    2.11 and 2.13 have both)."""
    from torch._inductor.remote_cache import RemoteAutotuneCache
    from torch._inductor.runtime import autotune_cache

    return (
        PatchPoint(autotune_cache, "_should_use_remote_autotune_cache"),
        PatchPoint(RemoteAutotuneCache, "backend_override_cls"),
    )


def autotune_remote_cache_setting() -> bool | None:
    """Inductor's ``config.autotune_remote_cache`` (``TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE``):
    ``None`` unless set."""
    from torch._inductor import config

    value = config.autotune_remote_cache
    return None if value is None else bool(value)


def remote_autotune_cache_asked(inductor_meta: dict[str, Any]) -> bool | None:
    """What a kernel's ``inductor_meta`` (written when its code was generated) says of the remote
    autotune cache: ``None`` where nothing."""
    value = inductor_meta.get("autotune_remote_cache")
    return None if value is None else bool(value)


def remote_cache_backend_base() -> Any:
    """Inductor's ``RemoteCacheBackend`` (``_get(key) -> bytes | None``, ``_put(key, bytes)``)."""
    from torch._inductor.remote_cache import RemoteCacheBackend

    return RemoteCacheBackend


def template_timings_key(op: str, inputs: str, hint_override: Any) -> str:
    """What Inductor's own cache keys a choice's timing by, besides the choice: the system (GPU,
    CUDA, torch, Triton: its system hash), the operation, its inputs' layouts (and size hint),
    the float32 matmul precision."""
    import torch
    from torch._inductor.codecache import CacheBase

    cache_key = f"{inputs}_{hint_override}" if hint_override is not None else inputs
    return "|".join(
        (str(CacheBase.get_system()["hash"]), op, cache_key, torch.get_float32_matmul_precision())
    )


def choice_hash(choice: Any) -> str:
    return str(choice.hash_key())


# --- a codegen kernel's runtime autotune, timed in kiln's sandbox ---


def benchmark_all_configs_point() -> PatchPoint:
    """``CachingAutotuner.benchmark_all_configs``: a kernel with several configs times each with
    the call's real inputs, at its first call (its ``bench`` per launcher)."""
    return PatchPoint(caching_autotuner_class(), "benchmark_all_configs")


def kernel_label(kernel: Any) -> str:
    """The kernel's name as Inductor's logs give it (``triton_red_fused_sum_0``)."""
    meta = getattr(kernel, "inductor_meta", None) or {}
    return str(meta.get("kernel_name") or getattr(getattr(kernel, "fn", None), "__name__", "triton kernel"))


def kernel_on_cuda(kernel: Any) -> bool:
    props = getattr(kernel, "device_props", None)
    return getattr(props, "type", None) == "cuda"


def launcher_config(launcher: Any) -> Any:
    return launcher.config


def config_key(config: Any) -> tuple[Any, ...]:
    """A config as a hashable key, equal in every process of one torch and Triton."""
    kwargs = tuple(sorted((str(k), repr(v)) for k, v in config.kwargs.items()))
    extra = tuple(
        (name, repr(getattr(config, name, None)))
        for name in ("num_warps", "num_stages", "num_ctas", "maxnreg")
    )
    return kwargs + extra


# Attributes the sandbox's copy of a kernel needs to make its launchers and time them; any other
# attribute that does not pickle (hooks the parent set on it: its cache writer, its reload
# function) is sent as None.
_PAYLOAD_NEEDS = ("compile_results", "configs", "triton_meta", "inductor_meta", "fn", "device_props")


def kernel_payload(kernel: Any) -> bytes | str:
    """The kernel as the sandbox rebuilds it (pickled, launchers left out, as a compile worker
    sends it back), or the reason it cannot be sent. The kernel is as before afterwards."""
    import pickle

    saved = kernel.prepare_for_pickle()
    try:
        state = kernel.__getstate__()
        state["compile_results"] = [_unloaded(result) for result in state.get("compile_results") or []]
        shipped: dict[str, Any] = {}
        for name, value in state.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                if name in _PAYLOAD_NEEDS:
                    return f"its {name} cannot be pickled ({type(exc).__name__}: {exc})"
                shipped[name] = None
            else:
                shipped[name] = value
        return pickle.dumps((type(kernel), shipped))
    except Exception as exc:
        return f"it cannot be pickled ({type(exc).__name__}: {exc})"
    finally:
        kernel.restore_after_unpickle(saved)


# What Triton's ``CompiledKernel._init_handles`` sets when a binary is loaded in a process: its
# module and function handles and its launcher, whose class lives in a module Triton builds in
# that process (``__triton_launcher``), so no other process can unpickle it. torch's
# ``TritonCompileResult.__getstate__`` clears ``run``, which Triton 3.5+ stores as ``_run``: a
# kernel whose configs were loaded here (the runtime autotune's, always) pickles its launcher.
_LOADED_HANDLES = ("module", "function", "run", "_run")


def _unloaded(result: Any) -> Any:
    """``result`` (a compile result), or a copy whose Triton kernel holds none of this process's
    loaded handles; ``result`` itself is left as it is."""
    import copy

    kernel = getattr(result, "kernel", None)
    loaded = [name for name in _LOADED_HANDLES if getattr(kernel, "__dict__", {}).get(name) is not None]
    if not loaded:
        return result
    shipped_kernel = copy.copy(kernel)
    for name in loaded:
        setattr(shipped_kernel, name, None)
    shipped = copy.copy(result)
    shipped.kernel = shipped_kernel
    return shipped


def unpickle_kernel(payload: bytes) -> Any:
    """(In the sandbox) the kernel :func:`kernel_payload` sent, without launchers, as Inductor's
    parent has a kernel a compile worker sent back."""
    import pickle

    cls, state = pickle.loads(payload)
    kernel = cls.__new__(cls)
    kernel.__setstate__(state)
    kernel.restore_after_unpickle(None)
    kernel.launchers = []
    return kernel


def make_launchers(kernel: Any) -> dict[tuple[Any, ...], Any]:
    """(In the sandbox) ``kernel``'s launchers made (its binaries loaded on its device), by
    :func:`config_key`; a config whose binary cannot load there has none."""
    kernel._make_launchers()
    return {config_key(launcher.config): launcher for launcher in kernel.launchers}


def benchmark_failure_reason(kernel: Any, launcher: Any) -> str | None:
    """(2.13) why ``bench`` returned ``inf`` for ``launcher`` (``register_spilling``,
    ``invalid_config``); 2.11 records no reason."""
    reason = getattr(kernel, "benchmark_failure_reasons", {}).get(launcher)
    return None if reason is None else str(getattr(reason, "value", reason))


def note_benchmark_failure(kernel: Any, launcher: Any, reason: str | None) -> None:
    """(2.13) record the sandbox's reason for ``launcher``'s ``inf`` on the parent's kernel, where
    Inductor's log of the skipped configs reads it."""
    reasons = getattr(kernel, "benchmark_failure_reasons", None)
    if reason is None or reasons is None:
        return
    from torch._inductor.runtime import triton_heuristics

    kind = getattr(triton_heuristics, "BenchmarkFailureReason", None)
    try:
        reasons[launcher] = kind(reason) if kind is not None else reason
    except ValueError:  # a reason this torch does not name
        return


def is_extern_choice(selector_cls: Any, choice: Any) -> bool:
    """An ATen/extern (or subgraph) choice: Inductor times these in the parent in every mode."""
    return bool(selector_cls._is_extern(choice))


def is_gpu_request_choice(choice: Any) -> bool:
    """A choice with a ``BenchmarkRequest`` whose output lives on a GPU (what kiln's sandbox runs)."""
    from torch._inductor.utils import is_gpu

    if getattr(choice, "bmreq", None) is None:
        return False
    device = getattr(getattr(choice, "layout", None), "device", None)
    return device is not None and bool(is_gpu(device.type))


def benchmark_in_parent(selector_cls: Any, choices: list[Any], **kwargs: Any) -> dict[Any, float]:
    """``benchmark_in_current_process`` (``input_nodes``, ``layout``, ``input_gen_fns``,
    ``hint_override`` in ``kwargs``)."""
    return dict(selector_cls.benchmark_in_current_process(choices, **kwargs))


def benchmark_call(choice: Any) -> Any:
    """The zero-argument, picklable call that times ``choice`` in another process (ms), as
    ``TuningProcessPool.target`` sends it: ``choice.bmreq.benchmark``."""
    return choice.bmreq.benchmark


def benchmark_env() -> dict[str, str]:
    """The variables Inductor sends with each benchmark to its subprocess: its caches."""
    import os

    return {v: os.environ[v] for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR") if v in os.environ}


BENCHMARK_PROCESS_ENV = {"TORCH_WARM_POOL": "0"}
"""Set in the benchmark process before torch is imported, as Inductor sets it for its own: no
compile pool of Inductor's is started there."""


def choice_label(choice: Any) -> str:
    """``triton_mm_3 (BLOCK_M=32, ..., num_stages=1, num_warps=2)``: a choice as logs name it."""
    name = getattr(choice, "name", None) or type(choice).__name__
    description = getattr(choice, "description", "")
    return f"{name} ({description})" if description else str(name)


def init_benchmark_process() -> None:
    """The sandbox's warm-up: import torch's Inductor and, when a GPU is visible, create this
    process's CUDA context (as Inductor's ``_init_autotune_subprocess`` does); then watch this
    process's Triton compiles (:func:`watch_compiles`)."""
    import torch
    import torch._inductor.autotune_process

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    watch_compiles()


_COMPILED_HERE: list[dict[str, str]] = []
"""In the sandbox process: the Triton compiles that found nothing in the cache (kernel and key parts)."""


def watch_compiles() -> None:
    """Record each Triton compile of this process that misses the cache: its kernel's name and its
    key's parts (:func:`~triton_kiln.triton_compat.compiling.compile_key_parts`). A benchmark process
    should only load what kiln compiled; a miss is a key that differs from the parent's, and its
    parts say which part (:func:`compiles_here`). Triton 3.6 and 3.7: ``get_cache_key`` as
    ``triton.compiler.compiler`` imports it, and ``knobs.compilation.listener``."""
    from triton import knobs
    from triton.compiler import compiler

    from triton_kiln.triton_compat.compiling import constants_label, parts_of_key
    from triton_kiln.triton_compat.versions import stages_hook_cache_key

    if getattr(compiler.get_cache_key, "_kiln_watch", False):
        return
    keyed = compiler.get_cache_key
    parts: dict[int, dict[str, str]] = {}

    def get_cache_key(src: Any, backend: Any, backend_options: Any, env_vars: Any) -> Any:
        from triton.runtime.cache import triton_key

        try:
            parts[id(src)] = parts_of_key(
                src, backend, backend_options, env_vars, triton_key(), stages_hook_cache_key()
            )
        except Exception as exc:  # a diagnostic: never the compile's failure
            parts[id(src)] = {"error": f"{type(exc).__name__}: {exc}"}
        return keyed(src, backend, backend_options, env_vars=env_vars)

    get_cache_key._kiln_watch = True  # type: ignore[attr-defined]
    compiler.get_cache_key = get_cache_key
    previous = knobs.compilation.listener

    def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool) -> None:
        seen = parts.pop(id(src), {})
        if not cache_hit:
            constants = constants_label(getattr(src, "constants", None) or {})
            _COMPILED_HERE.append({"kernel": str(getattr(src, "name", "?")), "constants": constants, **seen})
        if previous is not None:
            previous(
                src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit
            )

    knobs.compilation.listener = listener


def compiles_here() -> list[dict[str, str]]:
    """The compiles :func:`watch_compiles` recorded since the last ask (run in the sandbox)."""
    taken = list(_COMPILED_HERE)
    del _COMPILED_HERE[: len(taken)]
    return taken

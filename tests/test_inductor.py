"""kiln.inductor on CPU: Inductor's generated kernels of each kind compile through kiln's pool to
the same sm_90 binaries as Inductor's own worker path, nothing compiles in the parent, the pool
is ready at once, and uninstall gives Inductor back its own objects."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from support.basics import ast_race_once
from support.inductor_support import (
    KERNELS,
    cubin_hashes,
    fake_gpu,  # noqa: F401 - autouse fixture
    four_compile_threads,  # noqa: F401 - fixture
    inductors_own,
    install_on,  # noqa: F401 - fixture
    parent_cannot_compile,  # noqa: F401 - fixture
    precompiled,
    source,
    submit,
)

pytest.importorskip("torch._inductor.async_compile")

from torch._inductor.async_compile import AsyncCompile
from torch._inductor.runtime.compile_tasks import _worker_compile_triton
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

import triton_kiln.inductor as kiln_inductor
from triton_kiln import CompilePool
from triton_kiln.inductor.process_pool import InductorPool
from triton_kiln.triton_compat.compiling import KEY_PARTS


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_each_kernel_kind_compiles_in_kiln_to_inductors_own_binary(
    kind: str,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    name, text = source(kind)
    stock = inductors_own(name, text)  # Inductor's worker path, in this process
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "fresh-triton-cache"))
    pool = make_pool()
    install_on(pool)
    kernel, elapsed_us = submit(name, text).result(timeout=300)
    assert type(kernel) is type(stock)
    assert [type(r) for r in kernel.compile_results] == [type(r) for r in stock.compile_results]
    assert [str(r.config) for r in kernel.compile_results] == [str(r.config) for r in stock.compile_results]
    assert cubin_hashes(kernel) == cubin_hashes(stock)
    assert pool.stats.compiled == len(stock.compile_results)  # every config compiled in kiln's workers
    assert elapsed_us > 0


def test_nothing_compiles_in_the_parent(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
) -> None:
    pool = make_pool()
    install_on(pool)
    futures = {kind: submit(*source(kind)) for kind in ("pointwise", "persistent_reduction", "user_kernel")}
    kernels = {kind: future.result(timeout=300) for kind, future in futures.items()}
    assert all(kernel.compile_results for kernel, _ in kernels.values())
    assert parent_cannot_compile == []
    assert pool.stats.compiled == 2 + 3 + 2


def test_compiles_inductor_makes_in_the_parent_go_through_kiln(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
) -> None:
    """The serial path (no process pool), coordinate descent and runtime autotune call
    ``precompile`` / ``_precompile_config`` in the parent: both are kiln's compiles now."""
    from torch._inductor.codecache import PyCodeCache

    pool = make_pool()
    install_on(pool)
    name, text = source("pointwise")
    kernel = getattr(PyCodeCache.load(text), name)
    kernel.precompile(warm_cache_only=True)  # what the serial path does first
    assert len(kernel.compile_results) == 2
    one_config = kernel.compile_results[0].config
    fresh = PyCodeCache.load(
        source("pointwise", rename="triton_poi_fused_other_1")[1]
    ).triton_poi_fused_other_1
    result = fresh._precompile_config(one_config)  # as coordinate descent compiles a neighbour
    assert result.config is one_config
    assert parent_cannot_compile == []
    assert pool.stats.compiled == 3


def test_cpythons_ast_race_while_describing_a_config_is_retried_not_left_to_the_parent(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """CPython 3.11's AST constructor can raise a spurious ``SystemError`` while Inductor's
    compile threads parse at once (seen on 3.11.7): the config is described again and still
    compiles in kiln's pool, not in this process, where a compiler crash would kill it."""
    from torch._inductor.codecache import PyCodeCache

    from triton_kiln.triton_compat import inductor as compat

    racing, raced = ast_race_once(compat.config_compile)
    monkeypatch.setattr(compat, "config_compile", racing)
    pool = make_pool()
    install_on(pool)
    name, text = source("pointwise")
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        kernel = getattr(PyCodeCache.load(text), name)
        kernel.precompile(warm_cache_only=True)
    assert raced == [1]
    assert len(kernel.compile_results) == 2
    assert parent_cannot_compile == []
    assert pool.stats.compiled == 2
    assert not [r for r in caplog.records if "in this process" in r.getMessage()]


def test_without_kiln_the_same_compile_happens_in_the_parent(parent_cannot_compile: list[str]) -> None:  # noqa: F811
    """The check above can fail: Inductor's own worker path, run here, compiles in this process."""
    name, text = source("pointwise")
    with pytest.raises(AssertionError, match="compiled in the parent"):
        inductors_own(name, text)
    assert parent_cannot_compile


def test_coordinate_descent_neighbours_compile_ahead(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
) -> None:
    """When coordinate descent starts, the first ring of neighbours starts compiling in kiln at
    once; each neighbour Inductor then asks for is served by that earlier submission."""
    from types import SimpleNamespace

    from triton_kiln.triton_compat import inductor as compat

    pool = make_pool()
    install_on(pool)
    kernel = precompiled(*source("pointwise", tuned=True))
    start = kernel.compile_results[0].config
    neighbours = compat.coordesc_neighbours(kernel, start)
    assert len(neighbours) >= 2
    with pytest.raises(Exception):  # noqa: B017 - the tuning's first benchmark needs a GPU
        kernel.coordinate_descent_tuning(SimpleNamespace(config=start))
    stats = pool.stats
    submitted, served = stats.submitted, stats.deduplicated + stats.memory_hits + stats.disk_hits
    for neighbour in neighbours:
        kernel._precompile_config(neighbour)
    assert stats.submitted - submitted == len(neighbours)
    assert stats.deduplicated + stats.memory_hits + stats.disk_hits - served == len(neighbours)
    assert parent_cannot_compile == []


def test_coordinate_descent_times_only_after_its_first_ring_compiled(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kiln holds its compile processes still while Inductor times, but not the ``ptxas`` a worker
    runs (docs/INDUCTOR.md): coordinate descent's first timing waits until the neighbours kiln
    compiles ahead are compiled (in parallel; the tuning times each of them), so no compile of
    kiln's runs beside the tuning's timings."""
    from types import SimpleNamespace

    from triton_kiln.triton_compat import inductor as compat

    pool = make_pool()
    install_on(pool)
    kernel = precompiled(*source("pointwise", rename="triton_poi_fused_timed_after_0", tuned=True))
    start = kernel.compile_results[0].config
    neighbours = compat.coordesc_neighbours(kernel, start)
    assert len(neighbours) >= 2
    compiled = pool.stats.compiled
    at_first_timing: list[int] = []

    def make_launcher(self: Any, *args: Any, **kwargs: Any) -> Any:  # what a timing does first
        at_first_timing.append(pool.stats.compiled)
        raise RuntimeError("no GPU here to time on")

    monkeypatch.setattr(type(kernel.compile_results[0]), "make_launcher", make_launcher)
    with pytest.raises(RuntimeError, match="no GPU here"):
        kernel.coordinate_descent_tuning(SimpleNamespace(config=start))
    assert at_first_timing == [compiled + len(neighbours)]
    assert parent_cannot_compile == []


@pytest.mark.parametrize("kind", ["template_mm", "pointwise"])
def test_coordinate_descent_wrapper_looks_at_a_kernel_once(
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    """Inductor calls ``coordinate_descent_tuning`` on every launch of a kernel whose config
    coordinate descent has not marked (a template kernel: it returns the launcher at once), so
    kiln stays off that method (a wrapper there cost 1.1 ms a call of ResNet-50 in max-autotune)
    and works out a tuned kernel's neighbours once, when its tuning starts."""
    from types import SimpleNamespace

    from triton_kiln.triton_compat import inductor as compat

    looked = []
    real = compat.coordesc_neighbours

    def counting(autotuner: object, config: object) -> list[object]:
        looked.append(autotuner)
        return real(autotuner, config)

    monkeypatch.setattr(compat, "coordesc_neighbours", counting)
    on_a_launch = ("run", "coordinate_descent_tuning")  # what Inductor calls on every launch
    before = [CachingAutotuner.__dict__[name] for name in on_a_launch]
    install_on(make_pool())
    assert [CachingAutotuner.__dict__[name] for name in on_a_launch] == before  # Inductor's own
    kernel = precompiled(*source(kind, tuned=True))
    launcher = SimpleNamespace(config=kernel.compile_results[0].config)
    for _ in range(20):
        if kind == "template_mm":  # Inductor never tunes a template: the launcher comes back
            assert kernel.coordinate_descent_tuning(launcher) is launcher
        else:  # a pointwise kernel is tuned: its first benchmark needs a GPU
            with pytest.raises(Exception):  # noqa: B017
                kernel.coordinate_descent_tuning(launcher)
    assert looked == ([] if kind == "template_mm" else [kernel])


def test_the_pool_is_ready_at_once(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    four_compile_threads: None,  # noqa: F811
) -> None:
    """No warm-up window: Inductor's first ``use_process_pool()`` is already True (stock Inductor
    answers False, and compiles in the parent, until its pool has run a warm-up job)."""
    install_on(make_pool())
    assert AsyncCompile.use_process_pool() is True


class _SysOf312:
    """``sys`` as a module sees it on Python 3.12."""

    version_info = SimpleNamespace(major=3, minor=12, micro=0)

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)


class _Choice:
    """A max-autotune choice as ``make_precompile_fn`` handles it: its hash key (asked while the
    choices are handed out, in the caller's thread) and its own ``precompile()``, which fails
    like a binary that needs more shared memory than the GPU has."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pool_answers: list[bool] = []
        self.failed = False

    def hash_key(self) -> str:
        return self.name

    def kernel_hash_key(self) -> str:
        self.pool_answers.append(AsyncCompile.use_process_pool())
        return self.name

    def precompile(self) -> None:
        raise RuntimeError("No valid triton configs. OutOfResources: out of resource: shared memory")

    def mark_failed(self) -> None:
        self.failed = True


def test_template_choices_precompile_as_stock_does_before_its_pool_warms_up(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    four_compile_threads: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While max-autotune hands out its choices the pool is refused, so each choice's own
    ``precompile()`` (compile in kiln's pool, then load) runs in Inductor's threads: one that
    cannot load is counted as a precompilation failure and marked failed, as under stock."""
    from torch._dynamo.utils import counters
    from torch._inductor import select_algorithm
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    # Inductor skips the precompile on Python 3.11.0-3.11.8 (CPython issue 106905), CI's among
    # them; the GPU machine's 3.12 runs it, as this test does
    monkeypatch.setattr(select_algorithm, "sys", _SysOf312())
    install_on(make_pool())
    choices = [_Choice("too_much_shared_memory"), _Choice("other")]
    choices[1].precompile = lambda: None  # type: ignore[method-assign]
    before = counters["inductor"]["select_algorithm_num_precompilation_exceptions"]
    wait = AlgorithmSelectorCache().make_precompile_fn(choices, "mm", "inputs-key")
    wait()
    answers = [answer for c in choices for answer in c.pool_answers]
    assert answers, "Inductor asked nothing while handing out its choices"
    assert not any(answers), "a template choice would have gone to the process pool"
    assert AsyncCompile.use_process_pool() is True  # elsewhere: kiln's pool, ready at once
    assert counters["inductor"]["select_algorithm_num_precompilation_exceptions"] == before + 1
    assert [c.failed for c in choices] == [True, False]


def test_other_jobs_go_to_inductors_own_pool() -> None:
    ran_in: list[str] = []
    inductors = ThreadPoolExecutor(1, thread_name_prefix="inductors-own")
    pool = InductorPool(lambda: inductors, threads=1)
    try:
        future = pool.submit(lambda x: ran_in.append(threading.current_thread().name) or x * 2, 21)
        assert future.result(timeout=10) == 42
        assert ran_in[0].startswith("inductors-own")
        assert (pool.triton_jobs, pool.other_jobs) == (0, 1)
    finally:
        pool.shutdown()
        inductors.shutdown()


def test_uninstall_gives_inductor_back_its_own_objects(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    from torch._inductor.graph import GraphLowering

    before = (
        AsyncCompile.__dict__["process_pool"],
        CachingAutotuner.__dict__["_precompile_worker"],
        CachingAutotuner.__dict__["_precompile_config"],
        CachingAutotuner.__dict__["_coordinate_descent_tuning"],
        GraphLowering.__dict__["__init__"],
    )
    install_on(make_pool())
    assert GraphLowering.__dict__["__init__"] is not before[4]
    assert kiln_inductor.installed()
    assert isinstance(AsyncCompile.process_pool(), InductorPool)
    assert all(
        CachingAutotuner.__dict__[n] is not b
        for n, b in zip(
            ("_precompile_worker", "_precompile_config", "_coordinate_descent_tuning"),
            before[1:4],
            strict=True,
        )
    )
    kiln_inductor.install()  # a second install changes nothing
    kiln_inductor.uninstall()
    after = (
        AsyncCompile.__dict__["process_pool"],
        CachingAutotuner.__dict__["_precompile_worker"],
        CachingAutotuner.__dict__["_precompile_config"],
        CachingAutotuner.__dict__["_coordinate_descent_tuning"],
        GraphLowering.__dict__["__init__"],
    )
    assert all(a is b for a, b in zip(after, before, strict=True))
    assert not kiln_inductor.installed()
    assert AsyncCompile._ready_future is None
    kiln_inductor.uninstall()  # a second uninstall changes nothing


@pytest.mark.parametrize("gone", ["_coordinate_descent_tuning", "_precompile_worker"])
def test_a_torch_without_an_attribute_kiln_replaces_is_one_clear_error(
    gone: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A torch whose Inductor renamed or dropped one of the private attributes kiln replaces
    (another release than the ones kiln supports): ``install()`` raises a
    :class:`~kiln.inductor.InductorUnsupportedError` naming it and the torch version, and nothing
    is patched; with ``KILN_INDUCTOR=1`` the same reason is one warning and nothing is routed."""
    import torch

    from triton_kiln.inductor import InductorUnsupportedError, install_from_environment

    before = AsyncCompile.__dict__["process_pool"]
    monkeypatch.delattr(CachingAutotuner, gone)
    with pytest.raises(InductorUnsupportedError) as caught:
        kiln_inductor.install()
    message = str(caught.value)
    assert f"CachingAutotuner.{gone}" in message
    assert str(torch.__version__) in message
    assert "nothing is routed" in message
    assert not kiln_inductor.installed()
    assert AsyncCompile.__dict__["process_pool"] is before  # nothing was replaced
    monkeypatch.setenv("KILN_INDUCTOR", "1")
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        install_from_environment()  # never raises
    assert any(f"CachingAutotuner.{gone}" in r.getMessage() for r in caplog.records)
    assert not kiln_inductor.installed()


def test_sandbox_benchmarks_on_a_torch_without_make_benchmark_fn_is_one_clear_error(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    from triton_kiln.inductor import InductorUnsupportedError

    monkeypatch.delattr(AlgorithmSelectorCache, "make_benchmark_fn")
    with pytest.raises(
        InductorUnsupportedError, match=r"AlgorithmSelectorCache\.make_benchmark_fn.*nothing is routed"
    ):
        kiln_inductor.install(sandbox_benchmarks=True)  # checked before anything is replaced
    assert not kiln_inductor.installed()
    install_on(make_pool())  # without the sandbox: routed
    with pytest.raises(InductorUnsupportedError, match="template benchmarks and runtime autotunes stay"):
        kiln_inductor.install(sandbox_benchmarks=True)
    assert kiln_inductor.installed()
    assert kiln_inductor.hooks.current_benchmarks() is None


def test_sandbox_benchmarks_on_a_torch_without_benchmark_all_configs_is_one_clear_error(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from triton_kiln.inductor import InductorUnsupportedError

    monkeypatch.delattr(CachingAutotuner, "benchmark_all_configs")
    with pytest.raises(
        InductorUnsupportedError, match=r"CachingAutotuner\.benchmark_all_configs.*nothing is routed"
    ):
        kiln_inductor.install(sandbox_benchmarks=True)
    assert not kiln_inductor.installed()
    install_on(make_pool())
    with pytest.raises(InductorUnsupportedError, match="runtime autotunes stay in this process"):
        kiln_inductor.install(sandbox_benchmarks=True)
    assert kiln_inductor.hooks.current_runtime_autotune() is None


def test_inductors_gpu_timings_run_with_kilns_compile_processes_held(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every GPU timing method of Inductor's benchmarker classes runs inside kiln's hold
    (kiln.pool.pause, whose own tests stop real processes); KILN_INDUCTOR_QUIET_BENCHMARKS=0 leaves
    them alone; uninstall gives the very same methods back."""
    from torch._inductor.runtime import benchmarking

    from triton_kiln.pool.pause import PAUSE
    from triton_kiln.triton_compat import inductor as compat

    points = compat.benchmark_points()
    found = {(p.owner.__name__, p.name) for p in points}
    assert found >= {("TritonBenchmarker", "benchmark_gpu"), ("InductorBenchmarker", "benchmark_gpu")}
    assert ("Benchmarker", "benchmark_gpu") not in found  # abstract: it only raises
    if "benchmark_gpu_with_cuda_graph" in vars(benchmarking.Benchmarker):  # torch 2.13
        assert ("Benchmarker", "benchmark_gpu_with_cuda_graph") in found
    before = [p.current() for p in points]
    seen: list[bool] = []

    def timing(self: object, *args: object, **kwargs: object) -> float:
        seen.append(PAUSE.held)
        return 1.0

    for point in points:
        point.set(timing)  # what install() wraps: a stand-in for the GPU timing on this CPU machine
    try:
        install_on(make_pool())
        for point in points:
            assert point.current() is not timing
            assert point.current().__wrapped__ is timing
        assert benchmarking.InductorBenchmarker().benchmark_gpu(lambda: None) == 1.0
        assert seen == [True]
        assert not PAUSE.held
        kiln_inductor.uninstall()
        assert all(p.current() is timing for p in points)
        monkeypatch.setenv("KILN_INDUCTOR_QUIET_BENCHMARKS", "0")
        install_on(make_pool())
        assert all(p.current() is timing for p in points)
        kiln_inductor.uninstall()
    finally:
        for point, original in zip(points, before, strict=True):
            point.set(original)


def _child(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    full = {**os.environ, **env, "PYTHONPATH": src}
    return subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300, check=False
    )


def test_kiln_inductor_1_installs_at_import(tmp_path: Path) -> None:
    code = (
        "import triton_kiln, triton_kiln.inductor as k, sys; "
        "print(k.installed()); k.uninstall(); "
        "from triton_kiln.pool import get_pool; get_pool().shutdown(wait=True, cancel_futures=True)"
    )
    out = _child({"KILN_INDUCTOR": "1", "KILN_CACHE_DIR": str(tmp_path)}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]
    off = _child({"KILN_INDUCTOR": "0", "KILN_CACHE_DIR": str(tmp_path)}, code)
    assert off.stdout.split() == ["False"]


def test_kiln_inductor_1_does_not_bring_torch_into_kilns_zygote(tmp_path: Path) -> None:
    """kiln's zygote inherits the caller's environment, KILN_INDUCTOR=1 included, and imports
    triton_kiln: it must not install (and import torch) there."""
    code = (
        "import triton_kiln, triton_kiln.inductor as k\n"
        "from triton_kiln.pool import get_pool\n"
        "pool = get_pool(); pool.wait_ready(120)\n"
        "maps = open(f'/proc/{pool.zygote_pid}/maps').read()\n"
        "print(k.installed(), 'libtorch' in maps, 'libtriton' in maps)\n"
        "k.uninstall(); pool.shutdown(wait=True, cancel_futures=True)\n"
    )
    out = _child({"KILN_INDUCTOR": "1", "KILN_CACHE_DIR": str(tmp_path), "KILN_WORKERS": "1"}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True"]


def test_a_malformed_kiln_inductor_installs_nothing_and_says_so(tmp_path: Path) -> None:
    code = "import triton_kiln, triton_kiln.inductor as k; print(k.installed())"
    out = _child({"KILN_INDUCTOR": "maybe", "KILN_CACHE_DIR": str(tmp_path)}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
    assert "KILN_INDUCTOR" in out.stderr


def test_the_job_is_inductors_worker_function() -> None:
    """kiln recognizes Inductor's own job function (not a copy that could drift)."""
    from triton_kiln.triton_compat import inductor as compat

    assert compat.is_triton_compile_job(_worker_compile_triton)
    assert not compat.is_triton_compile_job(print)


FAKE_PTXAS = """#!/bin/sh
# torch's own ptxas as this CPU build of torch lacks it: another release than Triton's bundled one
echo "ptxas: NVIDIA (R) Ptx optimizing assembler"
echo "Cuda compilation tools, release 12.4, V12.4.131"
"""

BACKEND_HASH = (
    "from triton.backends.compiler import GPUTarget; "
    "from triton.backends.nvidia.compiler import CUDABackend; "
    "print(CUDABackend(GPUTarget('cuda', 90, 32)).hash())"
)


def test_install_after_a_compile_keys_binaries_as_a_fresh_process_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A process that asked Triton for its ptxas's version before ``install()`` set
    ``TRITON_PTXAS_PATH`` (to torch's ptxas, as Inductor's workers do) kept the old version in
    its compile keys; every fresh process (the template benchmarks' sandbox) computed other keys
    and compiled again instead of loading kiln's binaries (seen on the H100: 62 binaries for 20
    mm choices after earlier compiles in the process). Now install() makes Triton ask again."""
    from torch._inductor.runtime import compile_tasks
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    from triton_kiln.triton_compat import inductor as compat
    from triton_kiln.triton_compat.compiling import forget_ptxas_version

    fake = tmp_path / "ptxas"
    fake.write_text(FAKE_PTXAS)
    fake.chmod(0o755)
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    target = GPUTarget("cuda", 90, 32)
    forget_ptxas_version()
    try:
        before = CUDABackend(target).hash()  # what an earlier compile in this process asked
        monkeypatch.setattr(
            compile_tasks,
            "_set_triton_ptxas_path",
            lambda: os.environ.setdefault("TRITON_PTXAS_PATH", str(fake)),
        )
        compat.set_worker_paths()
        here = CUDABackend(target).hash()
        fresh = subprocess.run(
            [sys.executable, "-c", BACKEND_HASH],
            env={**os.environ, "TRITON_PTXAS_PATH": str(fake)},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()
        assert "release 12.4" in fresh
        assert "release 12.4" not in before
        assert here == fresh
    finally:
        os.environ.pop("TRITON_PTXAS_PATH", None)  # set by the stand-in, not through monkeypatch
        forget_ptxas_version()


def _compiled_pointwise() -> tuple[Any, Any, Any, str]:
    """A generated pointwise kernel compiled through kiln (installed): the config compiler, the
    kernel, its one config's compile inputs and their constants label."""
    from torch._inductor.codecache import PyCodeCache

    import triton_kiln.inductor.hooks as inductor_hooks
    from triton_kiln import triton_compat
    from triton_kiln.triton_compat import inductor as compat

    name, text = source("pointwise")
    kernel = getattr(PyCodeCache.load(text), name)
    kernel.precompile(warm_cache_only=True)
    compiler = inductor_hooks._state.compiler  # type: ignore[union-attr]
    inputs = compat.config_compile(kernel, kernel.compile_results[0].config)
    return compiler, kernel, inputs, triton_compat.constants_label(inputs.constants)


def test_the_config_compiler_gives_the_key_parts_of_a_compile_it_keyed(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    """What the sandbox's report compares against: this process's key parts for the same
    compile (kernel and constexpr values), else for another config of the kernel, marked so."""
    install_on(make_pool())
    compiler, kernel, _inputs, label = _compiled_pointwise()
    name = kernel.fn.__name__
    exact = compiler.key_parts_for(name, label)
    assert exact is not None
    assert exact["same_config"] == "yes"
    assert set(KEY_PARTS) <= set(exact)
    other = compiler.key_parts_for(name, "no such constants")
    assert other is not None
    assert other["same_config"] == "no"
    assert compiler.key_parts_for("no_such_kernel") is None


def test_the_config_compiler_keeps_no_kernel_alive(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    """What it remembers for ``key_parts_for`` holds the kernel weakly: a ``JITFunction`` keeps
    its generated module, and that module's ``CachingAutotuner``, alive (292 of them against
    stock's 114 after ResNet-50's max-autotune compile on Triton 3.6.0)."""
    install_on(make_pool())
    compiler, kernel, inputs, label = _compiled_pointwise()
    name = kernel.fn.__name__
    remembered = compiler._recent[(name, label)]
    assert isinstance(remembered.fn, weakref.ref)  # was the inputs themselves, the kernel held
    assert remembered.fn() is kernel.fn
    assert not any(r is kernel.fn for r in gc.get_referents(remembered.inputs))

    class Gone:  # a kernel that is collected: its entry gives nothing, and no error
        __name__ = "gone_kernel"

    gone = Gone()
    compiler._remember(replace(inputs, fn=gone))
    del gone
    gc.collect()
    assert compiler.key_parts_for("gone_kernel", label) is None
    assert compiler.key_parts_for(name, label) is not None  # the live kernel's still answers


def test_each_binary_is_bundled_once_for_the_fx_graph_cache(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    """Inductor's ``TritonBundler`` (what an FX graph cache entry carries, and what a warm process
    reads back) holds each binary once, as with Inductor's own workers: the worker-side compile
    kiln runs in this process must not register the binaries a second time (the H100's ResNet-50
    bundles had 644 files with kiln against 368 without)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key
    from torch._inductor.triton_bundler import TritonBundler

    pool = make_pool()
    install_on(pool)
    with inductor_config.patch(bundle_triton_into_fx_graph_cache=True):
        TritonBundler.end_compile()
        TritonBundler.begin_compile()
        try:
            kernels = [
                submit(*source(kind)).result(timeout=300)[0] for kind in ("pointwise", "persistent_reduction")
            ]
            for kernel in kernels:
                kernel._precompile_worker()  # what Inductor's parent does with a worker's kernel
            bundled = [entry.kernel_hash for entry in TritonBundler._entries or ()]
        finally:
            TritonBundler.end_compile()
    binaries = [triton_hash_to_path_key(r.kernel.hash) for kernel in kernels for r in kernel.compile_results]
    assert len(binaries) == 2 + 3
    assert sorted(bundled) == sorted(binaries)


def test_the_key_parts_of_a_job_compiled_through_the_pool_can_still_be_computed(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    """A job's kernel goes back as Inductor's worker sends it (``prepare_for_pickle``, which strips
    the ``JITFunction``: no ``fn``, no hash lock). kiln runs that side in this process, so the
    kernel it kept for the sandbox's report must not be the stripped one: on the H100 the report
    then raised ``TypeError`` inside ``torch.compile`` and the model failed to compile."""
    import triton_kiln.inductor.hooks as inductor_hooks

    install_on(make_pool())
    name, text = source("pointwise")
    kernel, _ = submit(name, text).result(timeout=300)
    compiler = inductor_hooks._state.compiler  # type: ignore[union-attr]
    parts = compiler.key_parts_for(name)
    assert parts is not None
    assert parts["source"]
    assert len(kernel.compile_results) == 2  # the kernel sent back is whole

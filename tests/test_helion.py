"""kiln inside Helion, on the CPU: real Helion codegen, real Triton compiles for sm_90 in kiln's
pool, Helion's own precompile machinery (``PrecompileFuture.wait_for_all``, its result records
and classification). Only the GPU is faked: Helion's persistent kernels ask the device for its
SM count, which is answered with an H100's (132) for CPU tensors; nothing is launched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")

import helion.runtime

import test_helion_kernels as hk
import triton_kiln as kiln
import triton_kiln.helion
from support import helion_faults
from support.basics import SM90
from support.helion_sandbox import StandInSandbox
from triton_kiln import CompilePool
from triton_kiln import settings as kiln_settings
from triton_kiln.helion import adapter
from triton_kiln.helion.errors import BaselineCompileError


@pytest.fixture
def helion_pool(
    make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch
) -> Iterator[CompilePool]:
    """A kiln pool whose workers carry the Helion fault hook, configured for sm_90, and a stand-in
    benchmark sandbox (nothing here runs on a GPU); a fake SM count."""
    monkeypatch.setattr(helion.runtime, "get_num_sm", lambda device, reserved_sms=0: 132)
    pool = make_pool(preload=[helion_faults.PRELOAD])
    previous = kiln.helion.configure(pool=pool, target=SM90, sandbox=StandInSandbox())
    with kiln_settings.scope(helion_sandbox=True):  # kiln's loop (KILN_HELION_SANDBOX)
        yield pool
    kiln.helion.configure(pool=previous.pool, target=previous.target, sandbox=previous.sandbox)


def _bound(name: str, **settings: Any) -> tuple[Any, tuple[Any, ...]]:
    settings.setdefault("autotune_baseline_fn", hk.eager(name))
    kernel = hk.make(name, autotune_random_seed=7, **settings)
    args = hk.inputs(name)
    return kernel.bind(args), args


def _configs(search: Any, count: int, **override: Any) -> list[Any]:
    spec = search.config_spec
    gen = spec.create_config_generation()
    configs = [spec.default_config()]
    while len(configs) < count:
        config = gen.unflatten(gen.random_flat())
        for key, value in override.items():
            config.config[key] = value
        if config not in configs:
            configs.append(config)
    return configs


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(("name", "count"), [("add", 4), ("softmax", 4), ("matmul", 4), ("many_configs", 12)])
def test_helion_configs_compile_in_kiln(helion_pool: CompilePool, name: str, count: int) -> None:
    bound, args = _bound(name)
    search = adapter.prepare_search(bound, args)
    assert isinstance(search.benchmark_provider, adapter.KilnBenchmarkProvider)
    configs = _configs(search, count)
    before = helion_pool.stats.compiled
    statuses = adapter.precompile_phase(search, configs)
    search.benchmark_provider.cleanup()
    assert statuses == ["ok"] * count
    # every config was a real compile in a worker (none in this process)
    assert helion_pool.stats.compiled - before == len(
        {
            adapter.extract_launch(bound.compile_config(c, allow_print=False), args).request.key
            for c in configs
        }
    )


def test_artifact_lands_in_helions_triton_cache(helion_pool: CompilePool, tmp_path: Path) -> None:
    import triton
    from triton import knobs

    bound, args = _bound("add")
    search = adapter.prepare_search(bound, args)
    config = _configs(search, 2)[1]
    fn = bound.compile_config(config, allow_print=False)
    assert adapter.precompile_phase(search, [config]) == ["ok"]
    launch = adapter.extract_launch(fn, args)
    cache_dir = Path(os.environ["TRITON_CACHE_DIR"])  # the test's fresh per-autotune directory
    from triton.runtime.cache import get_cache_manager

    entry = Path(get_cache_manager(launch.triton_hash).cache_dir)
    assert entry.parent == cache_dir
    assert (entry / f"{launch.file_name}.json").exists()
    assert (entry / f"{launch.file_name}.cubin").exists()
    # What Triton's JIT does when Helion benchmarks the config: the same compile, here a cache hit.
    hits: list[bool] = []
    knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    try:
        from triton_kiln.helion.requests import _binder

        kernel = fn.__globals__["_helion_add"]
        backend, binder = _binder(kernel, SM90)

        def capture(k: Any, grid: Any, *a: Any, **kw: Any) -> None:
            kw["debug"] = kernel.debug or knobs.runtime.debug
            kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
            bound_args, specialization, options = binder(*a, **kw)
            opts, sig, constexprs, attrs = kernel._pack_args(backend, kw, bound_args, specialization, options)
            started = time.perf_counter()
            compiled = triton.compile(
                triton.compiler.ASTSource(kernel, sig, constexprs, attrs), target=SM90, options=opts.__dict__
            )
            assert compiled.hash == launch.triton_hash
            assert time.perf_counter() - started < 0.5

        fn(*args, _launcher=capture)
    finally:
        knobs.compilation.listener = None
    assert hits == [True]
    search.benchmark_provider.cleanup()


def test_aborting_config_is_skipped_by_helion(helion_pool: CompilePool) -> None:
    from support.helion_faults import ABORT_NUM_WARPS

    before = _descendants()
    bound, args = _bound("crashy_add")
    search = adapter.prepare_search(bound, args)
    healthy = _configs(search, 4, num_warps=ABORT_NUM_WARPS * 2)
    crashing = _configs(search, 2, num_warps=ABORT_NUM_WARPS)[1]
    statuses = adapter.precompile_phase(search, [*healthy, crashing])
    search.benchmark_provider.cleanup()
    assert statuses == ["ok"] * 4 + ["error"]
    assert helion_pool.stats.worker_deaths == 1  # a real SIGABRT in a real worker
    # The pool replaced the worker and goes on; no process of this test is left behind
    # beyond the pool's own (the fixture checks the pool's processes after shutdown).
    helion_pool.shutdown(wait=True)
    time.sleep(0.2)
    assert _descendants() - before == set()


def test_crash_reaches_helions_result_record(helion_pool: CompilePool) -> None:
    from support.helion_faults import ABORT_NUM_WARPS

    bound, args = _bound("crashy_add")
    search = adapter.prepare_search(bound, args)
    crashing = _configs(search, 2, num_warps=ABORT_NUM_WARPS)[1]
    provider = search.benchmark_provider
    future = provider._create_precompile_future(crashing, bound.compile_config(crashing, allow_print=False))
    assert adapter.PrecompileFuture.wait_for_all([future]) == [False]
    error = future.remote_error
    assert error is not None
    assert error.exc_type == "WorkerCrashedError"
    assert "SIGABRT" in str(error.exc_args[0])
    assert "kiln-injected" in (error.captured_output or "")
    assert error.classification == "warn"
    assert future.failure_reason == "error"
    assert provider.compile_failures == {"WorkerCrashedError": 1}  # by type, for the bench's split
    provider.cleanup()


def test_compile_timeout_is_helions_timeout(
    helion_pool: CompilePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_TEST_SLOW_S", "30")
    bound, args = _bound("add", autotune_compile_timeout=1)
    search = adapter.prepare_search(bound, args)
    config = _configs(search, 2)[1]
    fn = bound.compile_config(config, allow_print=False)
    launch = adapter.extract_launch(fn, args)
    # A kernel named slow_* sleeps in kiln's fault hook; give this one that name through the
    # request's kernel: compile the slow kernel of faults.py with the config's timeout instead.
    from support import faults
    from support.basics import add_request  # noqa: F401

    request = type(launch.request)(faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 128}, target=SM90)
    future = helion_pool.submit(request, timeout_s=float(bound.settings.autotune_compile_timeout))
    from triton_kiln.helion.process import KilnCompileProcess

    provider = search.benchmark_provider
    holder: list[Any] = []
    process = KilnCompileProcess(
        future, lambda done: provider._finish(done, launch, "decorator", holder[0]), "slow"
    )
    precompile = adapter.PrecompileFuture(
        ctx=provider._precompile_context(),
        config=config,
        process=process,
        timeout=600.0,
        result_path=provider._next_precompile_result_path(),
    )
    holder.append(precompile)
    assert adapter.PrecompileFuture.wait_for_all([precompile]) == [False]
    assert precompile.failure_reason == "timeout"
    assert provider.compile_failures == {"CompileTimeoutError": 1}
    provider.cleanup()


def test_baseline_abort_is_a_clean_error(helion_pool: CompilePool) -> None:
    kernel = hk.make("crashall_add", autotune_random_seed=7)
    args = hk.inputs("crashall_add")
    bound = kernel.bind(args)
    with pytest.raises(BaselineCompileError) as info:
        adapter.prepare_search(bound, args)
    message = str(info.value)
    assert "SIGABRT" in message
    assert "kiln-injected" in message
    assert "autotune_baseline_fn" in message
    # Helion's back-off was followed: smaller block sizes were tried before giving up.
    assert len(info.value.configs) >= 2
    assert helion_pool.stats.worker_deaths == len(info.value.configs)


def test_install_and_autotuner_fn_select_kilns_provider(helion_pool: CompilePool) -> None:
    from helion.autotuner import LFBOTreeSearch
    from helion.autotuner.benchmark_provider import LocalBenchmarkProvider

    bound, args = _bound("add")
    assert LFBOTreeSearch(bound, args)._benchmark_provider_cls is LocalBenchmarkProvider
    kiln.helion.install()
    try:
        assert kiln.helion.installed()
        assert LFBOTreeSearch(bound, args)._benchmark_provider_cls is adapter.KilnBenchmarkProvider
    finally:
        kiln.helion.uninstall()
    assert LFBOTreeSearch(bound, args)._benchmark_provider_cls is LocalBenchmarkProvider
    assert (
        adapter.use_kiln(LFBOTreeSearch(bound, args))._benchmark_provider_cls is adapter.KilnBenchmarkProvider
    )


def _ended(pid: int, within_s: float) -> bool:
    from triton_kiln.sandbox.call_client import spawned_alive

    deadline = time.monotonic() + within_s
    while spawned_alive([pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not spawned_alive([pid])


def test_a_sandbox_started_at_install_closes_when_no_search_calls_it(helion_pool: CompilePool) -> None:
    from triton_kiln.sandbox.call_client import CallSandbox

    box = CallSandbox(timeout_s=30)
    previous = kiln.helion.configure(sandbox=box)
    try:
        with kiln_settings.scope(idle_s=0.5):
            kiln.helion.install()  # starts it ahead of any search
            kiln.helion.uninstall()
            pid = box.pid
            assert pid is not None
            assert psutil.pid_exists(pid)
            assert _ended(pid, 15.0)  # nothing called it within KILN_IDLE_S
            assert box.pid is None
            kiln.helion.install()
            kiln.helion.uninstall()
            assert box.call(int, label="a search's job").value == 0  # called before the idle time
            time.sleep(1.0)
            assert box.pid is not None  # a search uses it: it stays until Helion's cleanup closes it
        box.close()
        with kiln_settings.scope(idle_s=0):
            kiln.helion.install()  # KILN_IDLE_S=0: nothing starts ahead
            kiln.helion.uninstall()
        assert box.pid is None
    finally:
        box.close()
        kiln.helion.configure(sandbox=previous.sandbox)


def test_classification_of_kilns_failures() -> None:
    from triton_kiln.errors import (
        CompileTimeoutError,
        JobInfo,
        WorkerCrashedError,
        WorkerMemoryError,
        ZygoteError,
    )

    job = JobInfo(kernel="_helion_add")
    assert adapter.classify(WorkerCrashedError(job, 1.0, ("boom",), -6)) == "warn"
    assert adapter.classify(CompileTimeoutError(job, 60.0)) == "debug"
    assert adapter.classify(WorkerMemoryError(job, 1.0)) == "debug"
    assert adapter.classify(ZygoteError("cannot start")) == "raise"
    from triton.runtime.errors import OutOfResources

    assert adapter.classify(OutOfResources(300000, 232448, "shared memory")) == "debug"
    assert adapter.classify(RuntimeError("a bug")) == "raise"


def test_unsupported_helion_is_a_clear_error() -> None:
    from triton_kiln.helion.errors import UnsupportedHelionError

    error = UnsupportedHelionError("9.9.9", kiln.helion.SUPPORTED_HELION)
    assert "1.5.0" in str(error)
    assert "9.9.9" in str(error)
    assert "pip install" in str(error)
    import pickle

    assert str(pickle.loads(pickle.dumps(error))) == str(error)


_CTRL_C_SCRIPT = """
import sys
import helion.runtime
helion.runtime.get_num_sm = lambda device, reserved_sms=0: 132
from support import helion_faults
import test_helion_kernels as hk
import triton_kiln.helion
import triton_kiln as kiln
from triton_kiln import CompilePool, GPUTarget
from triton_kiln.helion import adapter

pool = CompilePool(workers=2)
kiln.helion.configure(pool=pool, target=GPUTarget("cuda", 90, 32))
args = hk.inputs("matmul")
bound = hk.make("matmul", autotune_random_seed=3, autotune_baseline_fn=hk.eager("matmul")).bind(args)
search = adapter.prepare_search(bound, args)
gen = search.config_spec.create_config_generation()
configs = [gen.unflatten(gen.random_flat()) for _ in range(40)]
with adapter.probe_precompile(on_start=lambda n: print("PRECOMPILE", n, flush=True)):
    adapter.precompile_phase(search, configs)
print("FINISHED", flush=True)
"""


def test_ctrl_c_in_the_precompile_phase_leaves_no_process(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "kiln"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    proc = subprocess.Popen(
        [sys.executable, "-c", _CTRL_C_SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PRECOMPILE 40"), line + proc.stderr.read()[-3000:]
    # compiles run in kiln's workers once the pool, started by this precompile, is up
    seen: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < deadline:  # the zygote and its two workers
        time.sleep(0.1)
        seen = psutil.Process(proc.pid).children(recursive=True)
    assert len(seen) >= 3, seen
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    assert "FINISHED" not in _out
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"left behind after Ctrl-C: {[(p.pid, p.name()) for p in left]}"

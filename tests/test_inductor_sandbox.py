"""kiln.inductor's sandbox benchmarks on CPU: ``install(sandbox_benchmarks=True)``
and ``KILN_INDUCTOR_SANDBOX=1`` replace ``AlgorithmSelectorCache.make_benchmark_fn`` (uninstall
gives the same object back); GPU template choices are timed in kiln's call sandbox, a real
process; a choice whose benchmark aborts, segfaults, exits, hangs, raises or hits a sticky CUDA
error gets ``inf`` and a logged kiln reason, the process is replaced, the other choices are timed;
every process the sandbox started is gone after ``uninstall()``. The GPU itself is the one fake:
the sticky error is raised as torch raises it (tests/test_inductor_gpu.py has the real one)."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.inductor_bench_requests import FaultyRequest
from support.inductor_support import fake_gpu, install_on  # noqa: F401 - fixtures

pytest.importorskip("torch._inductor.select_algorithm")

import torch
from torch._inductor.ir import FixedLayout
from torch._inductor.select_algorithm import AlgorithmSelectorCache, TritonTemplateCaller

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks
from triton_kiln import CompilePool, SettingsError, settings
from triton_kiln.sandbox.call_client import spawned_alive
from triton_kiln.sandbox.call_messages import CallCrashedError, CallRaisedError, CallTimeoutError

HANG_TIMEOUT_S = 8.0  # a benchmark's limit here: far above a healthy one on a loaded 2-core machine
REASONS: dict[str, tuple[type[Exception], str]] = {
    "abort": (CallCrashedError, "SIGABRT"),
    "segv": (CallCrashedError, "SIGSEGV"),
    "exit": (CallCrashedError, "exit code 7"),
    "hang": (CallTimeoutError, "did not finish in time"),
    "ima": (CallCrashedError, "sticky CUDA error"),
    "raise": (CallRaisedError, "the benchmark raised on its own"),
}


LAYOUT = FixedLayout(torch.device("cuda"), torch.float32, [64, 64])


def choice(name: str, request: Any) -> Any:
    """A real Inductor template choice (a ``TritonTemplateCaller``) around ``request``."""
    return TritonTemplateCaller(name, [], LAYOUT, None, f"{name} config", request)


def benchmark(choices: list[Any], **kwargs: Any) -> dict[Any, float]:
    """What ``AlgorithmSelectorCache.benchmark`` does with ``choices``."""
    fn = AlgorithmSelectorCache.make_benchmark_fn(choices, [], LAYOUT, None, **kwargs)
    return dict(fn(choices))


def make_benchmark_fn_now() -> Any:
    return AlgorithmSelectorCache.__dict__["make_benchmark_fn"]


@pytest.fixture
def sandboxed(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> Iterator[list[int]]:
    """kiln.inductor installed with sandbox benchmarks (HANG_TIMEOUT_S each); yields the pids its
    sandbox spawned, and after the test asserts that none of them is left."""
    pids: list[int] = []
    with settings.scope(bench_timeout_s=HANG_TIMEOUT_S):
        install_on(make_pool())
        kiln_inductor.install(sandbox_benchmarks=True)
    benchmarks = inductor_hooks.current_benchmarks()
    assert benchmarks is not None
    yield benchmarks.sandbox.spawned_pids
    pids = list(benchmarks.sandbox.spawned_pids)
    kiln_inductor.uninstall()
    assert spawned_alive(pids) == [], f"sandbox processes left: {spawned_alive(pids)}"


def test_install_with_sandbox_replaces_the_benchmarker_and_uninstall_gives_it_back(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    before = make_benchmark_fn_now()
    install_on(make_pool())
    assert make_benchmark_fn_now() is before  # install() alone leaves benchmarks to Inductor
    kiln_inductor.install(sandbox_benchmarks=True)  # turned on while installed
    replaced = make_benchmark_fn_now()
    assert replaced is not before
    assert isinstance(replaced, classmethod)
    assert inductor_hooks.current_benchmarks() is not None
    kiln_inductor.install(sandbox_benchmarks=True)  # again: nothing changes
    assert make_benchmark_fn_now() is replaced
    kiln_inductor.install(sandbox_benchmarks=False)  # turned off: Inductor's own object back
    assert make_benchmark_fn_now() is before
    assert kiln_inductor.installed()
    kiln_inductor.install(sandbox_benchmarks=True)
    kiln_inductor.uninstall()
    assert make_benchmark_fn_now() is before
    assert inductor_hooks.current_benchmarks() is None


def test_kiln_inductor_sandbox_1_turns_it_on(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KILN_INDUCTOR_SANDBOX", "maybe")
    with pytest.raises(SettingsError, match="KILN_INDUCTOR_SANDBOX"):
        kiln_inductor.install()
    assert not kiln_inductor.installed()
    monkeypatch.setenv("KILN_INDUCTOR_SANDBOX", "1")
    before = make_benchmark_fn_now()
    install_on(make_pool())
    assert make_benchmark_fn_now() is not before
    assert inductor_hooks.current_benchmarks() is not None


def test_kiln_inductor_sandbox_1_at_import(tmp_path: Path) -> None:
    code = (
        "import triton_kiln, triton_kiln.inductor as k, triton_kiln.inductor.hooks as r\n"
        "print(k.installed(), r.current_benchmarks() is not None)\n"
        "k.uninstall()\n"
        "from triton_kiln.pool import get_pool; get_pool().shutdown(wait=True, cancel_futures=True)\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "KILN_CACHE_DIR": str(tmp_path), "KILN_WORKERS": "1"}
    env.update(KILN_INDUCTOR="1", KILN_INDUCTOR_SANDBOX="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_gpu_template_choices_are_timed_in_the_sandbox(sandboxed: list[int], tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    first = choice("triton_mm_0", FaultyRequest("ok", 1.25, str(pid_file)))
    second = choice("triton_mm_1", FaultyRequest("ok", 0.5, str(pid_file)))
    timings = benchmark([first, second])
    assert timings == {first: 1.25, second: 0.5}
    seen = [json.loads(line) for line in pid_file.read_text().splitlines()]
    assert {s["pid"] for s in seen} == set(sandboxed)  # one sandbox process, not this one
    assert os.getpid() not in set(sandboxed)
    for one in seen:  # what Inductor's own benchmark process gets, at the time of each benchmark
        assert one["TRITON_CACHE_DIR"] == os.environ["TRITON_CACHE_DIR"]
        assert one["TORCHINDUCTOR_CACHE_DIR"] == os.environ["TORCHINDUCTOR_CACHE_DIR"]
        assert one["TORCH_WARM_POOL"] == "0"
    benchmarks = inductor_hooks.current_benchmarks()
    assert benchmarks is not None
    assert benchmarks.stats.sandboxed == 2


def test_collective_choices_keep_inductors_own_benchmarker(sandboxed: list[int]) -> None:
    picked = AlgorithmSelectorCache.make_benchmark_fn([], [], LAYOUT, None, is_collective=True)
    assert picked.func == AlgorithmSelectorCache.benchmark_in_current_process
    benchmarks = inductor_hooks.current_benchmarks()
    assert benchmarks is not None
    assert benchmarks.sandbox.calls == 0  # nothing was sent to the sandbox


@pytest.mark.parametrize("mode", sorted(REASONS))
def test_a_faulting_benchmark_skips_its_choice_only(
    mode: str, sandboxed: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kiln.inductor")
    before = choice("triton_mm_0", FaultyRequest("ok", 1.5))
    bad = choice(f"triton_mm_{mode}", FaultyRequest(mode))
    after = choice("triton_mm_2", FaultyRequest("ok", 2.5))
    timings = benchmark([before, bad, after])
    assert timings[before] == 1.5
    assert timings[after] == 2.5
    assert math.isinf(timings[bad])
    benchmarks = inductor_hooks.current_benchmarks()
    assert benchmarks is not None
    [skipped] = benchmarks.stats.skipped
    kind, text = REASONS[mode]
    assert type(skipped.failure) is kind
    assert text in str(skipped.failure)
    assert f"triton_mm_{mode}" in skipped.choice
    logged = [
        r.getMessage() for r in caplog.records if r.name == "kiln.inductor" and "skipped" in r.getMessage()
    ]
    assert len(logged) == 1
    assert f"triton_mm_{mode}" in logged[0]
    assert text in logged[0]
    replaced = mode != "raise"  # a Python error keeps the process; every other fault replaces it
    assert len(sandboxed) == (2 if replaced else 1)
    assert len(spawned_alive(sandboxed)) == 1  # the dead one is gone, its replacement serves


def test_a_real_inductor_benchmark_request_runs_in_the_sandbox(sandboxed: list[int]) -> None:
    """Inductor's own TritonGPUBenchmarkRequest for the mm template fixture crosses to the sandbox
    and runs Inductor's benchmark there: on this machine (no GPU) making its CUDA inputs fails,
    which is that choice's CallRaisedError, with Inductor's frames in its reason."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the benchmark would run (tests/test_inductor_gpu.py)")
    from torch._inductor.autotune_process import TensorMeta, TritonGPUBenchmarkRequest
    from torch._inductor.codecache import PyCodeCache

    from support.inductor_support import source

    name, text = source("template_mm")
    key, path = PyCodeCache.write(text)
    meta = TensorMeta(torch.device("cuda", 0), torch.bfloat16, (1024, 1024), (1024, 1), 0)
    request = TritonGPUBenchmarkRequest(name, [meta, meta], meta, [], path, key, num_stages=3, num_warps=4)
    mm = choice(name, request)
    timings = benchmark([mm])
    assert math.isinf(timings[mm])
    benchmarks = inductor_hooks.current_benchmarks()
    assert benchmarks is not None
    [skipped] = benchmarks.stats.skipped
    assert type(skipped.failure) is CallRaisedError
    assert "rand_strided" in str(skipped.failure)  # Inductor's benchmark made its inputs there
    assert len(sandboxed) == 1


def test_the_sandbox_reports_the_compiles_it_made_itself_and_which_key_part_differs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sandbox should only load what kiln compiled. A compile it makes itself is a key that
    differs from the parent's; it is reported once, naming the key parts that differ (on the H100
    the sandbox compiled every mm choice again, and nothing said so)."""
    from triton.backends.compiler import GPUTarget

    from support.call_sandbox_fns import add_kernel_source, compile_add_kernel
    from triton_kiln import triton_compat
    from triton_kiln.inductor.benchmarks import SandboxBenchmarks, make_sandbox
    from triton_kiln.triton_compat import inductor as compat

    env = {"TRITON_CACHE_DIR": str(tmp_path / "triton")}
    sandbox = make_sandbox(120.0)
    try:
        assert sandbox.call(compile_add_kernel, label="compile", env=env).failure is None  # a miss
        assert sandbox.call(compile_add_kernel, label="again", env=env).failure is None  # a hit
        here = triton_compat.compile_key_parts(
            add_kernel_source(), triton_compat.make_backend(GPUTarget("cuda", 90, 32)), {}
        )
        other_ptxas = {**here, "backend": "ptxas 99.9-90"}
        constants = triton_compat.constants_label(add_kernel_source().constants)  # type: ignore[attr-defined]

        def parent_parts(kernel: str, label: str | None) -> dict[str, str] | None:
            return (
                {**other_ptxas, "same_config": "yes"}
                if (kernel, label) == ("add_kernel", constants)
                else None
            )

        benchmarks = SandboxBenchmarks(sandbox, parent_parts)
        with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
            benchmarks.check_sandbox_compiles()
            benchmarks.check_sandbox_compiles()  # nothing new, and one warning at most anyway
        (compiled,) = benchmarks.stats.compiled_in_sandbox
        assert compiled["kernel"] == "add_kernel"
        assert set(triton_compat.compiling.KEY_PARTS) <= set(compiled)
        # the same source, target and ptxas: those parts equal this process's (the stage-hook part
        # may not: in the whole suite this process carries the fault tests' stage hooks)
        assert compiled["source"] == here["source"]
        assert compiled["backend"] == here["backend"]
        assert compiled["options"] == here["options"]
        warnings = [
            r.getMessage() for r in caplog.records if "compiled 1 Triton kernel(s) itself" in r.getMessage()
        ]
        assert len(warnings) == 1
        assert "differs from this process's in backend" in warnings[0]
        assert "ptxas 99.9" in warnings[0]
        assert sandbox.call(compat.compiles_here, label="none left").value == []
    finally:
        sandbox.close()


def test_the_sandbox_compile_report_never_fails_the_compile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The report is a diagnostic: a failure while making it (here the parent's key parts raise,
    as a stripped ``JITFunction`` made them raise on the H100) is one WARNING, never an error in
    Inductor's autotuning."""
    from support.call_sandbox_fns import compile_add_kernel
    from triton_kiln.inductor.benchmarks import SandboxBenchmarks, make_sandbox

    def parent_parts(kernel: str, label: str | None) -> dict[str, str] | None:
        raise TypeError("'NoneType' object does not support the context manager protocol")

    sandbox = make_sandbox(120.0)
    try:
        env = {"TRITON_CACHE_DIR": str(tmp_path / "triton")}
        assert sandbox.call(compile_add_kernel, label="compile", env=env).failure is None
        benchmarks = SandboxBenchmarks(sandbox, parent_parts)
        with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
            benchmarks.check_sandbox_compiles()  # raised TypeError before
        assert len(benchmarks.stats.compiled_in_sandbox) == 1
        assert any("compiled 1 Triton kernel(s) itself" in r.getMessage() for r in caplog.records)
    finally:
        sandbox.close()


def test_install_starts_no_benchmark_sandbox_on_a_gpu_machine(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warm process (its graphs from Inductor's caches, nothing lowered) holds no sandbox:
    it starts when a graph is lowered (template choices are timed during lowering)."""
    from triton_kiln.sandbox import registry

    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    install_on(make_pool())
    kiln_inductor.install(sandbox_benchmarks=True)
    try:
        benchmarks = inductor_hooks.current_benchmarks()
        assert benchmarks is not None
        time.sleep(0.5)
        assert benchmarks.sandbox.spawned_pids == []
        assert benchmarks.sandbox.pid is None
    finally:
        kiln_inductor.uninstall()

"""kiln.inductor on a GPU (torch 2.11 on the GPU machine): torch.compile with kiln's pool gives
stock Inductor's outputs, compiles nothing in the parent, survives a config whose compile
aborts, and max-autotune's template choices and coordinate descent go through kiln; with
``sandbox_benchmarks=True`` a template choice whose benchmark is an illegal memory access is
skipped in kiln's sandbox and the parent's CUDA context lives on.

Run: ``python -m pytest tests/test_inductor_gpu.py -q -p no:cacheprovider`` (needs a CUDA GPU)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.inductor_support import (
    install_on,  # noqa: F401 - fixture
    parent_cannot_compile,  # noqa: F401 - fixture
    refuse_compiles,
)

pytest.importorskip("torch._inductor")

import torch
import torch._dynamo
import torch._inductor.config as inductor_config
import triton
import triton.language as tl
from torch._inductor.utils import fresh_cache

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks
from support.aoti_control import Block, package_and_check
from triton_kiln import CompilePool
from triton_kiln.triton_compat import inductor as compat

pytestmark = pytest.mark.gpu

PRELOAD = "support.inductor_faults_preload"
TESTS = Path(__file__).resolve().parent


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def scale_kilnfault_abort(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Its num_warps=8 config aborts the compiler in kiln's workers (inductor_faults_preload)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


def _scaled_plus_one(x: Any) -> Any:
    """``x * 3 + 1`` through :func:`scale_kilnfault_abort` (a user-defined kernel whose 8-warp
    config aborts the compiler in kiln's workers) and one Inductor-generated kernel."""
    out = torch.empty_like(x)
    n = x.numel()
    scale_kilnfault_abort[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out + 1


@pytest.fixture
def fresh() -> Iterator[None]:
    torch._dynamo.reset()
    with fresh_cache():
        yield
    torch._dynamo.reset()


def _compile_and_run(model: Any, x: Any, **options: Any) -> Any:
    with torch.no_grad():
        return torch.compile(model, **options)(x)


def _stock(model: Any, x: Any, **options: Any) -> Any:
    torch._dynamo.reset()
    with fresh_cache():
        out = _compile_and_run(model, x, **options)
    torch._dynamo.reset()
    return out


@pytest.mark.parametrize("mode", [None, "max-autotune-no-cudagraphs"])
def test_torch_compile_through_kiln_matches_stock_and_compiles_nothing_in_the_parent(
    mode: str | None,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    fresh: None,
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = Block().cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 128, 256, device="cuda", dtype=torch.bfloat16)
    options = {"mode": mode} if mode else {}
    expected = _stock(model, x, **options)
    pool = make_pool(workers=8)
    install_on(pool)
    with fresh_cache():
        got = _compile_and_run(model, x, **options)
    torch.testing.assert_close(got, expected, atol=5e-2, rtol=5e-2)  # autotuning may pick other configs
    assert pool.stats.compiled > 0


@pytest.mark.parametrize("mode", [None, "max-autotune-no-cudagraphs"])
def test_torch_compile_through_kilns_sidecar_matches_stock(
    mode: str | None, fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``install()`` as a user calls it: each compile job's work in kiln's Inductor sidecar (on a
    real GPU driver, with its own kiln pool); the output is stock's, no job fell back to this
    process, nothing compiled here, and nothing of the sidecar is left after ``uninstall()``."""
    import psutil

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln"))
    torch.manual_seed(0)
    model = Block().cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 128, 256, device="cuda", dtype=torch.bfloat16)
    options = {"mode": mode} if mode else {}
    expected = _stock(model, x, **options)
    tried = refuse_compiles(monkeypatch)
    kiln_inductor.install()
    try:
        pool = inductor_hooks.current_pool()
        assert pool is not None
        assert pool.sidecar is not None
        # ready first: jobs that come while it imports torch (~14 s on an image without bytecode
        # caches) run in this process's threads instead, which the CPU tests cover
        pool.start_sidecar()
        deadline = time.monotonic() + 240
        while pool.sidecar.phase == "starting" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.sidecar.phase == "ready", pool.sidecar.stats
        with fresh_cache():
            got = _compile_and_run(model, x, **options)
        stats = pool.sidecar.stats
        assert stats.pid is not None
        processes = [psutil.Process(stats.pid), *psutil.Process(stats.pid).children(recursive=True)]
    finally:
        kiln_inductor.uninstall()
    torch.testing.assert_close(got, expected, atol=5e-2, rtol=5e-2)  # autotuning may pick other configs
    assert stats.jobs > 0
    assert stats.fallbacks == 0
    assert stats.died is None
    assert tried == []
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert alive == []


def test_nothing_compiles_in_the_parent_on_a_gpu(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    fresh: None,
) -> None:
    install_on(make_pool(workers=8))
    model = Block().cuda().eval()
    x = torch.randn(4, 64, 256, device="cuda")
    with inductor_config.patch(coordinate_descent_tuning=True):
        got = _compile_and_run(model, x)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), atol=1e-3, rtol=1e-3)
    assert parent_cannot_compile == []


def test_a_codegen_kernel_with_an_aborting_config_still_compiles(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    fresh: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A user-defined Triton kernel inside torch.compile whose 8-warp config aborts the compiler
    (in kiln's workers only): the graph compiles with the other config and its output is right.
    (Stock Inductor's behaviour on the same fault is for bench/inductor.py to record beside it.)"""
    install_on(make_pool(workers=4, preload=[PRELOAD]))

    x = torch.randn(1 << 20, device="cuda")
    got = torch.compile(_scaled_plus_one)(x)
    torch.testing.assert_close(got, x * 3 + 1)
    assert any("SIGABRT" in r.getMessage() for r in caplog.records)


def test_max_autotune_template_choices_that_abort_are_skipped(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    fresh: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every 8-warp mm template choice aborts the compiler (in kiln's workers only): those choices
    are skipped with kiln's reason, the others are benchmarked, and the output is right."""
    monkeypatch.setenv("KILN_TEST_INDUCTOR_ABORT_PREFIX", "triton_tem_,triton_mm")  # the workers' hook
    install_on(make_pool(workers=8, preload=[PRELOAD]))
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    with inductor_config.patch(max_autotune_gemm_backends="TRITON"):
        got = torch.compile(torch.mm, mode="max-autotune-no-cudagraphs")(a, b)
    torch.testing.assert_close(got, a @ b, atol=5e-2, rtol=5e-2)
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped
    assert all("SIGABRT" in line for line in skipped)


def test_cpp_wrapper_lazy_compile_drops_an_aborting_config(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    fresh: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``cpp_wrapper=True`` with the lazy compile (torch >= 2.12): the C++ module starts its
    kernels' compiles at load (``start_kernel_compile``, in kiln's pool), and its first run
    autotunes with the real inputs (``run_triton_kernel_with_autotune``, in this process). The
    8-warp config's abort is one skipped config; the kernel runs with the other; the output is
    right. The tests on CPU (tests/test_inductor_lazy_compile.py) call ``start_kernel_compile`` as
    the C++ code does; this one runs the C++ module."""
    lazy = compat.lazy_compile_module()
    if lazy is None:
        pytest.skip(f"torch {compat.torch_version()} has no C++-wrapper lazy compile (torch >= 2.12)")
    runs: list[str] = []
    autotune = lazy.run_triton_kernel_with_autotune

    def run_triton_kernel_with_autotune(pending: Any, name: str, *args: Any) -> Any:
        runs.append(name)
        return autotune(pending, name, *args)

    # Each C++ module looks the function up when it first loads, which comes next.
    monkeypatch.setattr(lazy, "run_triton_kernel_with_autotune", run_triton_kernel_with_autotune)
    pool = make_pool(workers=4, preload=[PRELOAD])
    install_on(pool)
    x = torch.randn(1 << 20, device="cuda")
    with inductor_config.patch({"cpp_wrapper": True, "triton.autotune_at_compile_time": False}):
        compiled = torch.compile(_scaled_plus_one)
        got = compiled(x)
        again = compiled(x)
    torch.testing.assert_close(got, x * 3 + 1)
    torch.testing.assert_close(again, x * 3 + 1)
    assert any("scale_kilnfault_abort" in name for name in runs), runs
    assert any("SIGABRT" in r.getMessage() for r in caplog.records)
    assert pool.stats.compiled > 0


FRESH_PROCESS = "KILN_TEST_IN_FRESH_PROCESS"


def in_fresh_process(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` again in a new Python process, with nothing compiled before it: the body runs
    only there (``KILN_TEST_IN_FRESH_PROCESS=1``); here, the test is that process's outcome."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        if os.environ.get(FRESH_PROCESS) == "1":
            test(*args, **kwargs)
        else:
            _in_fresh_process(test.__name__)

    return run


def _in_fresh_process(test: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", f"{__file__}::{test}"],
        env={**os.environ, FRESH_PROCESS: "1"},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if "torch.__trace" not in line]
    assert proc.returncode == 0, "\n".join(lines[-60:]) + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def stock_aoti_works(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stock AOTInductor packages, loads and runs the block kiln's tests package, in a process
    of its own (``support/aoti_control.py``); where it fails, kiln's AOTInductor tests skip with its
    outcome: their failure would be AOTInductor's or the machine's, not kiln's."""
    if os.environ.get(FRESH_PROCESS) == "1":
        return  # the parent checked before running the test here
    proc = subprocess.run(
        [sys.executable, "-m", "support.aoti_control", str(tmp_path_factory.mktemp("aoti-control"))],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.skip(
            f"stock AOTInductor, kiln not installed, fails here too (exit status {proc.returncode}: {tail}), "
            "so kiln's AOTInductor path cannot be judged on this machine"
        )


@in_fresh_process
def test_aoti_compile_and_package_drops_an_aborting_config(
    stock_aoti_works: None,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    fresh: None,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """AOTInductor compiles its Triton kernels through ``AsyncCompile.triton`` in the autotune
    block it runs at compile time: with kiln installed they compile in kiln's pool, the 8-warp
    config's abort is one skipped config, and the packaged model loads and gives the right
    output. In a process of its own: a package that fails to load can end its process (it did,
    with SIGSEGV in ``aoti_load_package``, on an H100 with torch 2.11)."""

    class Scaled(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return _scaled_plus_one(x)

    pool = make_pool(workers=4, preload=[PRELOAD])
    install_on(pool)
    x = torch.randn(1 << 20, device="cuda")
    # strict: Dynamo captures the user-defined kernel as Triton's higher-order op; non-strict
    # export runs its autotuner on fake tensors, which have no data pointer
    program = torch.export.export(Scaled(), (x,), strict=True)
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "scaled.pt2"))
    got = torch._inductor.aoti_load_package(path)(x)
    torch.testing.assert_close(got, x * 3 + 1)
    assert any("SIGABRT" in r.getMessage() for r in caplog.records)
    assert pool.stats.compiled > 0


@in_fresh_process
def test_aoti_compile_and_package_compiles_nothing_in_the_parent(
    stock_aoti_works: None,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    fresh: None,
    tmp_path: Path,
) -> None:
    """Every Triton kernel of a packaged model (codegen kernels, here) is compiled by kiln's
    workers; this process only loads the binaries it runs and packages. In a process of its own,
    as the test above."""
    install_on(make_pool(workers=8))
    package_and_check(tmp_path)  # what the stock control runs, here with kiln installed
    assert parent_cannot_compile == []


def _triton_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(("TRITON", "TORCHINDUCTOR"))}


def _ima_diagnosis(benchmarks: Any, skipped: list[Any], fault_log: Path) -> str:
    """Why no choice hit the illegal memory access: what was skipped, where the fault fired, the
    sandbox's variables against this process's, and the mm binaries in Triton's cache (two of a
    choice: the sandbox compiled it again rather than load kiln's)."""
    sandbox_env = benchmarks.sandbox.call(_triton_env, label="environment").value
    here = _triton_env()
    differ = {
        k: (here.get(k), (sandbox_env or {}).get(k))
        for k in set(here) | set(sandbox_env or {})
        if here.get(k) != (sandbox_env or {}).get(k)
    }
    cache = Path(os.environ.get("TRITON_CACHE_DIR", "/nonexistent"))
    cubins = sorted(p.name for p in cache.glob("*/triton_*mm*.cubin")) if cache.is_dir() else []
    return (
        f"skipped={[(one.choice, str(one.failure)[:200]) for one in skipped]}; "
        f"stats={benchmarks.stats.sandboxed} sandboxed; fault log={fault_log.read_text()[:600]}; "
        f"env differs (here, sandbox)={differ}; TRITON_CACHE_DIR={cache}: {len(cubins)} mm cubins; "
        f"the sandbox's own compiles: {len(benchmarks.stats.compiled_in_sandbox)}, the first's key "
        f"parts {benchmarks.stats.compiled_in_sandbox[:1]}"
    )


@in_fresh_process
def test_max_autotune_choice_with_an_illegal_memory_access_is_skipped_in_the_sandbox(
    make_pool: Callable[..., CompilePool],
    fresh: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """The mm template choice with num_warps=2, num_stages=1 (BLOCK 32x32x16) is compiled by kiln's
    workers with a store to address 0 added to its PTX (bench/inductor_fault_hook's ``ima``): its
    benchmark is a real illegal memory access, in kiln's sandbox. That choice is skipped with
    kiln's reason, the sandbox replaced, the other choices timed; the model compiles, its output
    is right, and this process's CUDA context is alive (a second call, a fresh kernel).

    It runs in a process of its own, as a model's process is and as ``bench/inductor_faults.py``
    runs it: in a process whose other tests compiled the same 1024^2 mm choices with stock
    Inductor first, the sandbox compiles the choices again (62 mm binaries in the fresh Triton
    cache for 20 choices, the sandbox's ``TRITON_*`` variables the same) and so never runs kiln's
    faulted binary (docs/INDUCTOR.md, "Limits"; the ptxas-version part is
    test_inductor.py::test_install_after_a_compile_keys_binaries_as_a_fresh_process_does)."""
    fault_log = tmp_path / "fault.log"
    monkeypatch.setenv("BENCH_FAULT", "ima")  # read by the workers' preloaded hook
    monkeypatch.setenv("BENCH_FAULT_NAMES", "triton_mm,triton_tem_")  # 2.11, 2.13 names
    monkeypatch.setenv("BENCH_FAULT_WARPS", "2")
    monkeypatch.setenv("BENCH_FAULT_STAGES", "1")
    monkeypatch.setenv("BENCH_FAULT_LOG", str(fault_log))
    pool = make_pool(workers=8, preload=[PRELOAD])
    monkeypatch.setattr(inductor_hooks, "_kiln_pool", lambda: pool)
    kiln_inductor.install(sandbox_benchmarks=True, sidecar=False)  # the hook is in this test's pool
    try:
        a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
        with inductor_config.patch(max_autotune_gemm_backends="TRITON"):
            compiled = torch.compile(torch.mm, mode="max-autotune-no-cudagraphs")
            got = compiled(a, b)
        torch.cuda.synchronize()
        torch.testing.assert_close(got, a @ b, atol=5e-2, rtol=5e-2)
        assert fault_log.exists(), "the fault never fired: no mm choice had num_warps=2, num_stages=1"
        benchmarks = inductor_hooks.current_benchmarks()
        assert benchmarks is not None
        skipped = benchmarks.stats.skipped
        assert skipped, "the illegal memory access was compiled in, but no choice was skipped"
        # Only the faulted choice hits the illegal memory access. Other choices may be skipped for
        # their own reasons, as stock Inductor skips them (on torch 2.11 a 1024^2 mm has a choice
        # that needs more shared memory than the H100 has: "out of resource", raised, not sticky).
        sticky = [one for one in skipped if "sticky CUDA error" in str(one.failure)]
        assert len(sticky) == 1, _ima_diagnosis(benchmarks, skipped, fault_log)
        assert "num_stages=1" in sticky[0].choice
        assert "num_warps=2" in sticky[0].choice
        assert "illegal memory access" in str(sticky[0].failure)
        for other in skipped:
            if other is not sticky[0]:
                assert "illegal memory access" not in str(other.failure)
        assert benchmarks.sandbox.restarts >= 1
        assert benchmarks.stats.sandboxed > len(skipped)  # the other choices were timed
        logged = [r.getMessage() for r in caplog.records if r.name == "kiln.inductor"]
        assert any("skipped (time inf)" in line for line in logged)
        again = compiled(a, b)  # this process's CUDA context never ran the bad kernel
        torch.cuda.synchronize()
        torch.testing.assert_close(again, a @ b, atol=5e-2, rtol=5e-2)
        assert float((torch.ones(8, device="cuda") * 2).sum()) == 16.0
    finally:
        kiln_inductor.uninstall()

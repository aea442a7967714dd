"""Plain ``@triton.jit`` kernels (not autotuned) compile in kiln's pool under ``kiln.install()``
(kiln.jit_routing): real compiles for sm_90, the GPU driver's target the only fake; the caller's
own compile made to raise; real compiler faults (abort, segfault) in the pool's workers; the
pool's processes counted after each test (make_pool). That nothing compiles in the caller is
checked on both backends (``backend``): on a GPU, with Triton's own driver and real launches."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError

import triton_kiln as kiln
from support import jit_fault_kernels, kernels
from support.basics import ast_race_once
from support.jit_support import (
    caller_cannot_compile,  # noqa: F401 - fixture
    cubin_sha,
    fake_driver,  # noqa: F401 - autouse fixture
    route_on,  # noqa: F401 - fixture
)
from triton_kiln import CompilePool, CompileTimeoutError, procs, settings
from triton_kiln.routing import jit as jit_routing
from triton_kiln.routing.jit import JitCompileCrashedError
from triton_kiln.triton_compat import jit_hook

torch = pytest.importorskip("torch")  # warmup() takes torch dtypes for pointer arguments

F32 = torch.float32
SIGNAL = {"abort": "SIGABRT", "segv": "SIGSEGV"}


def warm_add(block: int = 128, num_warps: int = 4) -> object:
    """``add_kernel``'s compile for one specialization, as a first call makes it (no launch)."""
    return kernels.add_kernel.warmup(F32, F32, F32, 1024, BLOCK=block, num_warps=num_warps, grid=(1,))


@pytest.fixture(autouse=True)
def fresh_jit_caches() -> None:
    kernels.add_kernel.device_caches.clear()  # the in-memory cache of earlier tests' compiles


def tritons_own_cubin(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> str:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path) + "/own-triton-cache")
    sha = cubin_sha(warm_add())
    kernels.add_kernel.device_caches.clear()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path) + "/triton-cache")
    return sha


def test_a_plain_jit_kernel_compiles_in_the_pool_to_tritons_own_binary(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: object,
) -> None:
    own = tritons_own_cubin(monkeypatch, tmp_path)
    pool = make_pool()
    route_on(pool)
    tried: list[str] = []

    def refuse(self: object, *args: object, **kwargs: object) -> object:
        tried.append(str(getattr(self, "name", self)))
        raise AssertionError("compiled in the calling process")

    import triton.compiler.compiler as triton_compiler

    monkeypatch.setattr(triton_compiler.ASTSource, "make_ir", refuse)
    kernel = warm_add()
    assert tried == []  # nothing compiled in this process
    assert pool.stats.compiled == 1
    assert cubin_sha(kernel) == own
    assert kernel.hash is not None


def test_a_gluon_kernel_compiles_in_the_pool_to_tritons_own_binary(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: object,
) -> None:
    """A ``@gluon.jit`` kernel (``GluonJITFunction``, a subclass) compiles from Gluon's own AST
    source in the pool: the same binary as Gluon's own compile here."""
    pytest.importorskip("triton.experimental.gluon")
    from support import gluon_kernels

    def warm() -> object:
        return gluon_kernels.gluon_add.warmup(F32, F32, F32, 1024, BLOCK=256, grid=(1,))

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path) + "/own-triton-cache")
    own = cubin_sha(warm())
    gluon_kernels.gluon_add.device_caches.clear()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path) + "/triton-cache")
    pool = make_pool()
    route_on(pool)
    kernel = warm()
    assert pool.stats.compiled == 1
    assert cubin_sha(kernel) == own


def launch_add(block: int, num_warps: int) -> None:
    """``add_kernel`` launched on the GPU by Triton, its result checked."""
    n = 5000
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    kernels.add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block, num_warps=num_warps)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + y)  # add_kernel: double(x) + y


@pytest.mark.timeout(600)
def test_nothing_compiles_in_the_caller(
    backend: str,
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    caller_cannot_compile: list[str],  # noqa: F811
) -> None:
    """A plain ``@triton.jit`` kernel's first calls after install compile in kiln's pool, never in
    the caller: on CPU the compile a first call makes (``warmup``), on a GPU real launches by
    Triton whose results are right."""
    pool = make_pool()
    route_on(pool)
    for block, warps in ((64, 2), (256, 8)):
        if backend == "cpu":
            warm_add(block, warps)
        else:
            launch_add(block, warps)
    assert caller_cannot_compile == []
    assert pool.stats.submitted >= 2


@pytest.mark.parametrize("variable", procs.CHILD_FD_VARIABLES)
def test_kilns_own_processes_compile_plain_jit_themselves(
    variable: str,
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In kiln's own interpreters (a zygote, a worker, any of the sandboxes, the Inductor sidecar
    before it has read its pipe) a plain kernel compiles where it is called, never in a pool of
    their own: the call sandbox once routed them (its variable was missing from the list)."""
    pool = make_pool()
    route_on(pool)
    warm_add(64, 2)
    assert pool.stats.compiled == 1  # routed in the caller
    monkeypatch.setenv(variable, "999")  # what kiln sets in its child processes
    warm_add(256, 8)
    assert pool.stats.compiled == 1  # compiled by Triton in this process


def test_threads_compiling_the_same_kernel_share_one_compile(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    caller_cannot_compile: list[str],  # noqa: F811
) -> None:
    pool = make_pool()
    route_on(pool)
    with ThreadPoolExecutor(4) as threads:
        got = list(threads.map(lambda _: cubin_sha(warm_add(block=512)), range(4)))
    assert len(set(got)) == 1
    assert caller_cannot_compile == []
    assert pool.stats.compiled == 1  # the others were served by the in-flight compile or its result


def test_a_compile_triton_already_cached_is_not_dispatched(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    warm_add()  # Triton's own compile (not routed yet): Triton's disk cache has it
    kernels.add_kernel.device_caches.clear()
    pool = make_pool()
    route_on(pool)
    warm_add()
    assert pool.stats.submitted == 0
    warm_add(block=64)  # not in Triton's cache: this one goes to the pool
    assert pool.stats.submitted == 1


@pytest.mark.parametrize("mode", ["abort", "segv"])
def test_a_compiler_crash_raises_kilns_error_and_the_caller_survives(
    mode: str,
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    pool = make_pool(workers=2, preload=["support.inductor_faults_preload"])
    route_on(pool)
    kernel = getattr(jit_fault_kernels, f"copy_kilnfault_{mode}")
    with pytest.raises(JitCompileCrashedError) as caught:
        kernel.warmup(F32, F32, 1024, BLOCK=128, num_warps=8, grid=(1,))
    assert f"copy_kilnfault_{mode}" in str(caught.value)
    assert SIGNAL[mode] in str(caught.value)
    assert caught.value.source_file.endswith("jit_fault_kernels.py")
    # this process is alive, and the pool still compiles
    assert kernel.warmup(F32, F32, 1024, BLOCK=128, num_warps=4, grid=(1,)) is not None
    assert os.getpid() > 0


def test_a_compiler_hang_raises_kilns_timeout_error(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    route_on(make_pool(workers=2, preload=["support.inductor_faults_preload"], job_timeout_s=6.0))
    with pytest.raises(JitCompileCrashedError) as caught:
        jit_fault_kernels.copy_kilnfault_hang.warmup(F32, F32, 1024, BLOCK=128, num_warps=8, grid=(1,))
    assert "copy_kilnfault_hang" in str(caught.value)
    assert "timed out" in str(caught.value)
    assert isinstance(caught.value.__cause__, CompileTimeoutError)


def test_a_kernels_compile_error_is_tritons_own_and_not_compiled_here(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    caller_cannot_compile: list[str],  # noqa: F811
) -> None:
    pool = make_pool()
    route_on(pool)
    with pytest.raises(CompilationError, match="undefined_name"):
        jit_fault_kernels.does_not_compile.warmup(F32, BLOCK=128, grid=(1,))
    assert caller_cannot_compile == []
    assert pool.stats.submitted == 1


class Opaque:
    """A value no worker can rebuild (a parameter default of the kernel below)."""


def test_a_kernel_the_pool_cannot_ship_is_compiled_by_triton(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    @triton.jit
    def local_store(x_ptr, BLOCK: tl.constexpr, UNUSED: tl.constexpr = Opaque()):  # noqa: B008
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

    pool = make_pool()
    route_on(pool)
    with caplog.at_level(logging.DEBUG, logger="kiln.install"):
        kernel = local_store.warmup(F32, BLOCK=64, UNUSED=1, grid=(1,))
    assert kernel is not None
    assert kernel.asm["cubin"]
    assert pool.stats.dispatched == 0
    assert any("local_store is compiled by Triton in this process" in r.getMessage() for r in caplog.records)


def test_a_caller_stage_hook_leaves_the_compile_to_triton(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process that rewrites Triton's pipeline (a stage hook kiln's workers may lack) keeps
    its compiles: kiln's binary could differ from the one Triton would make here."""
    if not hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):
        pytest.skip("this Triton has no stage hook knob")
    from triton_kiln.triton_compat import install_stages_hook

    remove = install_stages_hook(lambda *args: None, "kiln-tests-jit-routing")
    pool = make_pool()
    route_on(pool)
    try:
        with caplog.at_level(logging.DEBUG, logger="kiln.install"):
            warm_add()
    finally:
        remove()
    assert pool.stats.submitted == 0
    assert any("stage hook" in r.getMessage() for r in caplog.records)


def test_install_routes_jit_and_uninstall_restores_tritons_own(monkeypatch: pytest.MonkeyPatch) -> None:
    original = jit_hook.do_compile_current()
    kiln.install()
    try:
        assert jit_routing.installed()
        assert jit_hook.do_compile_current() is not original
    finally:
        kiln.uninstall()
    assert not jit_routing.installed()
    assert jit_hook.do_compile_current() is original


def test_kiln_route_jit_0_leaves_plain_jit_to_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    original = jit_hook.do_compile_current()
    monkeypatch.setenv("KILN_ROUTE_JIT", "0")
    assert settings.current().route_jit is False
    kiln.install()
    try:
        assert not jit_routing.installed()
        assert jit_hook.do_compile_current() is original
    finally:
        kiln.uninstall()


CALLER_KEY_SCRIPT = """
import sys, torch, triton.runtime.cache as cache
from triton.runtime import driver
sys.path.insert(0, {tests!r})
from support import jit_support, kernels
from triton_kiln import CompilePool
from triton_kiln.routing import jit as jit_routing
driver._active = jit_support.FakeDriver()
tritons_own_key = cache.triton_key
pool = CompilePool(workers=1, cache_dir={cache!r})
jit_routing._pool = lambda: pool
jit_routing.install()
kernels.add_kernel.warmup(torch.float32, torch.float32, torch.float32, 1024, BLOCK=128, grid=(1,))
pool.shutdown(wait=True)
print("hashed", tritons_own_key.cache_info().currsize, "compiled", pool.stats.compiled)
"""


def test_the_caller_never_hashes_tritons_key(tmp_path: Path) -> None:
    """kiln's key file (fingerprint-checked) stands in for Triton's key in the calling process:
    hashing the compile's slot and Triton's own cache hit after it hash no libtriton.so."""
    cache = tmp_path / "kiln-cache"
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton-cache"))
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, tests, env.get("PYTHONPATH", "")])
    # once per machine (per cache directory): kiln's key file is written
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import pathlib; from triton_kiln import triton_compat; "
            f"triton_compat.triton_key(pathlib.Path({str(cache)!r}))",
        ],
        env=env,
        check=True,
        timeout=300,
    )
    script = CALLER_KEY_SCRIPT.format(tests=tests, cache=str(cache))
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hashed 0 compiled 1" in done.stdout, done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize(("route_jit", "expected"), [(None, "True"), ("0", "False")])
def test_kiln_autotune_1_at_import_routes_plain_jit(route_jit: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env["KILN_AUTOTUNE"] = "1"
    if route_jit is not None:
        env["KILN_ROUTE_JIT"] = route_jit
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    code = "import triton_kiln; from triton_kiln.routing import jit; print(jit.installed())"
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == expected


def test_cpythons_ast_race_while_describing_the_compile_is_retried_not_left_to_triton(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    caller_cannot_compile: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPython 3.11's AST constructor can raise a spurious ``SystemError`` when threads parse at
    once (seen under Inductor's compile threads); described again, the compile still goes to
    the pool instead of to Triton in this process, where a compiler crash kills it."""
    racing, raced = ast_race_once(jit_routing.compat.jit_compile_inputs)
    monkeypatch.setattr(jit_routing.compat, "jit_compile_inputs", racing)
    pool = make_pool()
    route_on(pool)
    kernel = warm_add()
    assert raced == [1]
    assert kernel is not None
    assert caller_cannot_compile == []
    assert pool.stats.compiled == 1

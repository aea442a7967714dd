"""Gluon kernels through the pool: real ``@gluon.jit`` kernels compiled for sm_90, valid and faulty.

A Gluon kernel must reach Triton as a ``GluonASTSource`` (rebuilt with ``gluon.jit`` in the
worker, its ``constexpr_function`` helpers with ``constexpr_function``), produce the same
cubin as Triton's own direct compile, never share a key with a Triton kernel of the same source,
and a compiler crash while compiling one must fail only its own job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import triton
from triton.experimental import gluon as triton_gluon
from triton.experimental.gluon._runtime import GluonASTSource

from support import faults, gluon_kernels
from support.basics import SM90, is_cubin, pool_processes
from triton_kiln import CompileRequest, KernelSpecError, WorkerCrashedError
from triton_kiln.compile import gluon
from triton_kiln.compile.kernel_spec import KernelSpec

ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
SCALE_SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def add_request(block: int) -> CompileRequest:
    return CompileRequest(gluon_kernels.gluon_add, ADD_SIG, {"BLOCK": block}, {"num_warps": 4}, SM90)


def scale_request(per_thread: int) -> CompileRequest:
    return CompileRequest(
        gluon_kernels.gluon_scale, SCALE_SIG, {"PER_THREAD": per_thread}, {"num_warps": 4}, SM90
    )


def direct_compile(kernel: Any, signature: dict[str, str], constexprs: dict[str, Any], cache: Path) -> Any:
    """Triton's own compile of a Gluon kernel, in this process, on a Triton cache of its own
    (so the pool's workers cannot answer it from a shared Triton cache entry)."""
    full = dict(signature, **dict.fromkeys(constexprs, "constexpr"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(cache))
        return triton.compile(GluonASTSource(kernel, full, constexprs), target=SM90, options={"num_warps": 4})


def test_languages_are_recognised() -> None:
    assert gluon.language_of(gluon_kernels.gluon_add) == gluon.GLUON
    assert gluon.language_of(gluon_kernels.block_for) == gluon.CONSTEXPR_FUNCTION
    assert gluon.language_of(triton.jit(gluon_kernels.add_source)) == gluon.TRITON
    spec = scale_request(2).spec
    assert spec.language == gluon.GLUON
    helper = dict(spec.globals)["block_for"]
    assert helper[0] == "jit"
    assert helper[1].language == gluon.CONSTEXPR_FUNCTION


@pytest.mark.timeout(120)
def test_gluon_kernel_compiles_through_the_pool_to_tritons_own_binary(make_pool: Any, tmp_path: Path) -> None:
    pool = make_pool(workers=2)
    requests = [add_request(256), add_request(512), scale_request(2)]
    assert all(r.spec.by_source for r in requests)  # rebuilt in the worker, not imported
    artifacts = pool.compile_many(requests, progress=False)
    direct_cache = tmp_path / "direct-triton-cache"
    expected = [
        direct_compile(gluon_kernels.gluon_add, ADD_SIG, {"BLOCK": 256}, direct_cache),
        direct_compile(gluon_kernels.gluon_add, ADD_SIG, {"BLOCK": 512}, direct_cache),
        direct_compile(gluon_kernels.gluon_scale, SCALE_SIG, {"PER_THREAD": 2}, direct_cache),
    ]
    for artifact, direct in zip(artifacts, expected, strict=True):
        assert not isinstance(artifact, BaseException), artifact
        assert is_cubin(artifact.binary)
        assert artifact.name == direct.name
        assert artifact.binary == direct.asm["cubin"]
        assert "ttgir" in artifact.asm  # Gluon's pipeline starts at ttgir, with its own layouts
        assert "#ttg.blocked" in artifact.asm["ttgir"]
    # The artifact loads back as Triton's launchable CompiledKernel, as a Triton kernel's does.
    kernel = pool.load_kernel(add_request(256))
    assert isinstance(kernel, triton.compiler.CompiledKernel)
    assert kernel.asm["cubin"] == expected[0].asm["cubin"]
    assert kernel.metadata.num_warps == 4


def test_gluon_and_triton_kernels_of_the_same_source_never_share_a_key() -> None:
    as_triton = triton.jit(gluon_kernels.add_source)
    as_gluon = triton_gluon.jit(gluon_kernels.add_source)
    spec_t, spec_g = KernelSpec.of(as_triton), KernelSpec.of(as_gluon)
    assert (spec_t.src, spec_t.name, spec_t.first_line, spec_t.globals) == (
        spec_g.src,
        spec_g.name,
        spec_g.first_line,
        spec_g.globals,
    )
    assert spec_t.identity != spec_g.identity
    key_t = CompileRequest(as_triton, ADD_SIG, {"BLOCK": 128}, {"num_warps": 4}, SM90).key
    key_g = CompileRequest(as_gluon, ADD_SIG, {"BLOCK": 128}, {"num_warps": 4}, SM90).key
    assert key_t != key_g
    assert CompileRequest(as_gluon, ADD_SIG, {"BLOCK": 128}, {"num_warps": 4}, SM90).key == key_g


def test_rebuilt_gluon_kernel_is_gluon() -> None:
    spec = scale_request(4).spec
    rebuilt = spec.load()  # what a worker does: by source, since every global is data
    assert gluon.language_of(rebuilt) == gluon.GLUON
    assert rebuilt is not gluon_kernels.gluon_scale  # rebuilt from source, not imported
    assert gluon.language_of(rebuilt.__globals__["block_for"]) == gluon.CONSTEXPR_FUNCTION


def test_a_constexpr_function_is_not_a_kernel() -> None:
    source = triton.compiler.ASTSource(
        gluon_kernels.gluon_add, dict(ADD_SIG, BLOCK="constexpr"), {"BLOCK": 128}
    )
    assert isinstance(gluon.language_source(source, gluon_kernels.gluon_add), GluonASTSource)
    plain = triton.jit(gluon_kernels.add_source)
    assert gluon.language_source(source, plain) is source
    with pytest.raises(KernelSpecError, match=r"only @triton\.jit and @gluon\.jit functions"):
        gluon.language_source(source, gluon_kernels.block_for)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["abort", "segv"])
def test_gluon_compiler_fault_fails_only_its_job(make_pool: Any, mode: str) -> None:
    workers = 2
    pool = make_pool(workers=workers, preload=["support.faults"])
    bad_kernel = getattr(gluon_kernels, f"fault_{mode}")
    bad = CompileRequest(bad_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 128}, {"num_warps": 4}, SM90)
    good = [add_request(128), add_request(256), scale_request(1), scale_request(2)]
    futures = [pool.submit(r) for r in good[:2]] + [pool.submit(bad)] + [pool.submit(r) for r in good[2:]]
    bad_future = futures.pop(2)
    exc = bad_future.exception(timeout=60)
    assert isinstance(exc, WorkerCrashedError), repr(exc)
    signame = "SIGABRT" if mode == "abort" else "SIGSEGV"
    assert exc.signal_name == signame
    assert f"fault_{mode}" in str(exc)
    if mode == "abort":
        assert faults.ASSERTION_TEXT in str(exc)  # the compiler's last words reach the caller
    for future in futures:
        artifact = future.result(timeout=60)
        assert is_cubin(artifact.binary)
        assert artifact.name in ("gluon_add", "gluon_scale")
    after = pool.compile(add_request(1024), timeout_s=60)  # the pool goes on
    assert is_cubin(after.binary)
    assert pool.stats.worker_deaths >= 1
    # No leftover process: the dead worker is gone, only the zygote and live workers remain.
    left = pool_processes(pool.pool_id)
    assert len(left) <= workers + 1, [(p.pid, p.name()) for p in left]
    # (the make_pool fixture checks that nothing at all is left after shutdown)


@pytest.mark.timeout(120)
def test_triton_kernel_rebuilt_by_source_is_tritons_own_binary_too(make_pool: Any, tmp_path: Path) -> None:
    """The rebuild keeps file name and line numbers (Triton writes both into the line info)."""
    from support import kernels

    request = CompileRequest(kernels.add_kernel, ADD_SIG, {"BLOCK": 128}, {"num_warps": 4}, SM90)
    assert request.spec.by_source
    artifact = make_pool(workers=1).compile(request)
    signature = dict(ADD_SIG, BLOCK="constexpr")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path / "direct-triton-cache"))
        source = triton.compiler.ASTSource(kernels.add_kernel, signature, {"BLOCK": 128})
        direct = triton.compile(source, target=SM90, options={"num_warps": 4})
    assert artifact.binary == direct.asm["cubin"]
    assert "kernels.py" in artifact.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_gluon_binary_from_the_pool_runs_on_the_gpu(make_pool: Any) -> None:
    torch = pytest.importorskip("torch")
    from triton_kiln.triton_compat import local_target

    target = local_target()
    assert target is not None
    if target.backend != "cuda" or int(target.arch) < 80:
        pytest.skip(f"the Gluon test kernels are written for NVIDIA sm_80+, this GPU is {target}")
    block = 512
    request = CompileRequest(gluon_kernels.gluon_add, ADD_SIG, {"BLOCK": block}, {"num_warps": 4}, target)
    kernel = make_pool(workers=1).load_kernel(request)
    n = 100_003
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    # Triton's launcher takes every argument, constexprs included (it ignores their values).
    kernel[(triton.cdiv(n, block), 1, 1)](x, y, out, n, block)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)

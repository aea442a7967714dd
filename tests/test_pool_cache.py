"""The pool's caches and API: de-duplication, memory and disk hits, batches, shutdown,
per-job Triton environment, and kernels that travel by source (``__main__``, closures).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.compiler.compiler
import triton.language as tl
from triton.compiler.errors import CompilationError

from support import kernels
from support.basics import SM90, add_request, is_cubin, pool_processes, wait_no_processes
from triton_kiln import (
    CompiledArtifact,
    CompilePool,
    CompileRequest,
    KernelSpecError,
    PoolClosedError,
)

TESTS_DIR = Path(__file__).parent


def mm_request(block_k: int = 32) -> CompileRequest:
    sig = {n: "i32" for n in kernels.matmul_kernel.arg_names if not n.startswith("BLOCK")}
    sig.update(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16")
    return CompileRequest(
        kernels.matmul_kernel,
        sig,
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": block_k},
        options={"num_warps": 4, "num_stages": 3},
        target=SM90,
    )


def broken_request() -> CompileRequest:
    return CompileRequest(kernels.broken_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90)


# ---------------------------------------------------------------------------- de-duplication, caches


@pytest.mark.timeout(60)
def test_in_flight_duplicates_share_one_future(make_pool: Any) -> None:
    pool = make_pool(workers=1)
    first = pool.submit(add_request(128))
    second = pool.submit(add_request(128))  # a separately built, equal request
    assert not first.done(), "the zygote cannot be up yet: the first job must still be in flight"
    assert second is first
    assert pool.stats.deduplicated == 1
    other = pool.submit(add_request(256))
    assert other is not first
    artifact = first.result(timeout=60)
    assert is_cubin(artifact.binary)
    other.result(timeout=60)
    assert pool.stats.submitted == 3
    assert pool.stats.dispatched == 2  # the duplicate never reached a worker
    assert pool.stats.compiled == 2


@pytest.mark.timeout(60)
def test_memory_cache_hit(make_pool: Any) -> None:
    pool = make_pool(workers=1)
    artifact = pool.compile(add_request(128))
    dispatched = pool.stats.dispatched
    assert dispatched == 1
    again = pool.submit(add_request(128))
    assert again.done()  # completed before submit returned
    assert again.result() is artifact
    assert pool.stats.memory_hits == 1
    assert pool.stats.dispatched == dispatched
    assert pool.stats.disk_hits == 0


@pytest.mark.timeout(60)
def test_memory_cache_without_disk_cache(make_pool: Any, tmp_path: Path) -> None:
    pool = make_pool(workers=1, use_disk_cache=False, cache_dir=tmp_path / "nodisk")
    artifact = pool.compile(add_request(64))
    assert pool.submit(add_request(64)).result() is artifact
    assert pool.stats.memory_hits == 1
    assert not list((tmp_path / "nodisk").rglob("artifact.json"))


@pytest.mark.timeout(90)
def test_disk_cache_hit_from_new_pool(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    first = make_pool(workers=1, cache_dir=cache)
    artifact = first.compile(add_request(128))
    first.shutdown()
    second = make_pool(workers=1, cache_dir=cache)
    future = second.submit(add_request(128))
    assert future.done()
    hit = future.result()
    assert second.stats.dispatched == 0
    assert second.stats.disk_hits == 1
    assert (hit.key, hit.name, hit.binary, hit.metadata) == (
        artifact.key,
        artifact.name,
        artifact.binary,
        artifact.metadata,
    )
    # A different request on the same cache still compiles.
    assert is_cubin(second.compile(add_request(256)).binary)
    assert second.stats.dispatched == 1
    assert second.stats.disk_hits == 1


@pytest.mark.timeout(90)
def test_cache_hit_never_calls_triton_compile(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "shared-cache"
    request = add_request(128, num_warps=8)
    artifact = make_pool(workers=1, cache_dir=cache).compile(request)

    calls: list[Any] = []

    def no_compile(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError("triton.compile was called in the parent on a cache hit")

    monkeypatch.setattr(triton, "compile", no_compile)
    monkeypatch.setattr(triton.compiler, "compile", no_compile)
    monkeypatch.setattr(triton.compiler.compiler, "compile", no_compile)

    pool = make_pool(workers=1, cache_dir=cache)
    kernel = pool.load_kernel(request)
    assert not calls
    assert pool.stats.dispatched == 0
    assert pool.stats.disk_hits == 1
    assert isinstance(kernel, triton.compiler.compiler.CompiledKernel)
    assert kernel.name == "add_kernel"
    assert kernel.metadata.num_warps == 8
    assert kernel.metadata.shared == artifact.shared
    assert kernel.metadata.target.arch == 90
    assert kernel.asm["cubin"] == artifact.binary
    # The second call hits the memory cache and still compiles nothing.
    assert pool.load_kernel(request).asm["cubin"] == artifact.binary
    assert pool.stats.memory_hits == 1
    assert not calls


# ---------------------------------------------------------------------------- batches


@pytest.mark.timeout(90)
def test_compile_many_keeps_order_and_exceptions_in_place(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    requests = [add_request(512), broken_request(), add_request(64), mm_request(), add_request(512)]
    results = pool.compile_many(requests, progress=False)
    assert len(results) == len(requests)
    first, error, small, matmul, duplicate = results
    assert isinstance(first, CompiledArtifact)
    assert first.key == requests[0].key
    assert isinstance(error, CompilationError), repr(error)
    assert "undefined_name" in str(error)
    assert isinstance(small, CompiledArtifact)
    assert small.key == requests[2].key
    assert isinstance(matmul, CompiledArtifact)
    assert matmul.name == "matmul_kernel"
    assert duplicate is first
    assert all(is_cubin(r.binary) for r in (first, small, matmul))
    assert pool.stats.dispatched == 4

    with pytest.raises(CompilationError):
        pool.compile_many([add_request(64), broken_request()], return_exceptions=False, progress=False)


@pytest.mark.timeout(90)
def test_as_completed_yields_every_request(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    requests = [add_request(b) for b in (32, 64, 128)] + [broken_request(), add_request(64)]
    seen: list[CompileRequest] = []
    for request, future in pool.as_completed(requests):
        assert isinstance(future, Future)
        assert future.done()
        seen.append(request)
        if request.name == "broken_kernel":
            assert isinstance(future.exception(), CompilationError)
        else:
            assert future.result().key == request.key
    assert sorted(id(r) for r in seen) == sorted(id(r) for r in requests)
    assert pool.stats.dispatched == 4


# ---------------------------------------------------------------------------- lifecycle


@pytest.mark.timeout(60)
def test_shutdown_then_submit_raises(make_pool: Any) -> None:
    pool = make_pool(workers=1)
    assert is_cubin(pool.compile(add_request(64)).binary)
    pool.shutdown()
    assert not wait_no_processes(pool.pool_id)
    with pytest.raises(PoolClosedError):
        pool.submit(add_request(128))
    with pytest.raises(PoolClosedError):
        pool.submit(add_request(64))  # even a cached request: the pool is closed
    with pytest.raises(PoolClosedError):
        pool.compile_many([add_request(32)], progress=False)


@pytest.mark.timeout(60)
def test_context_manager(tmp_path: Path) -> None:
    with CompilePool(workers=1, cache_dir=tmp_path / "cache") as pool:
        assert is_cubin(pool.compile(add_request(64)).binary)
        assert pool_processes(pool.pool_id)
    assert not wait_no_processes(pool.pool_id)
    with pytest.raises(PoolClosedError):
        pool.submit(add_request(64))


@pytest.mark.timeout(60)
def test_context_manager_cancels_queued_jobs_on_error(tmp_path: Path) -> None:
    futures: list[Future[CompiledArtifact]] = []
    pools: list[CompilePool] = []

    def interrupted_batch() -> None:
        with CompilePool(workers=1, cache_dir=tmp_path / "cache") as pool:
            pools.append(pool)
            futures.extend(pool.submit(add_request(b)) for b in (32, 64, 128, 256))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted_batch()
    assert not wait_no_processes(pools[0].pool_id)
    assert len(futures) == 4
    assert all(f.done() for f in futures)
    # No worker was up when the block raised: the queued jobs were cancelled, not compiled.
    assert any(f.cancelled() for f in futures)
    assert all(f.cancelled() or is_cubin(f.result().binary) for f in futures)


@pytest.mark.timeout(60)
def test_shutdown_right_after_submit_finishes_queued_jobs(make_pool: Any) -> None:
    pool = make_pool(workers=1)
    futures = [pool.submit(add_request(b)) for b in (64, 128)]
    closer = threading.Thread(target=pool.shutdown, daemon=True)
    closer.start()
    closer.join(15)
    # (if it hangs, make_pool's shutdown(cancel_futures=True) ends the manager afterwards)
    assert not closer.is_alive(), "shutdown() hung with queued jobs and no worker started"
    for future in futures:
        assert is_cubin(future.result(timeout=0).binary)


@pytest.mark.timeout(30)
def test_unstarted_pool_shutdown_closes_its_pipe(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    pools = [CompilePool(workers=1, cache_dir=tmp_path / f"c{i}", start=False) for i in range(5)]
    for pool in pools:
        pool.shutdown()
    leaked = set(os.listdir("/proc/self/fd")) - before
    assert not leaked


@pytest.mark.timeout(30)
def test_unstarted_pool_dropped_without_shutdown_closes_its_fds(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    pool = CompilePool(workers=1, cache_dir=tmp_path / "c", start=False)
    assert set(os.listdir("/proc/self/fd")) - before  # its wake-up pipe and selector
    del pool
    assert not set(os.listdir("/proc/self/fd")) - before  # closed at once, no garbage collection needed


# ---------------------------------------------------------------------------- per-job Triton env


@pytest.mark.timeout(90)
def test_triton_env_change_applies_to_later_jobs(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = make_pool(workers=1)  # one worker: both jobs run in the same process
    assert pool.wait_ready(60)
    dir_a, dir_b = tmp_path / "triton-A", tmp_path / "triton-B"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(dir_a))
    assert pool.compile(add_request(128)).name == "add_kernel"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(dir_b))
    assert pool.compile(mm_request()).name == "matmul_kernel"
    in_a = sorted(p.name for p in dir_a.rglob("*.cubin"))
    in_b = sorted(p.name for p in dir_b.rglob("*.cubin"))
    assert in_a == ["add_kernel.cubin"]
    assert in_b == ["matmul_kernel.cubin"]
    assert len(pool.worker_pids()) == 1
    assert pool.stats.workers_forked == 1


# ---------------------------------------------------------------------------- kernels shipped by source

MAIN_SCRIPT = textwrap.dedent(
    """
    import sys

    import triton
    import triton.language as tl

    from triton_kiln import CompilePool, CompileRequest, GPUTarget

    FACTOR = tl.constexpr(3.5)


    @triton.jit
    def scaled(x):
        return x * FACTOR


    @triton.jit
    def main_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, scaled(tl.load(x_ptr + offs, mask=mask)), mask=mask)


    if __name__ == "__main__":
        request = CompileRequest(
            main_kernel, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 128}, target=GPUTarget("cuda", 90, 32)
        )
        assert not request.spec.importable
        with CompilePool(workers=1, cache_dir=sys.argv[1]) as pool:
            artifact = pool.compile(request, timeout_s=60)
        print("name", artifact.name)
        print("elf", artifact.binary[:4] == b"\\x7fELF" and len(artifact.binary) > 1000)
        print("factor", "0f40600000" in artifact.asm["ptx"])  # 3.5f: the global reached the worker
        print("module", request.spec.module)
    """
)


@pytest.mark.timeout(120)
def test_kernel_defined_in_main(tmp_path: Path) -> None:
    script = tmp_path / "main_kernel_script.py"
    script.write_text(MAIN_SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines == {"name": "main_kernel", "elf": "True", "factor": "True", "module": "__main__"}


def make_closure_kernel(factor: float) -> Any:
    local_factor = tl.constexpr(factor)

    @triton.jit
    def local_scale(x):
        return x * local_factor

    @triton.jit
    def closure_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, local_scale(tl.load(x_ptr + offs)))

    return closure_kernel


@pytest.mark.timeout(90)
def test_kernel_defined_in_function_compiles_by_source(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    kernels_ = [make_closure_kernel(3.5), make_closure_kernel(5.0)]
    assert "<locals>" in kernels_[0].__qualname__
    requests = [CompileRequest(k, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90) for k in kernels_]
    assert not requests[0].spec.importable
    assert requests[0].key != requests[1].key  # the closure's value is part of the key
    three_and_half, five = pool.compile_many(requests, progress=False)
    assert isinstance(three_and_half, CompiledArtifact), three_and_half
    assert isinstance(five, CompiledArtifact), five
    assert three_and_half.name == "closure_kernel"
    assert is_cubin(three_and_half.binary)
    # Each worker rebuilt the kernel with its own closure value.
    assert "0f40600000" in three_and_half.asm["ptx"]
    assert "0f40A00000" not in three_and_half.asm["ptx"]
    assert "0f40A00000" in five.asm["ptx"]


def make_locked_kernel() -> Any:
    lock = threading.Lock()

    @triton.jit
    def locked_kernel(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), lock)

    return locked_kernel


@pytest.mark.timeout(30)
def test_unshippable_global_raises_kernel_spec_error(make_pool: Any) -> None:
    pool = make_pool(workers=1, start=False)
    request = CompileRequest(make_locked_kernel(), {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90)
    kinds = dict(request.spec.globals)
    assert kinds["lock"][0] == "opaque"
    with pytest.raises(KernelSpecError) as info:
        pool.submit(request)
    text = str(info.value)
    assert "locked_kernel" in text
    assert "'lock'" in text
    assert "importable module" in text  # says how to fix it
    assert pool.stats.dispatched == 0
    assert pool.worker_pids() == []
    assert pool.zygote_pid is None


IMPORTABLE_OPAQUE = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    class Config:
        pass


    CONFIG = Config()


    @triton.jit
    def importable_opaque_kernel(x_ptr, BLOCK: tl.constexpr):
        if BLOCK < 0:  # never compiled, but the kernel does read the global
            tl.store(x_ptr, CONFIG)
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
    """
)


@pytest.mark.timeout(60)
def test_importable_kernel_with_opaque_global_travels_by_import(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control for the test above: the same kind of global is fine when the worker can
    # import the kernel's module instead of rebuilding the kernel from source.
    (tmp_path / "kiln_test_opaque_mod.py").write_text(IMPORTABLE_OPAQUE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import kiln_test_opaque_mod

    request = CompileRequest(
        kiln_test_opaque_mod.importable_opaque_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90
    )
    assert dict(request.spec.globals)["CONFIG"][0] == "opaque"
    assert request.spec.importable
    assert not request.spec.by_source
    artifact = make_pool(workers=1).compile(request, timeout_s=60)
    assert artifact.name == "importable_opaque_kernel"
    assert is_cubin(artifact.binary)

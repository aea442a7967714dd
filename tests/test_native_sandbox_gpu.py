"""The native (torch-free) sandbox on a real GPU: timings as do_bench's, outputs checked, sticky
errors fail only their config, the caller's memory is out of reach, unsupported binaries go to
the torch sandbox. Kernels are compiled through kiln's pool."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl

from triton_kiln import CompileRequest, GPUTarget
from triton_kiln.sandbox import BenchSpec
from triton_kiln.sandbox.native_client import NativeSandbox

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")
SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, FAULT: tl.constexpr, OVERRUN: tl.constexpr):
    """out = 3 x. FAULT 1: illegal address; 2: never ends; 3: wrong values (4 x).
    OVERRUN: also writes that many elements past the end of ``out``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=1.0)
    if FAULT == 1:
        tl.store(out_ptr + offsets + (1 << 40), x * 3.0, mask=offsets < n)
    elif FAULT == 2:
        acc = x
        for i in range(2_000_000_000):
            acc = acc * 1.0000001 + tl.load(x_ptr + (i % n))
        tl.store(out_ptr + offsets, acc, mask=offsets < n)
    elif FAULT == 3:
        tl.store(out_ptr + offsets, x * 4.0, mask=offsets < n)
    else:
        tl.store(out_ptr + offsets, x * 3.0, mask=offsets < n + OVERRUN)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _target() -> GPUTarget:
    major, minor = torch.cuda.get_device_capability()
    return GPUTarget("cuda", major * 10 + minor, 32)


def _compiled(
    pool: Any, block: int = 1024, fault: int = 0, overrun: int = 0, **options: Any
) -> tuple[Any, Any]:
    request = CompileRequest(
        scale_kernel,
        dict(SIGNATURE),
        {"BLOCK": block, "FAULT": fault, "OVERRUN": overrun},
        options={"num_warps": 4, **options},
        target=_target(),
    )
    return request, pool.compile(request)


def _spec(pool: Any, request: Any, artifact: Any, n: int, check: bool = True, overrun: int = 0) -> BenchSpec:
    return BenchSpec(
        key=artifact.key,
        group=pool.triton_files(artifact),
        hash=str(artifact.metadata.get("hash", artifact.key)),
        arg_names=["x_ptr", "out_ptr", "n", "BLOCK", "FAULT", "OVERRUN"],
        signature=dict(request.signature),
        constexprs=dict(request.constexprs),
        grid=(triton.cdiv(n + overrun, request.constexprs["BLOCK"]),),
        want_outputs=check,
    )


def _inputs(n: int) -> dict[str, Any]:
    x = torch.randn(n, device="cuda")
    return {"x_ptr": x, "out_ptr": torch.zeros_like(x), "n": n, "BLOCK": 0, "FAULT": 0, "OVERRUN": 0}


def test_ready_time_and_timings_match_do_bench(make_pool: Any) -> None:
    from triton_kiln.launch.native import native

    pool = make_pool(workers=2)
    native()  # kiln's C module, built once per machine (here: per test cache), not on the clock
    sandbox = NativeSandbox(device=torch.cuda.current_device(), timeout_s=60)
    sandbox.start()  # as prestart() does: it warms up while the kernel compiles
    n = 1 << 24
    request, artifact = _compiled(pool)
    args = _inputs(n)
    sandbox.set_inputs(args, [], [])
    spec = _spec(pool, request, artifact, n)
    first = sandbox.bench(spec)
    assert first.status == "ok", first
    print(f"\nnative sandbox ready {sandbox.ready_s:.3f} s after spawn; first bench: {first.sandbox}")
    assert sandbox.ready_s is not None
    assert sandbox.ready_s < 2.0
    assert first.sandbox["via"] == "native"
    assert first.sandbox["inputs"]["via_ipc"] == 2
    kernel = pool.load_kernel(request, artifact)
    grid = (triton.cdiv(n, 1024), 1, 1)

    def call() -> None:
        kernel[grid](args["x_ptr"], args["out_ptr"], n, 1024, 0, 0)

    native, reference = [], []
    for _ in range(3):
        outcome = sandbox.bench(spec)
        assert outcome.timings is not None
        native.append(outcome.timings[0])
        reference.append(triton.testing.do_bench(call, warmup=25, rep=100, quantiles=(0.5, 0.2, 0.8))[0])
    ours, theirs = statistics.median(native), statistics.median(reference)
    print(f"p50: native sandbox {ours * 1000:.1f} us, triton.testing.do_bench {theirs * 1000:.1f} us")
    assert abs(ours - theirs) <= 0.10 * theirs
    sandbox.close()


def test_outputs_are_checked_against_the_first_clean_run_and_the_users_reference(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    n = 100_003
    args = _inputs(n)
    sandbox = NativeSandbox(device=torch.cuda.current_device())
    sandbox.set_inputs(args, [], [])
    compiled = {(b, f): _compiled(pool, b, f) for b, f in ((256, 0), (1024, 0), (256, 3))}
    first = sandbox.bench(_spec(pool, *compiled[(256, 0)], n))
    assert first.check == (True, 0.0, "reference")
    assert sandbox.bench(_spec(pool, *compiled[(1024, 0)], n)).check == (True, 0.0, "")
    wrong = sandbox.bench(_spec(pool, *compiled[(256, 3)], n))
    assert wrong.status == "ok"
    assert wrong.check is not None
    assert wrong.check[0] is False
    assert wrong.check[1] > 0.1
    assert "out_ptr" in wrong.check[2]
    # the user's reference replaces the first clean run
    sandbox.set_inputs(args, [], [])
    sandbox.set_reference({"out_ptr": args["x_ptr"] * 3.0}, None)
    assert sandbox.bench(_spec(pool, *compiled[(1024, 0)], n)).check[0] is True  # type: ignore[index]
    assert sandbox.bench(_spec(pool, *compiled[(256, 3)], n)).check[0] is False  # type: ignore[index]
    assert torch.count_nonzero(args["out_ptr"]) == 0  # the caller's output was never written
    sandbox.close()


def test_illegal_address_fails_only_itself_and_a_fresh_sandbox_runs_the_next(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    n = 1 << 16
    sandbox = NativeSandbox(device=torch.cuda.current_device())
    sandbox.set_inputs(_inputs(n), [], [])
    assert sandbox.bench(_spec(pool, *_compiled(pool, 256, 0), n)).status == "ok"
    pid = sandbox.pid
    crashed = sandbox.bench(_spec(pool, *_compiled(pool, 256, 1), n))
    assert crashed.status == "bench_crashed", crashed
    assert "illegal" in (crashed.reason or "").lower()
    after = sandbox.bench(_spec(pool, *_compiled(pool, 1024, 0), n))
    assert after.status == "ok", after
    assert sandbox.pid != pid
    assert sandbox.restarts == 1
    print(f"\nfresh sandbox after the sticky error: ready {sandbox.ready_s:.3f} s, waited {after.sandbox}")
    value = torch.ones(4, device="cuda").sum().item()  # the caller's context is fine
    assert value == 4.0
    sandbox.close()


def test_a_hang_times_out_and_the_next_config_runs(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    n = 1 << 12
    sandbox = NativeSandbox(device=torch.cuda.current_device(), timeout_s=10)
    sandbox.set_inputs(_inputs(n), [], [])
    hang = sandbox.bench(_spec(pool, *_compiled(pool, 256, 2), n))
    assert hang.status == "bench_timeout", hang
    assert sandbox.bench(_spec(pool, *_compiled(pool, 256, 0), n)).status == "ok"
    sandbox.close()


def test_out_of_bounds_writes_never_reach_the_callers_memory(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    n = 1 << 16
    overrun = 1 << 14
    # One caller allocation holds x, out and guard bytes on both sides of out: with shared
    # memory the overrun would land in the guard (and in x, if the kernel ran on the caller's).
    arena = torch.zeros(4 * n + overrun, device="cuda")
    arena[:n] = torch.randn(n, device="cuda")
    before = arena.clone()
    x, out = arena[:n], arena[2 * n : 3 * n]
    sandbox = NativeSandbox(device=torch.cuda.current_device())
    sandbox.set_inputs({"x_ptr": x, "out_ptr": out, "n": n, "BLOCK": 0, "FAULT": 0, "OVERRUN": 0}, [], [])
    request, artifact = _compiled(pool, 1024, 0, overrun)
    outcome = sandbox.bench(_spec(pool, request, artifact, n, overrun=overrun))
    assert outcome.sandbox.get("inputs", {}).get("via_ipc") == 2, outcome
    # it may run (the overrun lands in the sandbox's own memory) or fault; either way:
    assert outcome.status in ("ok", "bench_crashed"), outcome
    torch.cuda.synchronize()
    assert torch.equal(arena, before)


def test_binaries_kilns_launcher_cannot_run_go_to_the_torch_sandbox(make_pool: Any) -> None:
    """A num_ctas=2 binary (thread-block clusters) runs in the torch sandbox, checked against
    the reference the native sandbox settled on."""
    pool = make_pool(workers=2)
    n = 100_003
    sandbox = NativeSandbox(device=torch.cuda.current_device())
    sandbox.set_inputs(_inputs(n), [], [])
    assert sandbox.bench(_spec(pool, *_compiled(pool, 256, 0), n)).check == (True, 0.0, "reference")
    clustered = sandbox.bench(_spec(pool, *_compiled(pool, 1024, 0, num_ctas=2), n))
    assert clustered.status == "ok", clustered
    assert clustered.sandbox["via"] == "torch"
    assert "cluster" in clustered.sandbox["why"]
    assert clustered.check is not None
    assert clustered.check[0] is True
    wrong = sandbox.bench(_spec(pool, *_compiled(pool, 1024, 3, num_ctas=2), n))
    assert wrong.check is not None
    assert wrong.check[0] is False  # compared with the native sandbox's reference
    assert sandbox.torch_sandbox is not None
    sandbox.close()


def test_the_runs_input_copies_are_freed_when_it_ends_and_its_peak_reported(make_pool: Any) -> None:
    """release_inputs(): the sandbox frees its copies of the inputs (working and pristine) and
    says what it held at most; the process stays, and the next run's inputs work."""
    from triton_kiln.sandbox.native_worker import FLUSH_BYTES

    pool = make_pool(workers=2)
    sandbox = NativeSandbox(device=torch.cuda.current_device(), timeout_s=60)
    n = 1 << 24  # 64 MiB per fp32 tensor: two tensors, two copies each
    request, artifact = _compiled(pool)
    try:
        sandbox.set_inputs(_inputs(n), [], [])
        assert sandbox.bench(_spec(pool, request, artifact, n)).status == "ok"
        pid = sandbox.pid
        memory = sandbox.release_inputs()
        assert memory is not None
        assert memory["peak_bytes"] >= FLUSH_BYTES + 4 * n * 4
        assert memory["held_bytes"] == FLUSH_BYTES
        assert sandbox.release_inputs() is None  # nothing held any more
        sandbox.set_inputs(_inputs(n), [], [])  # the next run
        assert sandbox.bench(_spec(pool, request, artifact, n)).status == "ok"
        assert sandbox.pid == pid  # the same process: only its memory was given back
    finally:
        sandbox.close()

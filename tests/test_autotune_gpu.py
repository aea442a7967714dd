"""kiln.autotune on a real GPU: correct results, a fault suite, specialization correctness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _own_tuning_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _caller_context_works() -> None:
    value = torch.ones(4, device="cuda").sum().item()
    assert value == 4.0


def _add_call(tuned: Any, n: int = 1_000_003) -> Any:
    """A call of ``tuned`` (``support.kernels.add_kernel``): each launches it on the same inputs
    into an output of NaN, waits for it and checks ``2 * x + y``."""
    import triton

    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def call() -> None:
        out.fill_(float("nan"))
        tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, 2 * x + y)

    return call


@pytest.mark.parametrize("sandbox", [True, False])
def test_tunes_and_runs_correctly(make_pool: Any, sandbox: bool) -> None:
    import triton_kiln as kiln
    from support import kernels

    pool = make_pool(workers=4)
    configs = [kiln.Config({"BLOCK": b}, num_warps=w) for b in (128, 512, 1024) for w in (2, 4)]
    tuned = kiln.autotune(configs, key=["n"], pool=pool, sandbox=sandbox)(kernels.add_kernel)
    call = _add_call(tuned)
    call()
    run = tuned.last_run
    assert run is not None
    assert [r.status for r in run.results] == ["ok"] * len(configs)
    assert all(r.runtime_ms and r.runtime_ms > 0 for r in run.results)
    assert tuned.best_config in configs
    assert len(tuned.configs_timings) == len(configs)
    # The second call with the same key runs the tuned binary without tuning again.
    call()
    _caller_context_works()


def test_fault_suite_picks_the_best_healthy_config(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """IMA, a kernel that never ends, wrong values and a compiler abort, in one tuning run."""
    import triton

    import triton_kiln as kiln
    from support import faults

    monkeypatch.setenv("KILN_BENCH_TIMEOUT_S", "15")
    pool = make_pool(workers=4, preload=["support.faults"])
    configs = [kiln.Config({"BLOCK": 256, "FAULT": f}, num_warps=4) for f in (1, 2, 3, 4)]
    configs += [kiln.Config({"BLOCK": b, "FAULT": 0}, num_warps=4) for b in (128, 1024)]
    tuned = kiln.autotune(
        configs, key=["n"], pool=pool, reference=lambda args: args["out_ptr"].copy_(args["x_ptr"] * 3.0)
    )(faults.faulty_scale)
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * 3.0)
    assert tuned.best_config.kwargs["FAULT"] == 0
    status = {
        r.config["kwargs"]["FAULT"] * 10000 + r.config["kwargs"]["BLOCK"]: r for r in tuned.last_run.results
    }
    ima, hang, wrong, abort = (status[f * 10000 + 256] for f in (1, 2, 3, 4))
    assert ima.status == "bench_crashed", ima
    assert "illegal" in (ima.reason or "").lower()
    assert hang.status == "bench_timeout", hang
    assert wrong.status == "wrong_output", wrong
    assert wrong.max_abs_diff is not None
    assert wrong.max_abs_diff > 0.1
    assert abort.status == "crashed", abort
    assert "SIGABRT" in (abort.reason or "")
    assert status[128].status == "ok"
    assert status[1024].status == "ok"
    _caller_context_works()


def test_constexpr_variants_in_alternation_never_cross(make_pool: Any) -> None:
    """One kernel, a dynamic bound N, block sizes derived from the shape: no IMA, no mix-ups."""
    import triton

    from support import kernels
    from triton_kiln import CompileRequest

    pool = make_pool(workers=4)
    sizes = [1, 17, 1000, 4097, 65_537, 1_000_003]
    variants = {}
    for n in sizes:
        block = max(16, min(1024, triton.next_power_of_2(n)))
        request = CompileRequest(
            kernels.add_kernel,
            {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
            {"BLOCK": block},
            options={"num_warps": 4 if block < 1024 else 8},
        )
        variants[n] = (pool.load_kernel(request), block)
    tensors = {n: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")) for n in sizes}
    for _ in range(50):
        for n in sizes:
            kernel, block = variants[n]
            x, y = tensors[n]
            out = torch.full_like(x, float("nan"))
            kernel[(triton.cdiv(n, block), 1, 1)](x, y, out, n, block)
            torch.testing.assert_close(out, 2 * x + y)
    torch.cuda.synchronize()
    _caller_context_works()


def test_tuned_keys_alternate_correctly(make_pool: Any) -> None:
    import triton

    import triton_kiln as kiln
    from support import kernels

    pool = make_pool(workers=4)
    configs = [kiln.Config({"BLOCK": b}, num_warps=4) for b in (64, 256, 1024)]
    tuned = kiln.autotune(configs, key=["n"], pool=pool)(kernels.add_kernel)
    sizes = [33, 4096, 100_001]
    data = {n: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")) for n in sizes}
    for _ in range(20):
        for n in sizes:
            x, y = data[n]
            out = torch.full_like(x, float("nan"))
            tuned[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
            torch.testing.assert_close(out, 2 * x + y)
    assert len(tuned.cache) == len(sizes)
    _caller_context_works()


def test_the_sandbox_gives_back_its_gpu_memory_once_idle_and_restarts(make_pool: Any) -> None:
    """After a run the sandbox frees the run's inputs (the peak is in the run, for ``kiln
    report``), and after KILN_IDLE_S its process and CUDA context go; the next tuning starts a
    fresh one and tunes correctly."""
    import time

    import triton

    import triton_kiln as kiln
    from support import kernels
    from triton_kiln import settings
    from triton_kiln.sandbox import registry

    pool = make_pool(workers=4)
    configs = [kiln.Config({"BLOCK": b}, num_warps=4) for b in (128, 512, 1024)]
    with settings.scope(idle_s=1.0):
        tuned = kiln.autotune(configs, key=["n"], pool=pool, sandbox=True)(kernels.add_kernel)

    def call(n: int) -> None:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.full_like(x, float("nan"))
        tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        torch.testing.assert_close(out, 2 * x + y)

    call(1 << 22)
    run = tuned.last_run
    assert run.gpu_peak_bytes is not None
    assert run.gpu_peak_bytes >= 3 * 2 * (4 << 22)  # three tensors, working and pristine copies
    sandbox = registry.shared(torch.cuda.current_device())
    first_pid = sandbox.pid
    assert first_pid is not None
    deadline = time.monotonic() + 30
    while sandbox.pid is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox.pid is None, "the sandbox outlived KILN_IDLE_S"
    call((1 << 22) + 1)  # a new key: tunes again, in a fresh sandbox
    assert tuned.last_run.best_label is not None
    assert all(r.status == "ok" for r in tuned.last_run.results)
    _caller_context_works()


def test_a_kernel_with_a_config_pre_hook_is_screened_and_raced_in_process(make_pool: Any) -> None:
    """A config's ``pre_hook`` (Liger's SwiGLU matmul sets its TMA descriptors' block shapes this way)
    keeps the benchmarks in the caller's process, but not at Triton's full length per config:
    every config is screened with kiln's short runs, the contenders raced, each launch wrapped in
    the hook."""
    import triton_kiln as kiln
    from support import kernels

    calls: list[int] = []

    def hook(nargs: dict[str, Any]) -> None:
        calls.append(nargs["BLOCK"])

    pool = make_pool(workers=4)
    configs = [
        kiln.Config({"BLOCK": b}, num_warps=w, pre_hook=hook) for b in (128, 512, 1024) for w in (2, 4)
    ]
    tuned = kiln.autotune(configs, key=["n"], pool=pool)(kernels.add_kernel)
    _add_call(tuned)()
    run = tuned.last_run
    assert [r.status for r in run.results] == ["ok"] * len(configs)
    raced = [r for r in run.results if r.screen_ms is not None]  # timed in the final round too
    assert 2 <= len(raced) <= 5
    assert run.split["final_s"] > 0
    assert set(calls) == {128, 512, 1024}  # the hook ran around the configs' launches
    _caller_context_works()

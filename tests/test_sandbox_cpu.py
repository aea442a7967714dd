"""The sandbox's process care, on a machine without a GPU: a sandbox that cannot start is an
outcome naming why (never an exception, never a hang), and no process is left behind."""

from __future__ import annotations

import pytest

from triton_kiln.sandbox import BenchSpec, Sandbox

torch = pytest.importorskip("torch")


@pytest.mark.timeout(120)
def test_sandbox_without_gpu_reports_why_and_leaves_nothing() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the sandbox would start")
    sandbox = Sandbox(device=0, timeout_s=30)
    sandbox.set_inputs({"x": torch.ones(4)}, [], [])
    spec = BenchSpec(
        key="k", group={}, hash="h", arg_names=["x"], signature={"x": "*fp32"}, constexprs={}, grid=(1,)
    )
    outcome = sandbox.bench(spec)
    pid = sandbox.pid
    assert outcome.status == "bench_crashed"
    assert outcome.reason is not None
    assert "exit code 1" in outcome.reason  # the interpreter's own exit, with its last words:
    assert any("CUDA" in line or "cuda" in line for line in outcome.stderr_tail), outcome.stderr_tail
    assert pid is None  # the dead process was reaped and forgotten
    # The next call starts a new sandbox (and fails the same way), it does not hang.
    assert sandbox.bench(spec).status == "bench_crashed"
    assert sandbox.restarts >= 2
    sandbox.close()

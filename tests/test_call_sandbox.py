"""kiln's call sandbox (sandbox/call_client.py) beyond Inductor: calls run in a spawned process
with the variables they carry; a warm-up that fails is a SandboxStartError naming why, and after
two such starts the sandbox fails at once; what cannot cross the process boundary is that call's
error. Every process it started is counted after each test."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import call_sandbox_fns as fns
from triton_kiln.sandbox.call_client import CallSandbox, spawned_alive
from triton_kiln.sandbox.call_messages import CallRaisedError, CallTimeoutError, SandboxStartError


@pytest.fixture
def sandboxes() -> Iterator[list[CallSandbox]]:
    made: list[CallSandbox] = []
    yield made
    for sandbox in made:
        sandbox.close()
    left = [pid for sandbox in made for pid in spawned_alive(sandbox.spawned_pids)]
    assert left == [], f"sandbox processes left: {left}"


def test_calls_run_in_one_other_process_with_their_variables(sandboxes: list[CallSandbox]) -> None:
    sandbox = CallSandbox(timeout_s=30)
    sandboxes.append(sandbox)
    first = sandbox.call(fns.pid, label="pid")
    assert first.ok
    assert first.value != os.getpid()
    assert sandbox.call(fns.pid, label="pid").value == first.value  # the same process serves
    assert sandbox.call(fns.variable, label="var", env={"KILN_TEST_CALL_VALUE": "x"}).value == "x"
    assert sandbox.spawned_pids == [first.value]


def test_a_failing_warmup_is_a_start_error_and_two_break_the_sandbox(sandboxes: list[CallSandbox]) -> None:
    sandbox = CallSandbox(timeout_s=30, warmup=fns.warmup_fails)
    sandboxes.append(sandbox)
    outcomes = [sandbox.call(fns.pid, label=f"call {i}") for i in range(3)]
    failures = [o.failure for o in outcomes]
    assert all(isinstance(f, SandboxStartError) for f in failures)
    assert "no device here" in str(failures[0])
    assert len(sandbox.spawned_pids) == 2  # the third call failed at once, without a process


def test_what_cannot_cross_the_boundary_is_that_calls_error(sandboxes: list[CallSandbox]) -> None:
    sandbox = CallSandbox(timeout_s=30)
    sandboxes.append(sandbox)
    local = sandbox.call(lambda: 1, label="a lambda")
    assert isinstance(local.failure, CallRaisedError)
    assert "cannot be sent to the sandbox" in str(local.failure)
    assert sandbox.spawned_pids == []  # refused here, before any process
    back = sandbox.call(fns.unpicklable_result, label="result")
    assert isinstance(back.failure, CallRaisedError)
    there = sandbox.call(fns.result_only_there, label="result", env={"KILN_TEST_CALL_VALUE": "1"})
    assert isinstance(there.failure, CallRaisedError)
    assert "cannot be read in this process" in str(there.failure)
    assert sandbox.call(fns.pid, label="pid").ok  # the process goes on
    assert len(sandbox.spawned_pids) == 1


def test_kiln_inductor_1_is_not_installed_inside_the_sandbox(
    sandboxes: list[CallSandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox inherits the caller's environment (KILN_INDUCTOR=1 included) and imports
    triton_kiln: kiln.inductor must not install there (no pool, no routing in a benchmark process)."""
    pytest.importorskip("torch._inductor")
    import triton_kiln.inductor as kiln_inductor

    monkeypatch.setenv("KILN_INDUCTOR", "1")
    sandbox = CallSandbox(timeout_s=120)
    sandboxes.append(sandbox)
    outcome = sandbox.call(kiln_inductor.installed, label="installed")
    assert outcome.ok, outcome.failure
    assert outcome.value is False


def test_a_timeout_kills_what_the_call_started(sandboxes: list[CallSandbox], tmp_path: Path) -> None:
    sandbox = CallSandbox(timeout_s=3)
    sandboxes.append(sandbox)
    pid_file = tmp_path / "helper.pid"
    hung = sandbox.call(
        fns.start_helper_and_hang, label="hang", env={"KILN_TEST_CALL_PID_FILE": str(pid_file)}
    )
    assert isinstance(hung.failure, CallTimeoutError)
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while spawned_alive([helper]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert spawned_alive([helper]) == [], "the call's helper process outlived the timeout"
    assert sandbox.call(fns.pid, label="pid").ok  # a fresh process serves the next call

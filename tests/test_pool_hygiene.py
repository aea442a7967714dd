"""Process hygiene (issue 12, items 9-13): per-job stderr tails, what a zygote death says,
prompt Ctrl-C, private worker temp directories, reaped workers, no ptxas left behind."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

import faults
from conftest import SM90, add_request, is_cubin
from kiln import CompileRequest, CompileTimeoutError, WorkerCrashedError, ZygoteDiedError

FOREIGN_TEXT = "kiln-test: text printed by an earlier, successful job"


@pytest.mark.timeout(90)
def test_crash_quotes_only_its_own_stderr(make_pool: Any) -> None:
    pool = make_pool(workers=1, preload=["faults"])
    noisy = CompileRequest(
        faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": faults.Noisy(FOREIGN_TEXT, 64)}, target=SM90
    )
    assert is_cubin(pool.compile(noisy).binary)
    crash = CompileRequest(
        faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": faults.Detonator("abort")}, target=SM90
    )
    exc = pool.submit(crash).exception(timeout=60)
    assert isinstance(exc, WorkerCrashedError), repr(exc)
    assert pool.stats.worker_deaths == 1  # one worker (workers=1) ran both jobs
    assert faults.ASSERTION_TEXT in str(exc)
    assert FOREIGN_TEXT not in str(exc)
    assert not any(FOREIGN_TEXT in line for line in exc.stderr_tail)


@pytest.mark.timeout(150)
def test_zygote_died_error_says_how(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TEST_SLOW_S", "30")
    pool = make_pool(workers=1, preload=["faults"])
    assert pool.wait_ready(60)
    future = pool.submit(CompileRequest(faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 32}, target=SM90))
    for round_ in (1, 2):
        deadline = time.monotonic() + 60
        while pool.stats.dispatched < round_ and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool.stats.dispatched >= round_
        zygote = pool.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        if round_ == 1:
            deadline = time.monotonic() + 60
            while pool.zygote_pid in (None, zygote) and time.monotonic() < deadline:
                time.sleep(0.02)
    exc = future.exception(timeout=60)
    assert isinstance(exc, ZygoteDiedError), repr(exc)
    text = str(exc)
    assert "killed by SIGKILL" in text
    assert "system log" not in text


def test_timeout_advice_names_the_real_parameters() -> None:
    exc = CompileTimeoutError(add_request(64).info(), 5.0, (), -9, detail="the limit is 4 s")
    text = str(exc)
    assert "timeout_s=" in text
    assert "job_timeout_s=" in text
    assert "timeout=" not in text.replace("timeout_s=", "")

"""The crash matrix: every fault, in every phase, fails exactly its own job.

Each case compiles a batch of real kernels for sm_90 in which one job faults for real (see
``faults.py``) and checks that: the faulty job failed with the right error and message; every
other job produced a valid cubin; the pool serves new jobs afterwards; no process leaked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from support import faults
from support.basics import SM90, add_request, is_cubin, wait_no_processes
from triton_kiln import (
    CompileRequest,
    CompileTimeoutError,
    KilnError,
    RemoteCompileError,
    WorkerCrashedError,
    WorkerMemoryError,
)

HANG_TIMEOUT_S = 4.0
MEMORY_LIMIT_MB = 1536
# A memory fault gets its own, long timeout: on a loaded machine the worker may need more than
# HANG_TIMEOUT_S to allocate MEMORY_LIMIT_MB, and the memory limit must be what stops it.
MEMORY_TIMEOUT_S = 120.0


def fault_request(phase: str, mode: str) -> CompileRequest:
    kernel = faults.kernel_for(phase, mode)
    block: Any = faults.Detonator(mode) if phase == "request" else 64
    return CompileRequest(kernel, {"x_ptr": "*fp32"}, {"BLOCK": block}, target=SM90)


def check_failure(exc: BaseException | None, phase: str, mode: str) -> None:
    assert exc is not None, f"{phase}/{mode}: the faulty job succeeded"
    text = str(exc)
    if mode in ("abort", "segv"):
        assert isinstance(exc, WorkerCrashedError), repr(exc)
        signame = "SIGABRT" if mode == "abort" else "SIGSEGV"
        assert exc.signal_name == signame
        assert signame in text
        assert "after" in text
        assert " s" in text
        if mode == "abort":
            assert faults.ASSERTION_TEXT in text  # the worker's last stderr lines reach the user
            assert exc.stderr_tail
            assert faults.ASSERTION_TEXT in exc.stderr_tail[-1]
    elif mode == "exit":
        assert isinstance(exc, WorkerCrashedError), repr(exc)
        assert exc.exit_code == 3
        assert "exit code 3" in text
    elif mode == "hang":
        assert isinstance(exc, CompileTimeoutError), repr(exc)
        assert "timed out" in text
        assert f"{HANG_TIMEOUT_S:g} s" in text
        assert exc.seconds >= HANG_TIMEOUT_S
    elif mode == "memory":
        assert isinstance(exc, WorkerMemoryError), repr(exc)
        assert f"{MEMORY_LIMIT_MB} MiB" in text
    elif mode == "raise":
        if phase == "result":
            # The exception's own pickling raised; kiln still sends it back as its own type
            # (rebuilt from class, args and attributes without calling its __reduce__).
            assert isinstance(exc, faults.ResultBomb), repr(exc)
            assert "result bomb (raise)" in text
            assert "ResultBomb" in str(exc.__cause__)
        else:
            assert isinstance(exc, faults.FaultError), repr(exc)
            assert "injected raise fault" in str(exc.__cause__)  # worker traceback attached
    # Every kiln failure names the job: kernel and constexprs.
    if isinstance(exc, KilnError):
        assert faults.kernel_for(phase, mode).__name__ in text


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", faults.MODES)
@pytest.mark.parametrize("phase", ["request", "compile", "result"])
def test_fault_fails_only_its_job(make_pool: Any, phase: str, mode: str) -> None:
    pool = make_pool(
        workers=2, job_timeout_s=HANG_TIMEOUT_S, memory_limit_mb=MEMORY_LIMIT_MB, preload=["support.faults"]
    )
    good = [add_request(block) for block in (64, 128, 256, 512)]
    bad = fault_request(phase, mode)
    bad_timeout = MEMORY_TIMEOUT_S if mode == "memory" else None
    futures = [pool.submit(r) for r in good[:2]]
    futures += [pool.submit(bad, timeout_s=bad_timeout)] + [pool.submit(r) for r in good[2:]]
    bad_future = futures.pop(2)
    exc = bad_future.exception(timeout=MEMORY_TIMEOUT_S + 60)
    check_failure(exc, phase, mode)
    for future in futures:
        artifact = future.result(timeout=60)
        assert is_cubin(artifact.binary)
        assert artifact.name == "add_kernel"
    # The pool still serves new jobs afterwards.
    after = pool.compile(add_request(1024), timeout_s=60)
    assert is_cubin(after.binary)
    if mode in ("abort", "segv", "exit", "hang", "memory"):
        assert pool.stats.worker_deaths >= 1
        # The replacement is counted when it says hello; on a loaded machine that may come after
        # the job above was served by another worker.
        deadline = time.monotonic() + 30
        while not pool.stats.replacement_s and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.stats.replacement_s, "a dead worker was not replaced"


@pytest.mark.timeout(60)
def test_unpicklable_exception_comes_back_as_its_type(make_pool: Any) -> None:
    pool = make_pool(workers=1, preload=["support.faults"])
    exc = pool.submit(
        CompileRequest(faults.unpicklable_error, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90)
    ).exception()
    assert isinstance(exc, faults.Unpicklable)
    assert "holds a lambda" in str(exc)
    assert not hasattr(exc, "callback")  # the unpicklable attribute was dropped, not the error


@pytest.mark.timeout(60)
def test_exception_of_unimportable_class_degrades_to_text(make_pool: Any) -> None:
    pool = make_pool(workers=1, preload=["support.faults"])
    exc = pool.submit(
        CompileRequest(faults.local_class_error, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90)
    ).exception()
    assert isinstance(exc, RemoteCompileError)
    assert "LocalError" in exc.exc_type
    assert "defined inside a function" in str(exc)
    assert "Traceback" in exc.remote_traceback


@pytest.mark.timeout(120)
def test_zygote_killed_mid_batch(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TEST_SLOW_S", "1.5")
    pool = make_pool(workers=2, preload=["support.faults"])
    assert pool.wait_ready(60)
    slow = [
        CompileRequest(faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": b}, target=SM90)
        for b in (32, 64, 128, 256)
    ]
    futures = [pool.submit(r) for r in slow]
    deadline = time.monotonic() + 30
    while pool.stats.dispatched < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    first_zygote = pool.zygote_pid
    assert first_zygote is not None
    os.kill(first_zygote, signal.SIGKILL)
    for future in futures:
        assert is_cubin(future.result(timeout=90).binary)  # in-flight jobs were retried
    assert pool.stats.zygote_starts == 2
    assert pool.stats.requeued >= 2
    assert pool.zygote_pid not in (None, first_zygote)
    assert is_cubin(pool.compile(add_request(2048)).binary)


PARENT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {paths!r}
    from support import faults
    from support.basics import SM90
    from triton_kiln import CompilePool, CompileRequest
    pool = CompilePool(workers=2, cache_dir={cache!r}, preload=["support.faults"])
    pool.wait_ready(60)
    for b in (32, 64, 128):
        pool.submit(CompileRequest(faults.fault_hang, {{"x_ptr": "*fp32"}}, {{"BLOCK": b}}, target=SM90))
    while pool.stats.dispatched < 2:
        time.sleep(0.02)
    print(pool.pool_id, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.timeout(120)
def test_parent_sigkill_leaves_no_process(tmp_path: Any) -> None:
    tests_dir = os.path.dirname(__file__)
    script = PARENT_SCRIPT.format(paths=[tests_dir, *sys.path], cache=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pool_id = proc.stdout.readline().strip()
    assert len(pool_id) == 32, "the parent script did not start its pool"
    from support.basics import pool_processes

    assert len(pool_processes(pool_id)) >= 3  # zygote + 2 busy workers
    proc.kill()
    proc.wait()
    left = wait_no_processes(pool_id, timeout=10)
    assert not left, [(p.pid, p.name(), p.cmdline()) for p in left]

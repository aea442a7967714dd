"""Process hygiene: per-job stderr tails, what a zygote death says,
prompt Ctrl-C, private worker temp directories, reaped workers, no ptxas left behind."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from support import faults
from support.basics import SM90, add_request, is_cubin, pool_processes, wait_no_processes
from triton_kiln import (
    CompileRequest,
    CompileTimeoutError,
    PoolClosedError,
    WorkerCrashedError,
    ZygoteDiedError,
)

TESTS_DIR = os.path.dirname(__file__)

FOREIGN_TEXT = "kiln-test: text printed by an earlier, successful job"


@pytest.mark.timeout(90)
def test_crash_quotes_only_its_own_stderr(make_pool: Any) -> None:
    pool = make_pool(workers=1, preload=["support.faults"])
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
    pool = make_pool(workers=1, preload=["support.faults"])
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


def _marker_request(report: Path, mode: str) -> CompileRequest:
    return CompileRequest(
        faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": faults.TempMarker(str(report), mode)}, target=SM90
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["none", "abort", "hang"])
def test_worker_temp_dir_is_private_and_removed(make_pool: Any, tmp_path: Path, mode: str) -> None:
    pool = make_pool(workers=1, job_timeout_s=3.0, preload=["support.faults"])
    report = tmp_path / "marker.txt"
    future = pool.submit(_marker_request(report, mode))
    exc = future.exception(timeout=60)
    marker = Path(report.read_text())
    worker_tmp = marker.parent
    assert worker_tmp.name.startswith("worker-")
    assert worker_tmp.parent.name.startswith("kiln-pool-")
    assert worker_tmp != Path(tempfile.gettempdir())
    if mode == "none":
        assert exc is None
        assert marker.exists()  # the worker is alive: its directory is still in use
        assert stat.S_IMODE(worker_tmp.parent.stat().st_mode) == 0o700
    else:
        assert isinstance(exc, (WorkerCrashedError, CompileTimeoutError)), repr(exc)
        assert not worker_tmp.exists()  # removed when the zygote reaped the worker
    pool.shutdown(wait=True)
    assert not worker_tmp.exists()
    assert not worker_tmp.parent.exists()


SUBREAPER_SCRIPT = textwrap.dedent(
    """
    import ctypes, sys, time
    sys.path[:0] = {paths!r}
    import psutil
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    from support.basics import add_request
    from triton_kiln import CompilePool
    pool = CompilePool(workers=2, cache_dir={cache!r})
    pool.compile(add_request(64))
    pool.shutdown(wait=True)
    time.sleep(0.5)
    me = psutil.Process()
    print([(c.pid, c.status()) for c in me.children(recursive=True)])
    """
)


@pytest.mark.timeout(120)
def test_shutdown_reaps_every_worker_under_a_subreaper(tmp_path: Path) -> None:
    script = SUBREAPER_SCRIPT.format(paths=[TESTS_DIR, *sys.path], cache=str(tmp_path / "cache"))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=110, check=True
    )
    assert out.stdout.strip() == "[]", f"left under the subreaper: {out.stdout}"


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import ctypes, shutil, sys, time
    sys.path[:0] = {paths!r}
    import psutil
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER: orphans come here unless reaped below
    from support import faults
    from support.basics import SM90
    from triton_kiln import CompilePool, CompileRequest
    ptxas = {tmp!r} + "/ptxas"
    shutil.copy(shutil.which("sleep"), ptxas)
    pool = CompilePool(workers=1, job_timeout_s=2.0, cache_dir={tmp!r} + "/cache")
    request = CompileRequest(
        faults.slow_kernel, {{"x_ptr": "*fp32"}}, {{"BLOCK": faults.ChildInWorker(ptxas, "60")}}, target=SM90
    )
    error = pool.submit(request).exception(timeout=60)
    time.sleep(1.0)
    me = psutil.Process()
    print(type(error).__name__, [(c.pid, c.status()) for c in me.children() if c.name() == "ptxas"])
    pool.shutdown(wait=True)
    """
)


@pytest.mark.timeout(120)
def test_a_ptxas_killed_with_its_timed_out_worker_is_reaped_by_the_zygote(tmp_path: Path) -> None:
    """A compile that times out in ptxas: the worker's process group is killed, ptxas with it.
    Its parent gone, the dead ptxas goes to the nearest subreaper, and one that never reaps it
    (PID 1 in a container whose first process is the user's program) keeps a zombie for each
    such timeout: the zygote is that subreaper, and reaps it."""
    script = ORPHAN_SCRIPT.format(paths=[TESTS_DIR, *sys.path], tmp=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=110, check=True
    )
    assert out.stdout.strip() == "CompileTimeoutError []", out.stdout + out.stderr[-2000:]


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {paths!r}
    from support import faults
    from support.basics import SM90
    from triton_kiln import CompilePool, CompileRequest
    with CompilePool(workers=1, job_timeout_s=300, cache_dir={cache!r}, preload=["support.faults"]) as pool:
        hang = CompileRequest(faults.fault_hang, {{"x_ptr": "*fp32"}}, {{"BLOCK": 64}}, target=SM90)
        future = pool.submit(hang)
        while pool.stats.dispatched < 1:
            time.sleep(0.02)
        time.sleep(1.0)  # inside Triton's compile now (the hang is a stage hook)
        print(pool.pool_id, flush=True)
        future.result()
    """
)


@pytest.mark.timeout(120)
def test_ctrl_c_kills_running_jobs_at_once(tmp_path: Path) -> None:
    script = CTRL_C_SCRIPT.format(paths=[TESTS_DIR, *sys.path], cache=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    pool_id = proc.stdout.readline().strip()
    assert len(pool_id) == 32, "the script did not start its pool"
    assert len(pool_processes(pool_id)) >= 2  # the zygote and the hanging worker
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    took = time.monotonic() - started
    assert took < 8.0, f"Ctrl-C took {took:.1f} s"
    assert proc.returncode != 0
    left = wait_no_processes(pool_id, timeout=5)
    assert not left, [(p.pid, p.name()) for p in left]


@pytest.mark.timeout(120)
def test_shutdown_cancel_futures_does_not_wait_for_running_jobs(make_pool: Any) -> None:
    pool = make_pool(workers=1, job_timeout_s=300, preload=["support.faults"])
    future = pool.submit(CompileRequest(faults.fault_hang, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90))
    deadline = time.monotonic() + 60
    while pool.stats.dispatched < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    pool.shutdown(wait=True, cancel_futures=True)
    assert time.monotonic() - started < 8.0
    assert isinstance(future.exception(timeout=1), PoolClosedError)
    assert not wait_no_processes(pool.pool_id, timeout=5)

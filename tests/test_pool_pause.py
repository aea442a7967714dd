"""kiln.pool.pause: while a benchmark is timed, kiln's compile processes are held still (real
processes, real signals): the zygote and its workers stop and nothing else does, they run again
after, and a compile asked for during a hold ends the hold instead of waiting for it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from support.basics import add_request, pool_processes
from triton_kiln import CompilePool
from triton_kiln.pool.pause import PAUSE, compile_process_pids


def _status_soon(proc: psutil.Process, wanted: str, timeout_s: float = 5.0) -> str:
    """The process's status once it is ``wanted`` (signals are delivered asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = proc.status()
        if status == wanted or time.monotonic() > deadline:
            return status
        time.sleep(0.01)


def _started(pool: CompilePool) -> list[psutil.Process]:
    pool.compile(add_request())  # the zygote and a worker are up
    return pool_processes(pool.pool_id)


def test_a_hold_stops_kilns_compile_processes_and_nothing_else(
    make_pool: Callable[..., CompilePool],
) -> None:
    kiln = _started(make_pool(workers=2))
    assert len(kiln) >= 2  # the zygote and at least one worker
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        held = set(compile_process_pids())
        assert {p.pid for p in kiln} <= held
        assert other.pid not in held
        with PAUSE.hold():
            assert PAUSE.held
            assert [_status_soon(p, psutil.STATUS_STOPPED) for p in kiln] == [psutil.STATUS_STOPPED] * len(
                kiln
            )
            assert psutil.Process(other.pid).status() != psutil.STATUS_STOPPED
            with PAUSE.hold():  # nested (or another thread's): one stop, released by the outermost
                pass
            assert PAUSE.held
        assert not PAUSE.held
        assert all(_status_soon(p, psutil.STATUS_SLEEPING) != psutil.STATUS_STOPPED for p in kiln)
    finally:
        other.kill()
        other.wait()


def test_a_compile_asked_for_during_a_hold_ends_it(make_pool: Callable[..., CompilePool]) -> None:
    pool = make_pool(workers=2)
    kiln = _started(pool)
    interrupted = PAUSE.interrupted
    with PAUSE.hold():
        assert all(_status_soon(p, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED for p in kiln)
        artifact = pool.submit(add_request(block=256)).result(timeout=120)  # a new compile
        assert not PAUSE.held
    assert artifact.binary[:4] == b"\x7fELF"
    assert PAUSE.interrupted == interrupted + 1
    assert all(
        _status_soon(p, psutil.STATUS_SLEEPING) != psutil.STATUS_STOPPED for p in pool_processes(pool.pool_id)
    )


def test_a_cached_result_does_not_end_a_hold(make_pool: Callable[..., CompilePool]) -> None:
    pool = make_pool(workers=1)
    _started(pool)
    with PAUSE.hold():
        pool.submit(add_request()).result(timeout=10)  # compiled before: nothing to wait for
        assert PAUSE.held


def test_kilns_threads_wait_out_a_hold_and_the_holder_never_waits() -> None:
    """The gate kiln's own threads pass before work under the GIL (the pool manager, loading a
    compiled kernel for Inductor): shut while another thread holds, open to the holder itself."""
    import threading

    waited: list[float] = []

    def other() -> None:
        started = time.monotonic()
        PAUSE.wait_running()
        waited.append(time.monotonic() - started)

    with PAUSE.hold():
        started = time.monotonic()
        assert PAUSE.wait_running() is True  # the holder (a compile it asks for goes on at once)
        assert time.monotonic() - started < 0.1
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        assert not waited  # still waiting: the hold is in effect
    thread.join(timeout=5)
    assert waited
    assert 0.25 < waited[0] < 5

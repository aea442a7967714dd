"""The zygote: it never forks while it has threads, and a zygote that cannot start fails every
job with a ZygoteError that says why.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest

from support.basics import SM90, add_request, is_cubin
from triton_kiln import CompileRequest, GPUTarget, ZygoteError, procs, settings

THREAD_AT_IMPORT = textwrap.dedent(
    """
    import threading
    import time

    import triton
    import triton.language as tl

    threading.Thread(target=time.sleep, args=(1e6,), name="kiln-test-sleeper", daemon=True).start()


    @triton.jit
    def threaded_module_kernel(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 2.0)
    """
)

# A thread that appears *after* the import (from a SIGALRM handler), so that preloading
# succeeds and only the zygote's check right before fork() can catch it. Armed only inside
# kiln's processes (KILN_POOL_ID is set there), never in the test process.
LATE_THREAD = textwrap.dedent(
    """
    import os
    import signal
    import threading
    import time

    DELAY_S = {delay}


    def _start_thread(*_):
        threading.Thread(target=time.sleep, args=(1e6,), name="kiln-late-thread", daemon=True).start()


    if os.environ.get("KILN_POOL_ID"):
        signal.signal(signal.SIGALRM, _start_thread)
        signal.setitimer(signal.ITIMER_REAL, DELAY_S)
    """
)


def write_module(directory: Path, name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (directory / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(directory))


def wait_for(condition: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# ---------------------------------------------------------------------------- threads


@pytest.mark.timeout(90)
def test_preloaded_module_that_starts_a_thread(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_module(tmp_path, "kiln_test_thready", THREAD_AT_IMPORT, monkeypatch)
    import kiln_test_thready

    request = CompileRequest(
        kiln_test_thready.threaded_module_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90
    )
    # The warning is issued by the pool's manager thread (while it restarts the zygote), so it is
    # recorded process-wide with catch_warnings rather than pytest.warns' single statement.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pool = make_pool(workers=1, preload=["kiln_test_thready"])
        artifact = pool.compile(request, timeout_s=60)
        other = pool.compile(add_request(64), timeout_s=60)
    thread_warnings = [
        w for w in record if issubclass(w.category, RuntimeWarning) and "threads" in str(w.message)
    ]
    assert len(thread_warnings) == 1
    message = str(thread_warnings[0].message)
    assert "kiln_test_thready" in message
    assert "started threads" in message
    assert "single-threaded" in message
    # Jobs still compile, on a zygote restarted without that module (the kernel reached the
    # worker without the zygote importing its module).
    assert artifact.name == "threaded_module_kernel"
    assert is_cubin(artifact.binary)
    assert is_cubin(other.binary)
    assert pool.stats.zygote_starts == 2
    zygote = psutil.Process(pool.zygote_pid)
    assert zygote.num_threads() == 1


@pytest.mark.timeout(120)
def test_zygote_refuses_to_fork_once_it_has_threads(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    delay = 1.0
    write_module(tmp_path, "kiln_test_late_thread", LATE_THREAD.format(delay=delay), monkeypatch)
    pool = make_pool(workers=1, preload=["kiln_test_late_thread"])
    assert pool.wait_ready(60)
    assert is_cubin(pool.compile(add_request(64), timeout_s=60).binary)
    first_zygote = pool.zygote_pid
    assert first_zygote is not None
    starts = pool.stats.zygote_starts
    zygote = psutil.Process(first_zygote)
    assert wait_for(lambda: zygote.num_threads() == 2, timeout=delay + 10), "the late thread never started"

    # Make the pool fork a replacement worker from the now multi-threaded zygote.
    [worker] = pool.worker_pids()
    with caplog.at_level(logging.WARNING, logger="kiln.pool"):
        os.kill(worker, signal.SIGKILL)
        assert wait_for(lambda: pool.stats.worker_deaths == 1)
        artifact = pool.compile(add_request(128), timeout_s=60)
    assert is_cubin(artifact.binary)
    assert pool.stats.zygote_starts == starts + 1
    assert pool.zygote_pid not in (None, first_zygote)
    refusals = [r.getMessage() for r in caplog.records if "could not fork" in r.getMessage()]
    assert refusals, [r.getMessage() for r in caplog.records]
    assert "2 threads" in refusals[0]
    assert "unsafe" in refusals[0]
    assert not zygote.is_running() or zygote.status() == psutil.STATUS_ZOMBIE


# ---------------------------------------------------------------------------- a zygote that cannot start

BOOM = "import sys; sys.stderr.write('boom: cannot start\\n'); sys.exit(7)"


class _FailingSubprocess:
    """``subprocess`` as kiln.procs sees it, but the zygote command is replaced."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.commands: list[list[str]] = []

    def Popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        self.commands.append(args)
        return subprocess.Popen([sys.executable, "-c", self.code], **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


@pytest.mark.timeout(60)
def test_zygote_that_cannot_start_fails_jobs(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FailingSubprocess(BOOM)
    monkeypatch.setattr(procs, "subprocess", fake)
    pool = make_pool(workers=1, settings=settings.current().replace(zygote_restarts=2), start=False)
    futures = [pool.submit(add_request(64)), pool.submit(add_request(128))]
    for future in futures:
        exc = future.exception(timeout=30)
        assert isinstance(exc, ZygoteError), repr(exc)
        text = str(exc)
        assert "during start-up" in text
        assert "exit code 7" in text
        assert "boom: cannot start" in text
        assert "2 attempts" in text
        assert exc.stderr_tail[-1] == "boom: cannot start"
    assert len(fake.commands) == 2
    assert pool.stats.zygote_starts == 2
    with pytest.raises(ZygoteError, match="boom: cannot start") as later:
        pool.submit(add_request(256))
    assert later.value is futures[0].exception()
    with pytest.raises(ZygoteError, match="boom: cannot start"):
        pool.wait_ready(0.5)


@pytest.mark.timeout(60)
def test_wait_ready_on_broken_pool_raises_promptly(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "subprocess", _FailingSubprocess(BOOM))
    pool = make_pool(workers=1, settings=settings.current().replace(zygote_restarts=1), start=False)
    assert isinstance(pool.submit(add_request(64)).exception(timeout=30), ZygoteError)
    outcome: list[BaseException | bool] = []

    def wait() -> None:
        try:
            outcome.append(pool.wait_ready(8))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(3)
    assert outcome, "wait_ready() still blocks 3 s after the zygote gave up"
    assert isinstance(outcome[0], ZygoteError)


@pytest.mark.timeout(60)
def test_zygote_that_cannot_start_is_retried(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fails once, then the real zygote starts: the job succeeds.
    fake = _FailingSubprocess(BOOM)
    real_popen = _FailingSubprocess.Popen

    def popen_once(self: _FailingSubprocess, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        if not self.commands:
            return real_popen(self, args, **kwargs)
        self.commands.append(args)
        return subprocess.Popen(args, **kwargs)

    monkeypatch.setattr(_FailingSubprocess, "Popen", popen_once)
    monkeypatch.setattr(procs, "subprocess", fake)
    pool = make_pool(workers=1, settings=settings.current().replace(zygote_restarts=2))
    assert is_cubin(pool.compile(add_request(64), timeout_s=60).binary)
    assert pool.stats.zygote_starts == 2


@pytest.mark.timeout(90)
def test_zygote_whose_warmup_fails_reports_ptxas(make_pool: Any) -> None:
    # A real failure, nothing mocked: ptxas rejects the warm-up target.
    pool = make_pool(
        workers=1,
        warmup_target=GPUTarget("cuda", 10, 32),
        settings=settings.current().replace(zygote_restarts=1),
        start=False,
    )
    exc = pool.submit(add_request(64)).exception(timeout=60)
    assert isinstance(exc, ZygoteError), repr(exc)
    assert "sm_10" in str(exc)
    assert "ptxas" in str(exc)
    with pytest.raises(ZygoteError):
        pool.submit(add_request(128))


# Writes its line, closes its end of the control socket, and only then exits with code 7: the
# order in which a Python zygote that fails during start-up tears down (the socket is closed
# while the interpreter finalizes, before the process ends).
BOOM_LINGER = (
    "import os, sys, time; sys.stderr.write('boom: cannot start\\n'); sys.stderr.flush(); "
    "os.close(int(os.environ['KILN_ZYGOTE_FD'])); time.sleep(0.5); sys.exit(7)"
)


@pytest.mark.timeout(60)
def test_zygote_error_names_exit_code_when_socket_closes_first(
    make_pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(procs, "subprocess", _FailingSubprocess(BOOM_LINGER))
    pool = make_pool(workers=1, settings=settings.current().replace(zygote_restarts=1), start=False)
    exc = pool.submit(add_request(64)).exception(timeout=30)
    assert isinstance(exc, ZygoteError), repr(exc)
    assert "boom: cannot start" in str(exc)
    assert "exit code 7" in exc.reason, exc.reason


@pytest.mark.timeout(60)
def test_shutdown_after_zygote_failure_does_not_hang(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "subprocess", _FailingSubprocess(BOOM))
    pool = make_pool(workers=1, settings=settings.current().replace(zygote_restarts=1), start=False)
    future = pool.submit(add_request(64))
    assert isinstance(future.exception(timeout=30), ZygoteError)
    closer = threading.Thread(target=pool.shutdown, daemon=True)  # what `with CompilePool()` does
    closer.start()
    closer.join(5)
    # (if it hangs, make_pool's shutdown(cancel_futures=True) ends the manager afterwards)
    assert not closer.is_alive(), "shutdown() hung after the zygote failed to start"


SEED_PROBE = textwrap.dedent(
    """
    import json, os, sys
    import triton
    import triton.runtime.cache as cache_mod
    from triton_kiln import triton_compat
    from triton_kiln.pool.warmup import warmup_kernel

    cache_dir, seed = sys.argv[1], sys.argv[2] == "seed"
    original = cache_mod.triton_key
    key = triton_compat.triton_key(__import__("pathlib").Path(cache_dir))
    seeded = triton_compat.seed_triton_key(key) if seed else False
    src = triton_compat.ASTSource(
        warmup_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64}
    )
    compiled = triton.compile(src, target=triton_compat.GPUTarget("cuda", 90, 32))
    print(json.dumps({
        "seeded": seeded,
        "hash": compiled.hash,
        "original_calls": original.cache_info().misses,
        "installed": cache_mod.triton_key() == key,
    }))
    """
)


def _seed_probe(tmp_path: Path, cache_dir: Path, mode: str) -> dict[str, Any]:
    import json

    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / f"triton-{mode}")}
    out = subprocess.run(
        [sys.executable, "-c", SEED_PROBE, str(cache_dir), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_seeded_triton_key_skips_the_hash_and_gives_the_same_binary_key(tmp_path: Path) -> None:
    """A process that installs kiln's stored key never runs Triton's hash, and compiles to
    exactly the cache key (``compiled.hash``) that Triton's own key gives."""
    key_dir = tmp_path / "kiln"
    genuine = _seed_probe(tmp_path, key_dir, "plain")  # computes Triton's key, stores it
    assert genuine["original_calls"] == 1
    assert not genuine["seeded"]
    seeded = _seed_probe(tmp_path, key_dir, "seed")
    assert seeded["seeded"]
    assert seeded["installed"]
    assert seeded["original_calls"] == 0, "Triton hashed libtriton.so despite the seeded key"
    assert seeded["hash"] == genuine["hash"]


def test_zygote_installs_the_stored_key(make_pool: Any) -> None:
    from triton_kiln import triton_compat

    triton_compat.triton_key(settings.current().cache_dir)  # make sure the key file exists
    pool = make_pool()
    pool.wait_ready()
    assert pool.zygote_info["key_seeded"] is True
    assert is_cubin(pool.submit(add_request()).result(timeout=120).binary)


@pytest.mark.parametrize("parent_gone", [False, True])
def test_zygote_shutdown_exits_the_process_and_removes_its_folder_once_the_parent_is_gone(
    tmp_path: Path, parent_gone: bool
) -> None:
    """``shutdown()`` (on the parent's SIGTERM or the socket's EOF) ends the zygote with status 0
    after reaping, and removes its pool folder when the parent is gone; it never returns to the
    serving loop. Run in a forked process standing in for the zygote."""
    import socket

    from triton_kiln.pool import zygote

    root = tmp_path / "kiln-pool-test"
    root.mkdir()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            parent = -1 if parent_gone else os.getppid()
            zygote._Zygote(theirs, str(root), parent).shutdown()
        finally:
            os._exit(7)  # reached only if shutdown() returned
    _, status = os.waitpid(pid, 0)
    ours.close()
    theirs.close()
    assert os.waitstatus_to_exitcode(status) == 0
    assert root.exists() is not parent_gone

"""The caller's side of a call sandbox: a spawned process that runs picklable calls apart from the
caller, so a call that crashes, hangs or breaks its CUDA context costs that call only.

::

    caller thread                    CallSandbox (this module)            call_worker process
      start()                   ->   spawn (from kiln's spawner thread) -> import, warm-up
      call(fn, label, env)      ->   pickle fn here; ready? (hello, start  CallHello
                                     timeout) -- CallItem ------------->  fn() under env
                                 <-  CallReturned | CallRaised  <-------
      <- CallOutcome(value | failure)
         process died          -> CallCrashedError (signal, exit code, last stderr lines)
         no reply in time      -> killed: CallTimeoutError
         sticky CUDA error     -> it exits after replying: CallCrashedError
         fn raised             -> CallRaisedError (the process is kept)
         never said hello      -> SandboxStartError

A failed process is replaced by a new one on the next call (:attr:`CallSandbox.restarts`); after
two starts in a row that failed, the sandbox is broken and every later call fails at once with
the last start's error (a process that cannot import torch or see the GPU will not next time
either). Calls are serialized by a lock; failures are outcomes, never exceptions. Every process
it spawned is in :attr:`CallSandbox.spawned_pids` (tests count the ones left).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from triton_kiln.errors import describe_exit
from triton_kiln.sandbox.call_messages import (
    CallCrashedError,
    CallFailure,
    CallHello,
    CallInit,
    CallItem,
    CallOutcome,
    CallRaised,
    CallRaisedError,
    CallReturned,
    CallStartFailed,
    CallTimeoutError,
    SandboxStartError,
)
from triton_kiln.sandbox.call_worker import ENV_FD, ENV_PARENT
from triton_kiln.sandbox.channel import Died, TimedOut, WorkerProcess
from triton_kiln.sandbox.torch_worker import STICKY_EXIT

_MODULE = "triton_kiln.sandbox.call_worker"
_BROKEN_AFTER = 2  # failed starts in a row


class CallSandbox:
    """Runs ``fn()`` in a spawned process per :meth:`call` (see the module docstring)."""

    def __init__(
        self,
        *,
        timeout_s: float,
        start_timeout_s: float = 120.0,
        warmup: Callable[[], Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``timeout_s``: how long one call may take (the process's start is not counted);
        ``warmup``: a picklable callable the process runs before it says it is ready."""
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._init = CallInit(
            list(sys.path), dict(env or {}), pickle.dumps(warmup) if warmup is not None else None
        )
        self._lock = threading.Lock()
        self._proc: WorkerProcess | None = None
        self._ready = False
        self._failed_starts = 0
        self._start_failure: SandboxStartError | None = None
        self.restarts = 0
        self.calls = 0
        self.spawned_pids: list[int] = []

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def start(self) -> None:
        """Spawn the process if none is running (returns at once: it warms up on its own)."""
        with self._lock:
            self._spawn()

    def close(self) -> None:
        """Stop the process (it exits when its socket closes; killed if it has not after 5 s)."""
        with self._lock:
            self._discard(wait_s=5.0)

    def call(
        self,
        fn: Callable[[], Any],
        *,
        label: str,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> CallOutcome:
        """``fn()`` in the sandbox, as a :class:`~triton_kiln.sandbox.call_messages.CallOutcome` (never
        raises for what happens to the call; ``fn`` that cannot be pickled is a :class:`CallRaisedError`)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        try:
            payload = pickle.dumps(fn)
        except Exception as exc:
            return self._failed(
                CallRaisedError(label, 0.0, f"it cannot be sent to the sandbox: {exc}"), started
            )
        with self._lock:
            self.calls += 1
            if self._start_failure is not None and self._failed_starts >= _BROKEN_AFTER:
                return self._failed(self._start_failure, started)
            start_failure = self._ensure_ready(label)
            if start_failure is not None:
                return self._failed(start_failure, started)
            proc = self._proc
            assert proc is not None
            began = time.monotonic()
            try:
                proc.send(CallItem(label, payload, dict(env or {})))
                reply = proc.receive(timeout)
            except Died as died:
                return self._failed(self._crashed(proc, label, died, began), started)
            except TimedOut:
                self._discard()
                self.restarts += 1
                detail = f"no answer within {timeout:g} s"
                return self._failed(CallTimeoutError(label, time.monotonic() - began, detail), started)
            except Exception as exc:  # the reply arrived but cannot be unpickled in this process
                detail = f"its result cannot be read in this process: {type(exc).__name__}: {exc}"
                return self._failed(CallRaisedError(label, time.monotonic() - began, detail), started)
            seconds = time.monotonic() - began
            if isinstance(reply, CallReturned):
                return CallOutcome(reply.value, None, seconds)
            if isinstance(reply, CallRaised) and reply.sticky:
                _kill_group(proc.pid)
                proc.wait(10)
                self._discard()
                self.restarts += 1
                failure = CallCrashedError(label, seconds, reply.error, (), STICKY_EXIT)
                return self._failed(failure, started)
            if isinstance(reply, CallRaised):
                detail = f"{reply.error}\n{_last_frames(reply.traceback)}"
                return self._failed(CallRaisedError(label, seconds, detail), started)
            self._discard()
            return self._failed(CallCrashedError(label, seconds, f"unexpected reply {reply!r}"), started)

    # -- internals (the lock is held) -----------------------------------------------------------

    def _spawn(self) -> None:
        if self._proc is not None and self._proc.alive():
            return
        if self._proc is not None:
            self._discard()
            self.restarts += 1
        self._proc = WorkerProcess(_MODULE, ENV_FD, ENV_PARENT, self._init)  # type: ignore[arg-type]
        self.spawned_pids.append(self._proc.pid)
        self._ready = False

    def _ensure_ready(self, label: str) -> SandboxStartError | None:
        self._spawn()
        if self._ready:
            return None
        proc = self._proc
        assert proc is not None
        try:
            hello = proc.receive(max(0.0, self.start_timeout_s - (time.monotonic() - proc.started)))
        except (Died, TimedOut) as exc:
            waited = time.monotonic() - proc.started
            if isinstance(exc, TimedOut):
                detail, code = f"it did not say it was ready within {self.start_timeout_s:g} s", None
            else:
                code = proc.wait(10)
                detail = f"it ended with {describe_exit(code)}"
            tail = proc.stderr_tail()
            return self._start_failed(SandboxStartError(label, waited, detail, tail, code))
        if isinstance(hello, CallHello):
            self._ready = True
            self._failed_starts = 0
            self._start_failure = None
            return None
        waited = time.monotonic() - proc.started
        detail = (
            f"its warm-up raised {hello.error}\n{_last_frames(hello.traceback)}"
            if isinstance(hello, CallStartFailed)
            else f"unexpected first message {hello!r}"
        )
        return self._start_failed(SandboxStartError(label, waited, detail, proc.stderr_tail()))

    def _start_failed(self, failure: SandboxStartError) -> SandboxStartError:
        self._discard()
        self._failed_starts += 1
        self._start_failure = failure
        return failure

    def _crashed(self, proc: WorkerProcess, label: str, died: Died, began: float) -> CallCrashedError:
        seconds = time.monotonic() - began
        _kill_group(proc.pid)  # what it started dies with it (it is not reaped yet: the id is its)
        code = proc.wait(10)
        tail = proc.stderr_tail()
        self._discard()
        self.restarts += 1
        detail = str(died.args[0]) if died.args and died.args[0] else ""
        return CallCrashedError(label, seconds, detail, tail, code)

    def _discard(self, wait_s: float = 0.0) -> None:
        """Forget the process: closed (``wait_s``: given that long to exit on EOF), or killed with
        its whole process group."""
        proc, self._proc = self._proc, None
        self._ready = False
        if proc is None:
            return
        if wait_s:
            proc.close(wait_s)  # it exits on EOF (and is reaped: its id is no longer its group's)
            return
        if proc.proc.returncode is None:  # not reaped yet: the id is still its group's
            _kill_group(proc.pid)
        proc.kill()

    def _failed(self, failure: CallFailure, started: float) -> CallOutcome:
        return CallOutcome(None, failure, time.monotonic() - started)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (the worker's, made at its start), if it exists."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _last_frames(tb: str, lines: int = 6) -> str:
    kept = [line for line in tb.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def spawned_alive(pids: list[int]) -> list[int]:
    """Which of ``pids`` still run (not zombies): for tests and checks after :meth:`CallSandbox.close`."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive

"""Helion's benchmark worker, served by kiln's call sandbox: the object Helion's provider holds as
its ``BenchmarkWorker`` (``run(job, timeout)``, ``alive()``, ``shutdown()``).

::

    Helion (caller thread, or kiln's stream thread      KilnBenchmarkWorker           call sandbox
    ahead of it: :mod:`.stream`)                        (here)                        process
      _run_subprocess_benchmark_job(fn) builds a
      BenchmarkJob -> worker.run(job, timeout)  ---->   job's ledger entry:
                                                          new: HelionJob(job) ------> job() (its own
                                                               + TRITON_CACHE_DIR           CUDA context)
                                                          taken: wait for its outcome
                                                <----   the job's value, or raises:
                                                          the job's own exception (as Helion's worker)
                                                          BenchmarkTimeout (killed after ``timeout``)
                                                          BenchmarkWorkerDied (the process died: signal,
                                                            exit code and its last stderr lines)
                                                          SandboxCudaError (sticky CUDA error; the
                                                            process replaced, Helion skips the config)
                                                          SandboxUnavailableError (it cannot start)

Helion then classifies each of these exactly as it does its own worker's: the config is ``inf``,
its failure recorded (``timeout``/``error``) and logged with kiln's reason, and the search goes
on. A crashed or timed-out process is replaced at once (it warms up while Helion goes on).

The ledger lets kiln run a job before Helion asks for it: :meth:`speculate` runs one of Helion's
job-building methods with this thread marked, and :meth:`run` keeps the outcome (keyed by the
pickled job: the same config, repetitions and arguments) for the one request of Helion's that
matches it; a request that comes while the job runs waits for it. :meth:`forget` drops what
Helion did not ask for. With ``screen_ms`` (``KILN_HELION_SCREEN_MS``), a search timing run
ahead is timed for that many ms rather than the job's own window, and its outcome answers
Helion's request for the job as built (kiln's screening; Helion's re-benchmarks and final
verification keep their windows). A job run ahead with ``keep`` (a re-benchmark kiln expects
Helion to ask for once the batch is over: :mod:`.stream`) outlives the batch's :meth:`forget`
and is dropped at the next batch's (``kept=True``).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.errors import KilnError
from triton_kiln.helion import compat
from triton_kiln.helion.config import BenchmarkSandbox
from triton_kiln.helion.errors import SandboxCudaError
from triton_kiln.helion.sandbox_jobs import HelionJob, JobRaised, JobReturned
from triton_kiln.sandbox.call_messages import (
    CallCrashedError,
    CallFailure,
    CallTimeoutError,
    SandboxStartError,
)
from triton_kiln.sandbox.torch_worker import STICKY_EXIT

_CACHE_VARIABLE = "TRITON_CACHE_DIR"  # Helion's per-autotune Triton cache, where kiln put the binaries


class SandboxUnavailableError(KilnError, compat.BenchmarkWorkerUnkillable):  # type: ignore[misc]
    """kiln's benchmark sandbox could not start, so no config can be benchmarked. Helion treats it
    as a worker it may not replace: the search stops, keeping a config it already measured."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"kiln's benchmark sandbox for Helion could not start: {reason}. Check that this "
            f"interpreter can import torch and Helion and use the GPU in a fresh process, or set "
            f"KILN_HELION_SANDBOX=0 to benchmark in Helion's own worker."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


@dataclass(frozen=True)
class Served:
    """A job's outcome as Helion receives it: ``value``, or ``error`` raised."""

    value: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class SkippedJob:
    """A job that failed in the sandbox (kiln's reason: signal, exit code, timeout, CUDA error)."""

    label: str
    reason: str


@dataclass
class JobKindStats:
    """The sandbox calls of one kind of job (Helion's ``BenchmarkJob``, ``AccuracyCheckJob``,
    kiln's ``FinalistRunsJob``...)."""

    calls: int = 0
    seconds: float = 0.0  # the calls as this process waited for them (transport and start-ups included)
    job_seconds: float = 0.0  # the jobs' own run in the sandbox (calls that came back with one)


@dataclass(frozen=True)
class JobSpan:
    """When one sandbox call ran, as this process waited for it (``time.perf_counter``)."""

    kind: str  # the job's type name
    ahead: bool  # run ahead of Helion's request (the stream), not at it
    start: float
    end: float


@dataclass
class SandboxStats:
    """What the worker did (for tests, benchmarks and the bench's split)."""

    jobs: int = 0  # run in the sandbox
    streamed: int = 0  # of those, run ahead of Helion's request
    screened: int = 0  # of those, search timings run with the screening's shorter window
    taken_from_stream: int = 0  # Helion's requests answered by a job run ahead
    verified_ahead: int = 0  # of those run ahead, Helion's re-benchmarks (kept past the batch)
    verified_taken: int = 0  # Helion's re-benchmark requests answered by one of them
    seconds: float = 0.0  # in sandbox calls, start-up waits included
    skipped: list[SkippedJob] = field(default_factory=list)
    kinds: dict[str, JobKindStats] = field(default_factory=dict)  # by the job's type name
    spans: list[JobSpan] = field(default_factory=list)  # every call, in the order they ended


class _Speculated(Exception):
    """Raised through Helion's job-building method to :meth:`KilnBenchmarkWorker.speculate`."""

    def __init__(self, served: Served | None) -> None:
        super().__init__("speculated")
        self.served = served


class _Captured(Exception):
    """Raised through Helion's job-building method to :meth:`KilnBenchmarkWorker.capture`."""

    def __init__(self, job: Callable[[], Any]) -> None:
        super().__init__("captured")
        self.job = job


class _Entry:
    """One job's outcome in the ledger, set once by whoever runs it."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.served = Served()

    def set(self, served: Served) -> None:
        self.served = served
        self._done.set()

    def wait(self) -> Served:
        self._done.wait()
        return self.served


class _Marks(threading.local):
    speculating = False
    keeping = False
    capturing = False


class KilnBenchmarkWorker:
    """Helion's ``BenchmarkWorker`` interface on a kiln sandbox (see the module docstring)."""

    def __init__(self, sandbox: BenchmarkSandbox, screen_ms: int | None = None) -> None:
        """``screen_ms``: the window (ms) of a search timing run ahead of Helion (``None``: the
        job's own)."""
        self.sandbox = sandbox
        self.screen_ms = screen_ms
        self.stats = SandboxStats()
        self._lock = threading.Lock()
        self._ledger: dict[bytes, _Entry] = {}
        self._served: set[bytes] = set()
        self._kept: set[bytes] = set()  # ledger keys run ahead with ``keep``
        self._marks = _Marks()
        self._used = False

    # -- Helion's BenchmarkWorker interface --------------------------------------------------

    def alive(self) -> bool:
        """Whether a job ran since the last :meth:`shutdown` (Helion asks before releasing the
        finalists' argument copies the process holds)."""
        return self._used

    def run(self, job: Callable[[], Any], timeout: float) -> Any:
        """``job()`` in the sandbox within ``timeout`` s: its value, or the error Helion's own
        worker would raise (see the module docstring)."""
        if self._marks.capturing:
            raise _Captured(job)
        speculating = self._marks.speculating
        try:
            key: bytes | None = pickle.dumps(job)
        except Exception:
            key = None
        if key is None:
            if speculating:
                raise _Speculated(None)
            return self._deliver(self._execute(job, timeout))
        with self._lock:
            if speculating and key in self._served:
                raise _Speculated(None)
            entry = self._ledger.get(key)
            mine = entry is None
            if entry is None:
                entry = self._ledger[key] = _Entry()
        keeping = speculating and self._marks.keeping
        if mine:
            if keeping:
                with self._lock:
                    self._kept.add(key)
            served = Served(error=RuntimeError("kiln's benchmark job did not finish"))
            try:
                ran = self._screened(job) if speculating and not keeping else job
                served = self._execute(ran, timeout, ahead=speculating)
            finally:
                entry.set(served)
        else:
            served = entry.wait()
        if speculating:
            if mine:
                with self._lock:
                    self.stats.streamed += 1
                    self.stats.verified_ahead += keeping
            raise _Speculated(served)
        with self._lock:
            if self._ledger.get(key) is entry:
                del self._ledger[key]
            self._served.add(key)
            if not mine:
                self.stats.taken_from_stream += 1
                if key in self._kept:
                    self.stats.verified_taken += 1
            self._kept.discard(key)
        return self._deliver(served)

    def shutdown(self) -> None:
        """Stop the sandbox process (the next job starts a fresh one), as Helion stops its worker:
        after the search, and between finalists that must not share a process."""
        self.sandbox.close()
        self._used = False
        self.forget(kept=True)

    # -- ahead of Helion ---------------------------------------------------------------------

    def speculate(self, request: Callable[[], object], *, keep: bool = False) -> Served | None:
        """Call ``request`` (one of Helion's methods that builds a job and runs it on this worker)
        so that its job runs now and its outcome waits in the ledger for Helion's own request.
        ``keep``: the outcome waits past the batch's :meth:`forget` (a re-benchmark Helion asks
        for after the batch), and the job keeps its own window (no screening).
        ``None``: nothing ran (Helion's method built no job, or Helion already took it)."""
        self._marks.speculating = True
        self._marks.keeping = keep
        try:
            request()
        except _Speculated as done:
            return done.served
        except Exception:  # Helion's method failed before a job: Helion's own call will say why
            return None
        finally:
            self._marks.speculating = False
            self._marks.keeping = False
        return None

    def capture(self, request: Callable[[], object]) -> Callable[[], Any] | None:
        """The job ``request`` (one of Helion's methods that builds a job and runs it on this
        worker) builds, not run; ``None`` when it builds none (Helion cannot send the config to
        a worker)."""
        self._marks.capturing = True
        try:
            request()
        except _Captured as captured:
            return captured.job
        finally:
            self._marks.capturing = False
        return None

    def call(self, job: Callable[[], Any], timeout: float) -> Served:
        """``job`` (kiln's, e.g. a final-round pass) in the sandbox within ``timeout`` s, outside
        the ledger: its value, or the error Helion's own worker would raise for what ended it
        (the failure also in :attr:`SandboxStats.skipped`)."""
        return self._execute(job, timeout)

    def forget(self, *, kept: bool = False) -> None:
        """Drop every outcome Helion did not take (a batch is over; a job still running ahead
        finishes, and its outcome is dropped), except those run ahead with ``keep`` unless
        ``kept`` (the next batch begins, or the worker shuts down)."""
        with self._lock:
            if kept:
                self._kept.clear()
            self._ledger = {key: entry for key, entry in self._ledger.items() if key in self._kept}
            self._served.clear()

    # -- internals ---------------------------------------------------------------------------

    def _screened(self, job: Callable[[], Any]) -> Callable[[], Any]:
        """The job to run ahead of Helion for ``job``: its screening where it is a search timing
        with a longer window than ``screen_ms``, else ``job`` itself."""
        if self.screen_ms is None:
            return job
        short: Callable[[], Any] | None = compat.screened(job, self.screen_ms)
        if short is None:
            return job
        with self._lock:
            self.stats.screened += 1
        return short

    def _execute(self, job: Callable[[], Any], timeout: float, *, ahead: bool = False) -> Served:
        label = compat.job_label(job)
        env = {_CACHE_VARIABLE: os.environ[_CACHE_VARIABLE]} if _CACHE_VARIABLE in os.environ else {}
        started = time.perf_counter()
        outcome = self.sandbox.call(HelionJob(job), label=label, env=env, timeout_s=timeout)
        ended = time.perf_counter()
        ran = outcome.value.seconds if isinstance(outcome.value, JobReturned | JobRaised) else 0.0
        with self._lock:
            self.stats.spans.append(JobSpan(type(job).__name__, ahead, started, ended))
            self.stats.jobs += 1
            self.stats.seconds += outcome.seconds
            kind = self.stats.kinds.setdefault(type(job).__name__, JobKindStats())
            kind.calls += 1
            kind.seconds += outcome.seconds
            kind.job_seconds += ran
            self._used = True
        if outcome.failure is None:
            value = outcome.value
            if isinstance(value, JobReturned):
                return Served(value=value.value)
            if isinstance(value, JobRaised):
                if value.error is not None:
                    return Served(error=value.error)
                return Served(
                    error=compat.BenchmarkSubprocessError(
                        f"{label} raised an exception that cannot be pickled: {value.text}"
                    )
                )
            return Served(error=compat.BenchmarkSubprocessError(f"{label}: unexpected reply {value!r}"))
        failure = outcome.failure
        with self._lock:
            self.stats.skipped.append(SkippedJob(label, str(failure)))
        return Served(error=self._helions_error(label, failure))

    def _helions_error(self, label: str, failure: CallFailure) -> BaseException:
        """The exception Helion's own worker raises for what ended the call (kiln's text inside)."""
        if isinstance(failure, SandboxStartError):
            error: BaseException = SandboxUnavailableError(str(failure))
        elif isinstance(failure, CallTimeoutError):
            error = compat.BenchmarkTimeout(str(failure))
            self.sandbox.start()  # the replacement warms up while Helion goes on
        elif isinstance(failure, CallCrashedError) and failure.returncode == STICKY_EXIT:
            error = SandboxCudaError(label, failure.detail)
            self.sandbox.start()
        elif isinstance(failure, CallCrashedError):
            error = compat.BenchmarkWorkerDied(str(failure))
            self.sandbox.start()
        else:  # the job could not be sent, or its reply could not be read
            error = compat.BenchmarkWorkerDied(str(failure))
        error.__cause__ = failure
        return error

    @staticmethod
    def _deliver(served: Served) -> Any:
        if served.error is not None:
            raise served.error
        return served.value

"""A stand-in for kiln's benchmark sandbox in Helion's CPU tests: it only replaces what needs a GPU.

:class:`StandInSandbox` has the sandbox's interface (``call``, ``start``, ``close``). Each call's
callable is pickled and unpickled first, as the sandbox's socket would carry it; the Helion job
inside (a ``BenchmarkJob``, an ``AccuracyCheckJob``, ...) is recorded, and the answer is what the
sandbox process would send: ``JobReturned`` with a fixed latency or a passing accuracy result (a
plain function runs here), or, for a job ``fail`` picks, the failure the sandbox reports for a
crashed, hung or CUDA-broken process. A final-round pass (kiln's ``FinalistRunsJob`` around Helion's
``BenchmarkJob``) gets ``runs(job)``: every run's time, by default :data:`RUNS` runs of the latency.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.helion.sandbox_jobs import FinalistRunsJob, HelionJob, JobReturned
from triton_kiln.sandbox.call_messages import CallFailure, CallOutcome

LATENCY_MS = 0.25
RUNS = 20  # runs a final-round pass sends back


def job_source(job: Any) -> str:
    """The generated Helion code a job runs (``""`` for a job without one)."""
    spec = getattr(job, "fn_spec", None)
    return str(getattr(spec, "source_code", "")) if spec is not None else ""


@dataclass
class StandInSandbox:
    """Answers Helion's jobs as a sandbox on a GPU would (see the module docstring)."""

    fail: Callable[[Any, str], CallFailure | None] = lambda job, label: None
    latency: Callable[[Any], float] = lambda job: LATENCY_MS
    runs: Callable[[Any], list[float]] | None = None  # a final-round pass's runs (None: RUNS x latency)
    jobs: list[Any] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    envs: list[dict[str, str]] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    starts: int = 0
    closes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(
        self,
        fn: Callable[[], Any],
        *,
        label: str,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> CallOutcome:
        carried = pickle.loads(pickle.dumps(fn))
        assert isinstance(carried, HelionJob)
        job = carried.job
        with self._lock:
            self.jobs.append(job)
            self.labels.append(label)
            self.envs.append(dict(env or {}))
            self.threads.append(threading.current_thread().name)
        failure = self.fail(job, label)
        if failure is not None:
            return CallOutcome(None, failure, failure.seconds)
        from triton_kiln.helion import compat

        if isinstance(job, FinalistRunsJob):
            assert isinstance(job.job, compat.BenchmarkJob)  # Helion's own timing job inside
            runs = self.runs(job) if self.runs is not None else [self.latency(job)] * RUNS
            return CallOutcome(JobReturned(runs), None, 0.01)
        if isinstance(job, compat.BenchmarkJob):
            return CallOutcome(JobReturned(self.latency(job)), None, 0.01)
        if isinstance(job, compat.AccuracyCheckJob):
            return CallOutcome(JobReturned(compat.AccuracyCheckResult(ok=True)), None, 0.01)
        return CallOutcome(carried(), None, 0.01)  # a plain function: run here, as the sandbox would

    def start(self) -> None:
        self.starts += 1

    def close(self) -> None:
        self.closes += 1


# -- callables a real call sandbox runs as Helion jobs (the sandbox process imports this module) --


def returns_latency() -> float:
    return LATENCY_MS


def raises_value_error() -> float:
    raise ValueError("a job's own error")


def aborts() -> float:
    import ctypes
    import os

    os.write(2, b"python: kiln-injected abort in a benchmark\n")
    ctypes.CDLL(None).abort()
    return 0.0


def hangs() -> float:
    import time

    while True:
        time.sleep(1)


def sticky_cuda_error() -> float:
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def warmup_fails() -> None:
    raise ImportError("no torch in this interpreter (kiln-injected)")

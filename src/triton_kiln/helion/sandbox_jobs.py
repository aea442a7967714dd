"""What runs in kiln's benchmark sandbox for Helion: Helion's own jobs, wrapped so their outcome
comes back as Helion's worker would send it.

::

    KilnBenchmarkWorker (autotuning process)          call sandbox process (own CUDA context)
      HelionJob(job) pickled -- CallItem ---------->  job()   (Helion's BenchmarkJob,
                                                               AccuracyCheckJob, or a function
                                                               such as release_private_kernel_args)
                          <-- CallReturned(...) ----  JobReturned(value)   it returned
                                                      JobRaised(error)     it raised (the exception
                                                                           itself, or its text when it
                                                                           cannot be pickled)
                          <-- CallRaised(sticky) ---  a sticky CUDA error (an illegal memory access):
                                                      re-raised, so the process replies and exits

The process is warmed up by :func:`warm_up` (torch, Helion's job module, a CUDA context) before
it says it is ready, so the first benchmark does not pay for them. :func:`make_sandbox` makes kiln's
process-wide one (:func:`triton_kiln.helion.config.sandbox`).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triton_kiln.sandbox.call_client import CallSandbox
from triton_kiln.sandbox.call_messages import is_sticky


@dataclass(frozen=True)
class JobReturned:
    """The job returned ``value`` (a latency in ms, an ``AccuracyCheckResult``, ``None``...);
    ``seconds``: how long the job ran in the sandbox (its load of Helion's generated code and its
    timing loop, without the call's transport)."""

    value: Any
    seconds: float = 0.0


@dataclass(frozen=True)
class JobRaised:
    """The job raised: ``error`` is the exception (traceback dropped), or ``None`` with ``text``
    when it cannot be pickled."""

    error: BaseException | None
    text: str
    seconds: float = 0.0

    @classmethod
    def of(cls, error: Exception, seconds: float = 0.0) -> JobRaised:
        error.__traceback__ = None  # it pins the job's tensors
        text = f"{type(error).__module__}.{type(error).__qualname__}: {error}"
        try:
            pickle.dumps(error)
        except Exception:
            return cls(None, text, seconds)
        return cls(error, text, seconds)


@dataclass(frozen=True)
class HelionJob:
    """One of Helion's benchmark-worker jobs (any picklable zero-argument callable), run in the sandbox."""

    job: Callable[[], Any]

    def __call__(self) -> JobReturned | JobRaised:
        started = time.perf_counter()
        try:
            value = self.job()
        except Exception as exc:
            if is_sticky(f"{type(exc).__name__}: {exc}"):
                raise  # this process's CUDA context is gone: the call worker replies, then exits
            return JobRaised.of(exc, time.perf_counter() - started)
        return JobReturned(value, time.perf_counter() - started)


@dataclass(frozen=True)
class FinalistRunsJob:
    """One pass of kiln's final round over one of Helion's finalists: Helion's own ``BenchmarkJob``
    (its generated code, its saved arguments, its ``do_bench``), asked for every run's time
    rather than their median, so the race pools a finalist's runs across its passes as kiln's
    final round does (:mod:`triton_kiln.helion.finalists`). Returns the runs (ms)."""

    job: Callable[[], Any]

    @property
    def fn_spec(self) -> Any:
        """The Helion job's generated function (how kiln's logs name the job)."""
        return getattr(self.job, "fn_spec", None)

    def __call__(self) -> list[float]:
        from triton_kiln.helion import compat

        with compat.every_run_of_benchmark_jobs():
            runs = self.job()
        if isinstance(runs, int | float):
            return [float(runs)]
        return [float(run) for run in runs]


def warm_up() -> None:
    """The sandbox's warm-up: torch, Helion's job module and, when a GPU is visible, a CUDA context."""
    import helion.autotuner.benchmark_job  # noqa: F401  (what unpickling the first job imports)
    import torch

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()


def make_sandbox() -> CallSandbox:
    """kiln's benchmark sandbox for Helion (not started: :meth:`~CallSandbox.start` or the first call
    starts it). Each call carries Helion's own timeout (``autotune_benchmark_timeout``)."""
    from triton_kiln import settings

    return CallSandbox(timeout_s=settings.current().bench_timeout_s, warmup=warm_up)

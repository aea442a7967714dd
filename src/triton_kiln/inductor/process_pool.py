"""What ``AsyncCompile.process_pool()`` returns while :mod:`triton_kiln.inductor` is installed.

::

    Inductor (parent)                        InductorPool (here)                 kiln's pool
    -----------------                        -------------------                 -----------
    submit(_get_ready)  ------------------>  a finished future: ready at once
    submit(_worker_compile_triton,  ------>  kiln's sidecar process (.sidecar), once it is ready:
           load_kernel, env, config)         the same job as Inductor's worker would run, the
                                             steps below in its threads and its own kiln pool;
                                             until then (or with KILN_INDUCTOR_SIDECAR=0, or
                                             after it died) a thread of this process:
                                               load the kernel's module (private copy)
                                               precompile(warm_cache_only=True):
                                                 every config -> CompileRequest -------> workers
                                                 (Inductor's helpers)          <------- binaries
                                                 (a config in Triton's cache: loaded, not sent)
                                                 seed Triton's cache; Inductor's own
                                                 _precompile_config: cache hits
    Future <-------------------------------    the kernel, pickled and unpickled as a
                                               worker sends it, and the elapsed us
    submit(anything else)  --------------->  Inductor's own pool (its original
                                             process_pool(), made on first need)

The sidecar, or the thread, does what Inductor's worker does, minus the compile: the module is
executed and its ``CachingAutotuner`` made, and the object returned is exactly the one Inductor's
worker would have pickled. Compiles run in kiln's workers, which never import torch.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from triton_kiln.inductor.progress import InductorProgress
from triton_kiln.inductor.sidecar import Sidecar
from triton_kiln.triton_compat import inductor as compat

_job = threading.local()  # ``active`` while this thread runs a compile job (compile_job)


class InductorPool:
    """Inductor's process pool, as kiln serves it (see the module docstring)."""

    def __init__(
        self,
        inductor_pool: Callable[[], Any],
        threads: int,
        sidecar: Sidecar | None = None,
        progress: InductorProgress | None = None,
    ) -> None:
        self._inductor_pool = inductor_pool
        self.sidecar = sidecar
        self._progress = progress
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kiln-inductor")
        self._lock = threading.Lock()
        self.triton_jobs = 0
        self.other_jobs = 0

    def start_sidecar(self) -> None:
        """Start the sidecar, if any, in the background (idempotent; the first graph lowered
        starts it: :func:`triton_kiln.inductor.hooks._on_lowering`)."""
        if self.sidecar is not None:
            self.sidecar.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if fn is compat.ready_job():
            ready: Future[Any] = Future()
            ready.set_result(fn())
            return ready
        if compat.is_triton_compile_job(fn):
            with self._lock:
                self.triton_jobs += 1
            in_thread = functools.partial(self._executor.submit, compile_job, *args, **kwargs)
            if self.sidecar is not None:
                job = self.sidecar.submit(fn, args, kwargs, fallback=in_thread)
            else:
                job = in_thread()
            if self._progress is not None:
                self._progress.watch(job)
            return job
        with self._lock:
            self.other_jobs += 1
        pool_future: Future[Any] = self._inductor_pool().submit(fn, *args, **kwargs)
        return pool_future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the sidecar and this pool's threads (Inductor's own pool, if made, is Inductor's
        to shut down). Jobs the sidecar still held run in the threads first."""
        if self.sidecar is not None:
            self.sidecar.close()
        self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)


def compile_job(
    load_kernel: Callable[[], Any], extra_env: dict[str, str], extra_config: dict[str, Any]
) -> tuple[Any, int]:
    """``_worker_compile_triton`` with its compiles in kiln's pool.

    ``extra_env`` and ``extra_config`` are the parent's own values (Inductor copies them from
    this process's environment and config for its worker), so they are in force here already.
    """
    del extra_env, extra_config
    start = time.time_ns()
    _job.active = True
    try:
        kernel = compat.load_job_kernel(load_kernel)
        compat.precompile_warm(kernel)  # _precompile_worker: kiln (hooks.py)
    finally:
        _job.active = False
    elapsed_us = (time.time_ns() - start) // 1000
    return compat.as_sent_by_worker(kernel), elapsed_us


def in_compile_job() -> bool:
    """Whether this thread is running a compile job (its kernel is counted as the job)."""
    return bool(getattr(_job, "active", False))

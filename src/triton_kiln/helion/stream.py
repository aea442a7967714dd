"""Benchmark each config of a Helion batch as its compile lands, while the rest still compile.

Helion's ``benchmark(configs)`` generates every config's code, waits for every precompile
(``PrecompileFuture.wait_for_all``), then benchmarks the configs one by one. Through kiln the
compiles run in kiln's pool, and the benchmarks in kiln's sandbox; this stream fills the wait::

    kiln manager thread           stream thread (one per batch)            Helion (caller thread)
      compile done  -- landed --> queue: place the binary in Triton's     wait_for_all(futures)
                                  cache, then Helion's own timing job          ...
                                  (and its accuracy check when the timing      ...
                                  succeeded) through worker.speculate:    benchmark loop, config
                                  the sandbox runs it now, the outcome    by config: worker.run(job)
                                  waits in the worker's ledger  --------> finds the outcome there,
                                                                          or waits for the job in
                                                                          flight, or runs it itself
      stop(): queued items dropped; the one in flight finishes (or is left running on Ctrl-C);
      what Helion did not take is forgotten

The jobs are Helion's own, built by Helion's own methods with Helion's repetitions, so a
streamed timing is the one Helion would have measured after the barrier, only earlier: the search,
its order and its bookkeeping (failures, metrics, logs) stay Helion's, in its thread. The GPU
runs one job at a time (the sandbox is one process); what overlaps is the compiles on the CPU
with the benchmarks on the GPU.

**Verifying ahead** (``KILN_HELION_VERIFY_AHEAD``, where the search re-benchmarks: a threshold
above 1, effort full). After each batch Helion re-times, with a longer window, every member
whose timing is within its threshold of the best. When no config has landed for a moment
(:data:`IDLE_BEFORE_VERIFY_S`) but the batch's barrier still holds (a slow compile; at effort
full a config can compile for Helion's whole ``autotune_compile_timeout``), the GPU would idle:
the stream runs those re-benchmark jobs then, best timing first, for the batch's configs within
the threshold of the best timing it has seen in this search, each once. Their outcomes outlive
the batch in the worker's ledger (``keep``) until Helion's re-benchmark takes them; the next
batch drops what it did not. A config that lands meanwhile waits for at most the one
re-benchmark in flight.
"""

from __future__ import annotations

import functools
import math
import queue
import threading
from collections.abc import Callable
from typing import Any

from triton_kiln.helion.sandbox_worker import KilnBenchmarkWorker

_STOP = object()
IDLE_BEFORE_VERIFY_S = 0.2
"""How long no config lands before the stream verifies ahead: a gap between landings shorter
than this is not the wait for a slow compile."""


class BenchmarkStream:
    """One batch's stream thread (see the module docstring)."""

    def __init__(
        self,
        worker: KilnBenchmarkWorker,
        timing: Callable[[Any], object],
        check: Callable[[Any], object] | None,
        verify: Verify | None = None,
    ) -> None:
        """``timing(fn)`` / ``check(fn)``: Helion's methods that build and run a config's timing and
        accuracy-check jobs on ``worker`` (``check`` ``None``: Helion checks no output);
        ``verify``: its re-benchmark, run ahead while the barrier holds (``None``: not)."""
        self.worker = worker
        self._timing = timing
        self._check = check
        self._verify = verify
        self._unverified: list[tuple[float, Any]] = []  # (search timing, fn), not verified ahead yet
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kiln-helion-stream", daemon=True)
        self._thread.start()

    def landed(self, fn: Any, place: Callable[[], bool]) -> None:
        """A config's compile finished: benchmark ``fn`` once ``place()`` has put its binary in
        Triton's cache (``place()`` returns ``False`` when there is none: the compile failed)."""
        if not self._stopping.is_set():
            self._queue.put((fn, place))

    def stop(self, wait: bool = True) -> None:
        """Drop what is queued; ``wait``: until the job in flight has finished. Then forget what
        Helion did not take (re-benchmarks run ahead stay for Helion's re-benchmark)."""
        self._stopping.set()
        self._queue.put(_STOP)
        if wait:
            self._thread.join()
        self.worker.forget()

    def _loop(self) -> None:
        while True:
            item = self._next()
            if item is _STOP or self._stopping.is_set():
                return
            fn, place = item
            try:
                if not place():
                    continue
            except Exception:  # Helion's own precompile result reports a compile that cannot be placed
                continue
            served = self.worker.speculate(functools.partial(self._timing, fn))
            if served is None or served.error is not None:
                continue
            perf = served.value
            if self._verify is not None and isinstance(perf, float | int) and math.isfinite(perf):
                self._unverified.append((float(perf), fn))
                self._verify.saw(float(perf))
            if self._check is not None:
                self.worker.speculate(functools.partial(self._check, fn))

    def _next(self) -> Any:
        """The next landed config; once none has come for :data:`IDLE_BEFORE_VERIFY_S`, the
        re-benchmarks to run ahead, one at a time, until one comes."""
        verify = self._verify
        if verify is None:
            return self._queue.get()
        idle = False
        while True:
            try:
                return self._queue.get(timeout=IDLE_BEFORE_VERIFY_S) if not idle else self._queue.get_nowait()
            except queue.Empty:
                idle = True
            fn = self._to_verify(verify) if not self._stopping.is_set() else None
            if fn is None:
                return self._queue.get()
            self.worker.speculate(functools.partial(verify.run, fn), keep=True)

    def _to_verify(self, verify: Verify) -> Any:
        """The fastest config of the batch not verified ahead yet, taken off the list, if it is
        within the threshold (the slower ones are then too); else ``None``."""
        if not self._unverified:
            return None
        at = min(range(len(self._unverified)), key=lambda i: self._unverified[i][0])
        if self._unverified[at][0] >= verify.threshold * verify.best:
            return None
        return self._unverified.pop(at)[1]


class Verify:
    """What verifying ahead needs across one search's batches: Helion's re-benchmark job builder
    (``run(fn)``), its threshold, and the best search timing seen so far."""

    def __init__(self, run: Callable[[Any], object], threshold: float) -> None:
        self.run = run
        self.threshold = threshold
        self.best = math.inf
        self._lock = threading.Lock()

    def saw(self, perf: float) -> None:
        with self._lock:
            self.best = min(self.best, perf)

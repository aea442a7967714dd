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
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from triton_kiln.helion.sandbox_worker import KilnBenchmarkWorker

_STOP = object()


class BenchmarkStream:
    """One batch's stream thread (see the module docstring)."""

    def __init__(
        self,
        worker: KilnBenchmarkWorker,
        timing: Callable[[Any], object],
        check: Callable[[Any], object] | None,
    ) -> None:
        """``timing(fn)`` / ``check(fn)``: Helion's methods that build and run a config's timing and
        accuracy-check jobs on ``worker`` (``check`` ``None``: Helion checks no output)."""
        self.worker = worker
        self._timing = timing
        self._check = check
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
        Helion did not take."""
        self._stopping.set()
        self._queue.put(_STOP)
        if wait:
            self._thread.join()
        self.worker.forget()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP or self._stopping.is_set():
                return
            fn, place = item
            try:
                if not place():
                    continue
            except Exception:  # Helion's own precompile result reports a compile that cannot be placed
                continue
            served = self.worker.speculate(functools.partial(self._timing, fn))
            if self._check is not None and served is not None and served.error is None:
                self.worker.speculate(functools.partial(self._check, fn))

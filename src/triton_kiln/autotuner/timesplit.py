"""Where one tuning run's wall time went: waiting for the sandbox, compiling, benchmarking, final round.

::

    TuningSession.tune (the tuning thread)          compile pool (its own threads)
      split.watch(compile futures) --------------->  each future's done-callback stamps the time
      first pass: evaluate(...) per config
        outcome = bencher.bench(...)
        split.saw(outcome, seconds)                   the call's time -> bench_s; the native
                                                      sandbox's outcome says how much of it
                                                      was waiting for the sandbox to be ready
      with split.phase("final_s"): final_round(...)   benchmark calls in it -> final_s
      split.as_dict(started, wall) -> TuningRun.split

The parts, in seconds:

``sandbox_wait_s``
    Benchmarks waited for the sandbox to be ready (its start, import, GPU context), summed over
    the run: the native sandbox reports it in ``outcome.sandbox["wait_s"]``. 0 for in-process
    benchmarks; the torch sandbox does not report it, so there its wait counts as benchmarking.
``compile_s``
    From the start of the run until the last compile finished (or failed). Compiles run in the
    pool while the tuning thread benchmarks the configs already compiled, so this part
    **overlaps** the others and is not part of their sum.
``bench_s``
    Inside the first pass's benchmark calls (``Bencher.bench``: timing each config and, in the
    sandbox, checking its outputs), less their sandbox wait.
``final_s``
    Inside the final round's benchmark calls (the best few timed again, in full), less their
    sandbox wait; 0 when a user ``do_bench`` times the configs (one pass, as Triton).
``sandbox_inputs_s``, ``sandbox_load_s``, ``sandbox_check_s``, ``sandbox_timing_s``
    (native sandbox only) Of ``bench_s + final_s``: handing the inputs over (once per sandbox),
    and what the sandbox itself reported spending on loading binaries, on the checked run with
    its output check, and in the timing loop; the rest of those two
    parts is the round trip (messages, the caller's side). Present when the sandbox reported it.
``sandbox_check_run_s``, ``sandbox_check_compare_s``, ``sandbox_check_fingerprint_s``
    (native sandbox only) Of ``sandbox_check_s``: the checked run (inputs restored, one launch,
    synchronized), the comparison of its outputs, and within the comparison the host reads and
    hashes that name new representatives (the rest of ``sandbox_check_s`` restores the inputs).
``other_s``
    ``wall - sandbox_wait_s - bench_s - final_s``: the tuning thread was in no benchmark call.
    Mostly waiting for compiles while nothing compiled was left to benchmark; also preparing
    the candidates, comparing in-process outputs with the reference, writing the tuning database.

So ``sandbox_wait_s + bench_s + final_s + other_s == wall`` (the tuning thread's time, one part
after another), and ``compile_s <= wall``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from triton_kiln.sandbox.native_client import NativeBenchOutcome

_SANDBOX_PARTS = (  # the native sandbox's own timings -> the split's keys
    ("inputs_s", "sandbox_inputs_s"),
    ("load_s", "sandbox_load_s"),
    ("check_s", "sandbox_check_s"),
    ("bench_s", "sandbox_timing_s"),
)
_CHECK_PARTS = (  # of sandbox_check_s, where the sandbox reports them
    ("check_run_s", "sandbox_check_run_s"),
    ("check_compare_s", "sandbox_check_compare_s"),
    ("check_fingerprint_s", "sandbox_check_fingerprint_s"),
)


class TimeSplit:
    """Accumulates one tuning run's time split (see the module's documentation)."""

    def __init__(self) -> None:
        self.sandbox_wait_s = 0.0
        self.phases = {"bench_s": 0.0, "final_s": 0.0}
        self.current = "bench_s"  # the part benchmark calls count toward now
        self.inside = dict.fromkeys((ours for _, ours in _SANDBOX_PARTS), 0.0)
        self.check_parts: dict[str, float] = {}
        self._inside_seen = False
        self._compiled_at: list[float] = []  # appended from the pool's threads (list.append is atomic)

    def watch(self, futures: Iterable[Future[Any]]) -> None:
        """Stamp the time each compile finishes (at once for one already done)."""
        for future in futures:
            future.add_done_callback(lambda _: self._compiled_at.append(time.monotonic()))

    def saw(self, outcome: Any, seconds: float) -> None:
        """Count a benchmark call that took ``seconds``: the sandbox wait its outcome reports
        (the native sandbox's), the rest toward the current part."""
        waited = 0.0
        if isinstance(outcome, NativeBenchOutcome):
            waited = min(seconds, float(outcome.sandbox.get("wait_s", 0.0)))
            for theirs, ours in _SANDBOX_PARTS:
                value = outcome.sandbox.get(theirs)
                if isinstance(value, int | float):
                    self.inside[ours] += float(value)
                    self._inside_seen = True
            for theirs, ours in _CHECK_PARTS:
                value = outcome.sandbox.get(theirs)
                if isinstance(value, int | float):
                    self.check_parts[ours] = self.check_parts.get(ours, 0.0) + float(value)
        self.sandbox_wait_s += waited
        self.phases[self.current] += max(0.0, seconds - waited)

    @contextlib.contextmanager
    def phase(self, part: str) -> Iterator[None]:
        """Benchmark calls within the block count toward ``part`` (``"bench_s"`` outside any)."""
        outer, self.current = self.current, part
        try:
            yield
        finally:
            self.current = outer

    def as_dict(self, started: float, wall_s: float) -> dict[str, float]:
        """The split of a run that began at ``started`` (``time.monotonic()``) and took ``wall_s``."""
        compile_s = max(self._compiled_at, default=started) - started
        busy = self.sandbox_wait_s + self.phases["bench_s"] + self.phases["final_s"]
        return {
            "sandbox_wait_s": self.sandbox_wait_s,
            "compile_s": min(max(0.0, compile_s), wall_s),
            "bench_s": self.phases["bench_s"],
            "final_s": self.phases["final_s"],
            "other_s": max(0.0, wall_s - busy),
            **(self.inside if self._inside_seen else {}),
            **self.check_parts,
        }

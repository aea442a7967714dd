"""What one tuning run shows while it runs: a progress bar on the terminal.

The session (:mod:`.session`) feeds a :class:`TuningProgress` as results arrive::

    pool thread:  a compile finished -> compiled_one(ok)   (watch(future): its done callback)
    session:      every ConfigResult it records -> record(result)   (screening, output rule,
                  final round: the latest result per config counts)
                  final round begins -> phase("final round: 3 configs")
                  a line for the reader -> write(text)          (printed above the bar)
    end:          finish(wall_s) clears the bar and prints two lines that stay; an exception
                  (a failed run, Ctrl-C) clears it and prints nothing (``with TuningProgress``)

Two lines while it runs (a config's label rarely fits beside the counts in 100 columns), and
two when it ends::

    tuning matmul_kernel: 40/72 |██████      | 00:04, compiled 52/72, timed 39, failed 1
      best 0.2186 ms: BLOCK_M=256, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=4, num_ctas=1

    tuned matmul_kernel: 72 configs in 8.2 s: 70 timed, 2 failed
      best 0.2186 ms: BLOCK_M=256, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=4, num_ctas=1

Shown when ``enabled`` is ``True``, or when it is ``None`` (``KILN_PROGRESS`` unset) and the
stream is a terminal; otherwise nothing is written.
"""

from __future__ import annotations

import functools
import sys
import threading
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TextIO

from triton_kiln.tuning.results import ConfigResult

_TICK_S = 0.5  # how often the elapsed time is redrawn while nothing else happens


class TuningProgress:
    """The progress of one tuning run of ``name`` over ``total`` configs (see the module docs)."""

    def __init__(self, name: str, total: int, enabled: bool | None, stream: TextIO | None = None) -> None:
        self.name = name
        self.total = total
        self.compiled = 0  # compiles that produced a binary
        self.compile_failures = 0
        self.results: dict[str, ConfigResult] = {}  # label -> its latest result
        self.stage = ""  # "" while screening; "final round: ..." after
        self._lock = threading.Lock()
        self._stream = sys.stderr if stream is None else stream
        show = _is_terminal(self._stream) if enabled is None else enabled
        self._bar: Any = None  # line 1: the bar and the counts (tqdm)
        self._status: Any = None  # line 2: the best config so far (tqdm, text only)
        if show:
            self._bar, self._status = self._make_bars()
            self._redraw()  # the counts from the start
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self._bar is not None:
            self._ticker = threading.Thread(target=self._tick, name="kiln-tuning-progress", daemon=True)
            self._ticker.start()

    @property
    def shown(self) -> bool:
        return self._bar is not None

    # -- what the session reports -------------------------------------------------------------

    def watch(self, future: Future[Any], *, configs: int = 1) -> None:
        """Count ``future``'s compile when it finishes, once per config that shares it."""
        future.add_done_callback(functools.partial(self._compile_done, configs=configs))

    def _compile_done(self, future: Future[Any], *, configs: int) -> None:
        ok = not future.cancelled() and future.exception() is None
        for _ in range(configs):
            self.compiled_one(ok)

    def compiled_one(self, ok: bool) -> None:
        """A compile finished (called from the pool's thread): ``ok`` when it made a binary."""
        with self._lock:
            if ok:
                self.compiled += 1
            else:
                self.compile_failures += 1
        self._redraw()

    def record(self, result: ConfigResult) -> None:
        """A config's result, new or revised (the latest one per config counts)."""
        with self._lock:
            self.results[result.label] = result
        self._redraw()

    def phase(self, stage: str) -> None:
        """A new stage of the run (the final round), shown before the counts."""
        with self._lock:
            self.stage = stage
        self._redraw()

    def write(self, text: str, stream: TextIO | None = None) -> None:
        """Print ``text`` (to ``stream``, default stdout) without breaking the bar."""
        out = sys.stdout if stream is None else stream
        if self._bar is None:
            print(text, file=out, flush=True)
            return
        from tqdm import tqdm

        tqdm.write(text, file=out)

    def finish(self, wall_s: float) -> None:
        """The run ended with a best config: the bar gives way to two lines that stay."""
        if self._bar is None:
            return
        self.close()
        from tqdm import tqdm

        for line in self.final_lines(wall_s):
            tqdm.write(line, file=self._stream)

    def close(self) -> None:
        """Clear the bar (a failed or interrupted run, or before :meth:`finish`'s lines); safe
        to call twice."""
        self._stop_ticker()
        bar, status = self._bar, self._status
        self._bar = self._status = None
        for line in (status, bar):
            if line is not None:
                line.close()

    def __enter__(self) -> TuningProgress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()  # after finish() there is nothing left to close

    # -- what the reader sees -----------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        with self._lock:
            results = list(self.results.values())
            compiled = self.compiled
        failed = sum(1 for r in results if r.status != "ok")
        return {
            "done": len(results),
            "compiled": compiled,
            "timed": len(results) - failed,
            "failed": failed,
        }

    def best(self) -> ConfigResult | None:
        """The fastest config so far (``None`` before the first timing)."""
        with self._lock:
            timed = [r for r in self.results.values() if r.status == "ok" and r.runtime_ms is not None]
        return min(timed, key=lambda r: r.runtime_ms or 0.0) if timed else None

    def summary(self) -> str:
        """The text after the bar: the stage and the counts."""
        counts = self.counts()
        parts = [self.stage] if self.stage else []
        parts.append(
            f"compiled {counts['compiled']}/{self.total}, timed {counts['timed']}, failed {counts['failed']}"
        )
        return ", ".join(parts)

    def best_line(self) -> str:
        """The second line: the fastest config so far."""
        best = self.best()
        return "best: none timed yet" if best is None else f"best {best.runtime_ms:.4g} ms: {best.label}"

    def final_lines(self, wall_s: float) -> list[str]:
        """What stays on the terminal when the run found its best config."""
        counts = self.counts()
        return [
            f"tuned {self.name}: {self.total} configs in {wall_s:.1f} s: "
            f"{counts['timed']} timed, {counts['failed']} failed",
            "  " + self.best_line(),
        ]

    # -- the bar ------------------------------------------------------------------------------

    def _make_bars(self) -> tuple[Any, Any]:
        from tqdm import tqdm

        tqdm.monitor_interval = 0  # no monitor thread
        common = {"file": self._stream, "leave": False, "dynamic_ncols": True}
        bar = tqdm(
            total=self.total,
            desc=f"tuning {self.name}",
            position=0,
            bar_format="{desc}: {n_fmt}/{total_fmt} |{bar:12}| {elapsed}{postfix}",
            **common,
        )
        status = tqdm(total=0, desc=self.best_line(), position=1, bar_format="  {desc}", **common)
        return bar, status

    def _redraw(self) -> None:
        bar, status = self._bar, self._status
        if bar is None or status is None:
            return
        bar.n = min(self.counts()["done"], self.total)
        bar.set_postfix_str(self.summary(), refresh=False)
        status.set_description_str(self.best_line(), refresh=False)
        bar.refresh()
        status.refresh()

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            bar = self._bar
            if bar is None:
                return
            bar.refresh()

    def _stop_ticker(self) -> None:
        self._stop.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False

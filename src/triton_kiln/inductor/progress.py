"""What Inductor's compiles and timings show while they run: one line on the terminal.

The hooks (:mod:`.hooks`) feed one :class:`InductorProgress` for the process::

    InductorPool.submit(a Triton job)         -> watch(future): started; its done callback: done
    _precompile_worker in this process, outside a job (the serial path) -> with compiling()
    a GPU timing of Inductor's (benchmark_gpu; a nested one counts once) -> with timing(): timed
    a template choice timed in kiln's sandbox -> timed_one()

    kiln inductor: 12/14 kernels |████████    | 00:03, timed 40, failed 1

Inductor compiles graph by graph, with the program's own output between them, so the line
appears with the first compile or timing and is cleared once nothing has been in flight for
``idle_s``; the next one starts its counts again. Shown when ``enabled`` is ``True``, or when it
is ``None`` (``KILN_PROGRESS`` unset) and the stream is a terminal; otherwise nothing is drawn
and no thread runs. Only the process that called ``install()`` draws it: kiln's Inductor sidecar
installs with ``KILN_PROGRESS=0``, and its jobs are counted here as they finish.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, TextIO

from triton_kiln.progress_bar import is_terminal

IDLE_S = 1.0
"""How long nothing may be in flight before the line is cleared."""
_TICK_S = 0.25  # how often the elapsed time is redrawn and the idle time checked


class InductorProgress:
    """The line of Inductor's compiles and timings (see the module docstring)."""

    def __init__(self, enabled: bool | None, stream: TextIO | None = None, idle_s: float = IDLE_S) -> None:
        self._stream = sys.stderr if stream is None else stream
        self.shown = is_terminal(self._stream) if enabled is None else enabled
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._local = threading.local()  # depth of this thread's timings (nested ones count once)
        self.started = 0  # Triton kernels whose compile started since the line appeared
        self.compiled = 0
        self.failed = 0
        self.timed = 0
        self._timing = 0  # timings running now
        self._quiet_since: float | None = None
        self._bar: Any = None
        self._ticker: threading.Thread | None = None
        self._closed = False

    # -- what the hooks report -----------------------------------------------------------------

    def watch(self, future: Future[Any]) -> None:
        """A kernel's compile started; ``future`` finishes it (an exception: failed)."""
        if not self.shown:
            return
        with self._lock:
            self._appear()
            self.started += 1
        self._redraw()
        future.add_done_callback(self._kernel_done)

    def _kernel_done(self, future: Future[Any]) -> None:
        self._ended(ok=not future.cancelled() and future.exception() is None)

    def _ended(self, ok: bool) -> None:
        """One kernel's compile ended, well or not."""
        with self._lock:
            if ok:
                self.compiled += 1
            else:
                self.failed += 1
        self._redraw()

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """A kernel compiles inside, in this thread (an exception: failed)."""
        if not self.shown:
            yield
            return
        with self._lock:
            self._appear()
            self.started += 1
        self._redraw()
        ok = False
        try:
            yield
            ok = True
        finally:
            self._ended(ok)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """One of Inductor's GPU timings runs inside (counted when it ends, once if nested)."""
        depth = getattr(self._local, "depth", 0)
        if not self.shown or depth:
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth
            return
        with self._lock:
            self._appear()
            self._timing += 1
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            with self._lock:
                self._timing -= 1
                self.timed += 1
            self._redraw()

    def timed_one(self) -> None:
        """A choice was timed elsewhere (kiln's sandbox), or skipped there."""
        if not self.shown:
            return
        with self._lock:
            self._appear()
            self.timed += 1
        self._redraw()

    def close(self) -> None:
        """Clear the line and stop drawing (``uninstall()``); safe to call twice."""
        with self._lock:
            self._closed = True
            bar, self._bar = self._bar, None
            ticker, self._ticker = self._ticker, None
        if bar is not None:
            bar.close()
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join()

    # -- what the reader sees ------------------------------------------------------------------

    @property
    def visible(self) -> bool:
        """Whether the line is on the terminal now."""
        return self._bar is not None

    def summary(self) -> str:
        """The counts after the bar."""
        with self._lock:
            timed, failed = self.timed, self.failed
        return f"timed {timed}" + (f", failed {failed}" if failed else "")

    # -- the line ------------------------------------------------------------------------------

    def _appear(self) -> None:
        """With the lock held: make the line if it is not there (the counts start again)."""
        self._quiet_since = None
        if self._bar is not None or self._closed:
            return
        from tqdm import tqdm

        tqdm.monitor_interval = 0  # no monitor thread
        self.started = self.compiled = self.failed = self.timed = 0
        self._bar = tqdm(
            total=0,
            desc="kiln inductor",
            file=self._stream,
            leave=False,
            dynamic_ncols=True,
            bar_format="{desc}: {n_fmt}/{total_fmt} kernels |{bar:12}| {elapsed}{postfix}",
        )
        self._ticker = threading.Thread(target=self._tick, name="kiln-inductor-progress", daemon=True)
        self._ticker.start()

    def _redraw(self) -> None:
        with self._lock:
            bar = self._bar
            if bar is None:
                return
            bar.total = self.started
            bar.n = self.compiled + self.failed
        bar.set_postfix_str(self.summary(), refresh=False)
        bar.refresh()

    def _tick(self) -> None:
        while True:
            time.sleep(_TICK_S)
            with self._lock:
                bar = self._bar
                if bar is None or threading.current_thread() is not self._ticker:
                    return
                busy = self._timing or self.compiled + self.failed < self.started
                now = time.monotonic()
                if busy:
                    self._quiet_since = None
                elif self._quiet_since is None:
                    self._quiet_since = now
                gone = self._quiet_since is not None and now - self._quiet_since >= self._idle_s
                if gone:
                    self._bar = self._ticker = None
            if gone:
                bar.close()
                return
            bar.refresh()

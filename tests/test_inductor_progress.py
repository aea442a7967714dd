"""The progress line of Inductor's compiles and timings (``triton_kiln.inductor.progress``): on a
terminal it counts the kernels compiled through kiln and Inductor's timings, and clears once
nothing is in flight; into a pipe or with ``KILN_PROGRESS=0`` nothing is drawn and no thread
runs. The line is drawn by tqdm on a fake terminal (a stream whose ``isatty()`` is true)."""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from support.inductor_support import (
    fake_gpu,  # noqa: F401 - autouse fixture
    four_compile_threads,  # noqa: F401 - fixture
    install_on,  # noqa: F401 - fixture
    source,
    submit,
)

pytest.importorskip("torch._inductor.async_compile")

import torch._inductor.config as inductor_config
from torch._inductor.codecache import PyCodeCache

from triton_kiln import CompilePool
from triton_kiln.inductor.progress import InductorProgress
from triton_kiln.triton_compat import inductor as compat

IDLE_S = 0.3


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def progress_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "kiln-inductor-progress"]


def wait_cleared(progress: InductorProgress, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while progress.visible and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not progress.visible


def fake_timings(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each GPU timing method of Inductor's benchmarkers answers 0.5 ms without a GPU, and is
    given back after the test; install() wraps these. Returns the points."""
    points = compat.benchmark_points()
    for point in points:
        monkeypatch.setattr(point.owner, point.name, lambda self, *args, **kwargs: 0.5)
    return points


# -- the line as a unit ---------------------------------------------------------------------------


def test_the_line_counts_kernels_timings_and_failures_then_clears() -> None:
    stream = Terminal()
    progress = InductorProgress(None, stream=stream, idle_s=IDLE_S)  # KILN_PROGRESS unset: a terminal
    assert progress.shown
    assert not progress.visible  # nothing until the first compile
    ok: Future[Any] = Future()
    bad: Future[Any] = Future()
    progress.watch(ok)
    progress.watch(bad)
    assert progress.visible
    with progress.timing(), progress.timing():  # a timing inside a timing counts once
        pass
    progress.timed_one()  # a choice timed in kiln's sandbox
    ok.set_result(("kernel", 1))
    time.sleep(2 * IDLE_S)
    assert progress.visible  # a compile is still in flight
    bad.set_exception(RuntimeError("no config compiled"))
    assert "kiln inductor: 2/2 kernels" in stream.getvalue()
    assert "timed 2, failed 1" in stream.getvalue()
    wait_cleared(progress)
    assert not progress_threads()
    progress.watch(Future())  # the next graph: the counts start again
    assert "kiln inductor: 0/1 kernels" in stream.getvalue().rsplit("\r", 1)[-1]
    progress.close()
    assert not progress_threads()


def test_nothing_is_drawn_into_a_pipe_or_when_turned_off() -> None:
    for progress, stream in [
        (lambda s: InductorProgress(None, stream=s), io.StringIO()),  # KILN_PROGRESS unset, a pipe
        (lambda s: InductorProgress(False, stream=s), Terminal()),  # KILN_PROGRESS=0
    ]:
        line = progress(stream)
        assert not line.shown
        done: Future[Any] = Future()
        line.watch(done)
        with line.compiling(), line.timing():
            pass
        line.timed_one()
        done.set_result(None)
        assert stream.getvalue() == ""
        assert not line.visible
        assert not progress_threads()


# -- through Inductor -----------------------------------------------------------------------------


def test_inductors_compiles_and_timings_are_counted_on_a_terminal(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    four_compile_threads: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two compile jobs, one kernel compiled on the serial path, two GPU timings: the line says
    3/3 kernels, timed 2; ``uninstall()`` clears it and gives back the timing methods."""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    points = fake_timings(monkeypatch)
    originals = [point.current() for point in points]
    install_on(make_pool())
    jobs = [submit(*source("pointwise")), submit(*source("user_kernel"))]
    for job in jobs:
        kernel, _ = job.result(timeout=300)
        assert kernel.compile_results
    name, text = source("reduction")
    serial = getattr(PyCodeCache.load(text), name)
    with inductor_config.patch(compile_threads=1):
        serial.precompile(warm_cache_only=True)  # the serial path: compiled in this thread
    serial.precompile(warm_cache_only=True)  # compiled already: not a kernel again
    point = points[0]
    method = getattr(point.owner, point.name)
    assert method(object(), lambda: None) == 0.5
    assert method(object(), lambda: None) == 0.5
    drawn = terminal.getvalue()
    assert "kiln inductor: 3/3 kernels" in drawn, drawn
    assert "timed 2" in drawn, drawn
    import triton_kiln.inductor as kiln_inductor

    kiln_inductor.uninstall()
    assert [p.current() for p in points] == originals
    assert not progress_threads()


def test_without_a_terminal_inductor_draws_nothing_and_its_timing_methods_stay_quiet_only(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Into a pipe nothing is drawn; with ``KILN_INDUCTOR_QUIET_BENCHMARKS=0`` as well, the timing
    methods are not wrapped at all (nothing to hold, nothing to count)."""
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    monkeypatch.setenv("KILN_INDUCTOR_QUIET_BENCHMARKS", "0")
    points = fake_timings(monkeypatch)
    originals = [point.current() for point in points]
    install_on(make_pool())
    kernel, _ = submit(*source("pointwise")).result(timeout=300)
    assert kernel.compile_results
    assert [p.current() for p in points] == originals
    captured = capsys.readouterr()
    assert "kiln inductor" not in captured.err + captured.out
    assert not progress_threads()


def test_kiln_progress_1_counts_timings_even_without_the_hold(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``KILN_PROGRESS=1`` into a pipe draws the line; with the hold off
    (``KILN_INDUCTOR_QUIET_BENCHMARKS=0``) the timing methods are wrapped to count, not hold."""
    from triton_kiln.pool.pause import PAUSE

    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    monkeypatch.setenv("KILN_PROGRESS", "1")
    monkeypatch.setenv("KILN_INDUCTOR_QUIET_BENCHMARKS", "0")
    held: list[bool] = []

    def timing(self: Any, *args: Any, **kwargs: Any) -> float:
        held.append(PAUSE.held)
        return 0.5

    points = compat.benchmark_points()
    for point in points:
        monkeypatch.setattr(point.owner, point.name, timing)
    install_on(make_pool())
    assert all(p.current() is not timing for p in points)
    getattr(points[0].owner, points[0].name)(object(), lambda: None)
    assert held == [False]
    assert "timed 1" in pipe.getvalue()

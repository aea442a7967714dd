"""Watching a tuning run: the progress bar, Triton's TRITON_PRINT_AUTOTUNING lines, and one log
line per key saying where its config came from.

The reporter is tested as a unit, then inside real tuning runs (real compiles; only the GPU's
timings are faked, by test_autotune_cpu's FakeBench).
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import triton_kiln as kiln
from test_autotune_cpu import FakeBench, by_block, configs, make_tuner, tune
from triton_kiln.autotuner.tuning_progress import TuningProgress
from triton_kiln.sandbox import BenchOutcome
from triton_kiln.tuning import ConfigResult, TuningDatabase

pytestmark = pytest.mark.timeout(240)

KEY = (4096, "torch.float32", "torch.float32")  # test_autotune_cpu.tune's key


def result(label: str, status: str = "ok", ms: float | None = 1.0) -> ConfigResult:
    return ConfigResult(
        label=label,
        config={"kwargs": {}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None},
        status=status,
        reason=None if status == "ok" else "why",
        compile_s=0.1,
        runtime_ms=ms if status == "ok" else None,
        runtime_ms_p20=ms if status == "ok" else None,
        runtime_ms_p80=ms if status == "ok" else None,
        max_abs_diff=None,
        artifact_key=None,
    )


def ticker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "kiln-tuning-progress"]


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


# -- the reporter as a unit ---------------------------------------------------------------------


def test_the_bar_counts_compiled_timed_failed_and_shows_the_best_so_far() -> None:
    stream = Terminal()
    progress = TuningProgress("softmax", 4, enabled=True, stream=stream)
    assert progress.shown
    progress.compiled_one(True)
    progress.compiled_one(True)
    progress.compiled_one(False)
    progress.record(result("BLOCK=64", ms=2.0))
    progress.record(result("BLOCK=128", ms=0.5))
    progress.record(result("BLOCK=48", status="compile_error"))
    assert progress.summary() == "compiled 2/4, timed 2, failed 1"
    assert progress.best_line() == "best 0.5 ms: BLOCK=128"
    # a revised result (the output rule rejects the fastest) replaces the first one
    progress.record(result("BLOCK=128", status="wrong_output"))
    assert progress.summary() == "compiled 2/4, timed 1, failed 2"
    assert progress.best_line() == "best 2 ms: BLOCK=64"
    progress.phase("final round: 2 configs")
    assert progress.summary() == "final round: 2 configs, compiled 2/4, timed 1, failed 2"
    text = stream.getvalue()
    assert "tuning softmax: 3/4 |" in text  # drawn as results arrived...
    assert "compiled 2/4, timed 1, failed 2" in text
    assert "  best 2 ms: BLOCK=64" in text  # ...the best so far on a second line
    progress.finish(1.04)
    # the bar is cleared; two lines stay
    end = "\rtuned softmax: 4 configs in 1.0 s: 1 timed, 2 failed\n  best 2 ms: BLOCK=64\n"
    assert stream.getvalue().endswith(end)
    assert not ticker_threads()


def test_a_failed_or_interrupted_run_clears_the_bar_and_stops_its_thread() -> None:
    stream = Terminal()
    progress = TuningProgress("softmax", 4, enabled=True, stream=stream)

    def interrupted_run() -> None:
        with progress:
            progress.record(result("BLOCK=64"))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted_run()
    assert not progress.shown
    assert not ticker_threads()
    assert "tuned softmax" not in stream.getvalue()  # no final lines: the run did not finish
    assert stream.getvalue().endswith(" \r")  # tqdm blanked the lines (leave=False)
    progress.close()  # a second close is harmless


def test_nothing_is_shown_when_the_stream_is_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = TuningProgress("softmax", 2, enabled=None, stream=stream)  # KILN_PROGRESS unset
    assert not progress.shown
    progress.compiled_one(True)
    progress.record(result("BLOCK=64"))
    progress.finish(0.1)
    assert stream.getvalue() == ""
    assert not ticker_threads()
    forced_off = TuningProgress("softmax", 2, enabled=False, stream=Terminal())
    assert not forced_off.shown


def test_lines_printed_during_a_run_go_above_the_bar() -> None:
    bar, out = Terminal(), io.StringIO()
    progress = TuningProgress("softmax", 2, enabled=True, stream=bar)
    progress.write("Autotuning kernel softmax with config BLOCK: 64", stream=out)
    progress.close()
    assert out.getvalue() == "Autotuning kernel softmax with config BLOCK: 64\n"


# -- the bar in real tuning runs ----------------------------------------------------------------


def test_kiln_progress_1_shows_the_bar_of_a_tuning_run(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KILN_PROGRESS", "1")
    # BLOCK=48 fails to compile (not a power of two); the others compile for real.
    tuner, bench = make_tuner(
        make_pool, tmp_path, configs(48, 64, 128), by_block({48: 0.1, 64: 2.0, 128: 1.0})
    )
    tune(tuner, bench)
    err = capsys.readouterr().err
    assert "tuning scale_kernel: " in err
    assert "compiled 2/3, timed 2, failed 1" in err
    last = err.rsplit("\r", 1)[-1]
    assert last.startswith("tuned scale_kernel: 3 configs in "), err
    assert " s: 2 timed, 1 failed\n  best 1 ms: BLOCK=128, num_warps=4, num_stages=3, num_ctas=1\n" in last
    assert not ticker_threads()


def test_without_a_terminal_a_tuning_run_prints_nothing(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KILN_PROGRESS", raising=False)
    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}))
    tune(tuner, bench)
    captured = capsys.readouterr()
    assert "scale_kernel" not in captured.err + captured.out


class InterruptedBench(FakeBench):
    """Ctrl-C arrives during the second benchmark."""

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        if self.calls:
            raise KeyboardInterrupt
        return super().bench(candidate, artifact, grid, phase)


def test_ctrl_c_during_a_tuning_run_clears_the_bar(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KILN_PROGRESS", "1")
    tuner, _ = make_tuner(make_pool, tmp_path, configs(64, 128, 256), lambda c: 1.0)
    with pytest.raises(KeyboardInterrupt):
        tune(tuner, lambda t, a, k: InterruptedBench(t, a, k, lambda c: 1.0))
    err = capsys.readouterr().err
    assert "tuning scale_kernel" in err
    assert "tuned scale_kernel" not in err
    assert err.endswith(" \r")
    assert not ticker_threads()


def test_a_run_where_every_config_fails_clears_the_bar(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KILN_PROGRESS", "1")
    tuner, bench = make_tuner(make_pool, tmp_path, configs(48, 96), lambda c: 1.0)  # neither compiles
    with pytest.raises(kiln.AutotuneError):
        tune(tuner, bench)
    err = capsys.readouterr().err
    assert "compiled 0/2, timed 0, failed 2" in err
    assert "tuned scale_kernel" not in err
    assert err.endswith(" \r")
    assert not ticker_threads()


# -- TRITON_PRINT_AUTOTUNING --------------------------------------------------------------------


def test_triton_print_autotuning_prints_tritons_lines(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    tuner, bench = make_tuner(
        make_pool, tmp_path, configs(48, 64, 128), by_block({48: 0.1, 64: 2.0, 128: 1.0})
    )
    tune(tuner, bench)
    out = capsys.readouterr().out
    # Triton's Autotuner.run, word for word (python/triton/runtime/autotuner.py, 3.5.1 to 3.7.1)
    done = (
        f"Triton autotuning for function scale_kernel,\nwith key as {KEY},\n"
        f"finished after {tuner.bench_time:.2f}s,\nbest config selected: {tuner.best_config};\n"
    )
    assert out.endswith(done), out
    for config in configs(48, 64, 128):  # Triton's Autotuner._bench, one per config
        assert f"Autotuning kernel scale_kernel with config {config}\n" in out
    assert out.count("Autotuning failed with compile_error") == 1
    tune(tuner, bench)  # the key is known: nothing more, as Triton
    assert capsys.readouterr().out == ""


def test_without_triton_print_autotuning_nothing_is_printed(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRITON_PRINT_AUTOTUNING", raising=False)
    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}))
    tune(tuner, bench)
    assert capsys.readouterr().out == ""


def test_a_config_from_the_database_prints_no_triton_line(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As Triton prints nothing for a result from its on-disk cache (cache_results=True)."""
    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}))
    tune(tuner, bench)
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    again, bench2 = make_tuner(
        make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}), database=tuner._database
    )
    tune(again, bench2)
    assert again.loaded_from == "database"
    assert capsys.readouterr().out == ""


# -- one log line per key, saying where its config came from ------------------------------------


def autotune_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kiln.autotune" and r.levelno == logging.INFO]


def test_each_key_logs_once_where_its_config_came_from(
    make_pool: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kiln")
    database = TuningDatabase(tmp_path / "shared.sqlite3")
    tuner, bench = make_tuner(
        make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}), database=database
    )
    tune(tuner, bench)
    tune(tuner, bench)  # the same key again: no second line
    [line] = autotune_lines(caplog)
    assert line.startswith(f"kiln: scale_kernel {KEY}: tuned 2 configs on this call in ")
    assert line.endswith("; best BLOCK=128, num_warps=4, num_stages=3, num_ctas=1")

    caplog.clear()
    again, bench2 = make_tuner(make_pool, tmp_path, configs(64, 128), lambda c: 9.0, database=database)
    tune(again, bench2)
    tune(again, bench2)
    [line] = autotune_lines(caplog)
    assert line.startswith(f"kiln: scale_kernel {KEY}: from the tuning database ({database.path}, tuned 20")
    assert "over 2 configs); best BLOCK=128, num_warps=4" in line

    caplog.clear()
    third, bench3 = make_tuner(make_pool, tmp_path, configs(64, 128), lambda c: 9.0, database=database)
    third.cache[KEY] = configs(64)[0]  # put there by other code (a subclass's store, an assignment)
    tune(third, bench3)
    tune(third, bench3)
    [line] = autotune_lines(caplog)
    best = "BLOCK=64, num_warps=4, num_stages=3, num_ctas=1"
    assert line == f"kiln: scale_kernel {KEY}: from the in-memory cache; best {best}"


def test_importing_kiln_adds_a_null_handler_to_its_logger() -> None:
    code = (
        "import logging, triton_kiln\nprint([type(h).__name__ for h in logging.getLogger('kiln').handlers])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['NullHandler']"

"""Tune once per node: one process tunes a (kernel, key, device); the others wait for
its run in the tuning database, adopt it and say so in ``kiln report``.

Real processes, real compiles for GPUTarget("cuda", 90, 32); the GPU's timings are a stand-in
(tests/support/node_harness.py SeededBench) drawn from a seed per process, so that processes tuning
alone would disagree on the best config.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import triton_kiln
from support.basics import wait_no_processes
from triton_kiln.cli import main as cli_main
from triton_kiln.tuning import TuningDatabase, format_table

HERE = Path(__file__).resolve().parent
SRC = str(Path(triton_kiln.__file__).resolve().parents[1])  # children import the kiln this test does
HARNESS = HERE / "support" / "node_harness.py"

pytestmark = pytest.mark.timeout(240)


def _spawn(cache: Path, go: Path, seed: int, bench_s: float | str, **env: str) -> subprocess.Popen[str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([SRC, environ.get("PYTHONPATH", "")])
    environ.update(env)
    return subprocess.Popen(
        [sys.executable, str(HARNESS), "tune", str(cache), str(go), str(seed), str(bench_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )


def _pool_id(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    words = child.stdout.readline().split()
    assert words[:1] == ["POOL"], (words, child.stderr.read() if child.stderr else "")
    return words[1]


def _result(child: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = child.communicate(timeout=200)
    assert child.returncode == 0, err[-3000:]
    return dict(json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:]))


def test_four_processes_tune_once_and_choose_the_same_config(tmp_path: Path) -> None:
    cache, go = tmp_path / "cache", tmp_path / "go"
    children = [_spawn(cache, go, seed, 0.05) for seed in range(4)]
    try:
        pools = [_pool_id(child) for child in children]
        go.touch()
        results = [_result(child) for child in children]
    finally:
        for child in children:
            with contextlib.suppress(OSError):
                child.kill()
    tuned = [r for r in results if r["loaded_from"] is None]
    assert len(tuned) == 1, results  # one process tuned...
    assert sorted(r["loaded_from"] for r in results if r["loaded_from"] is not None) == ["node"] * 3
    assert sum(r["benched"] for r in results) == 8  # ...its 8 configs, benchmarked once on the node
    assert sum(r["compiled"] for r in results) == 8  # and compiled once (the pool's node sharing)
    assert len({r["best"] for r in results}) == 1  # the same config on every process
    with TuningDatabase(cache / "tuning.sqlite3") as database:
        runs = database.runs()
    assert len(runs) == 1
    assert runs[0].adoptions == 3
    assert "adopted by 3 other processes of the node" in format_table(runs[0])
    shown = CliRunner().invoke(cli_main, ["report", "--db", str(cache / "tuning.sqlite3")])
    assert shown.exit_code == 0, shown.output
    assert "adopted by 3 other processes of the node (waited up to" in shown.output
    for pool in pools:
        assert not wait_no_processes(pool)


def test_with_the_node_off_each_process_tunes_alone(tmp_path: Path) -> None:
    cache, go = tmp_path / "cache", tmp_path / "go"
    children = [_spawn(cache, go, seed, 0.05, KILN_NODE="0") for seed in range(2)]
    try:
        for child in children:
            _pool_id(child)
        go.touch()
        results = [_result(child) for child in children]
    finally:
        for child in children:
            with contextlib.suppress(OSError):
                child.kill()
    assert all(r["loaded_from"] is None for r in results), results
    assert sum(r["benched"] for r in results) == 16


def test_the_tuner_killed_mid_run_a_waiter_takes_over(tmp_path: Path) -> None:
    cache, go = tmp_path / "cache", tmp_path / "go"
    go.touch()
    first = _spawn(cache, go, 0, 120.0)  # its first benchmark would take two minutes
    try:
        first_pool = _pool_id(first)
        flag = cache / "benching-0"
        deadline = time.monotonic() + 120
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert flag.exists(), "the first process never started benchmarking"
        waiters = [_spawn(cache, go, seed, 0.02) for seed in (1, 2)]
        try:
            for child in waiters:
                _pool_id(child)
            time.sleep(1.5)  # both are waiting for the first process's run now
            assert all(child.poll() is None for child in waiters)
            first.send_signal(signal.SIGKILL)
            results = [_result(child) for child in waiters]
        finally:
            for child in waiters:
                with contextlib.suppress(OSError):
                    child.kill()
    finally:
        first.kill()
        first.wait()
    assert sorted(str(r["loaded_from"]) for r in results) == ["None", "node"], results  # one took over
    assert len({r["best"] for r in results}) == 1
    assert not wait_no_processes(first_pool, timeout=15)  # the killed process left nothing running
    with TuningDatabase(cache / "tuning.sqlite3") as database:
        runs = database.runs()
    assert [run.finished for run in runs] == [True, False]  # the dead run stays unfinished


@pytest.mark.gpu
def test_on_a_gpu_four_processes_tune_once_and_launch_the_same_config(tmp_path: Path) -> None:
    """On the GPU machine: real benchmarks in kiln's sandbox, then each process's launch checked."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    children = [_spawn(cache, go, seed, "gpu") for seed in range(4)]
    try:
        for child in children:
            _pool_id(child)
        go.touch()
        results = [_result(child) for child in children]
    finally:
        for child in children:
            with contextlib.suppress(OSError):
                child.kill()
    assert sum(r["loaded_from"] is None for r in results) == 1, results
    assert sum(r["benched"] for r in results) == 8  # one process benchmarked the 8 configs
    # the 8 configs, plus the output check's GPU kernels, compiled once, by the tuning process,
    # into the fresh cache: the summary of the outputs' dtype and the fingerprint that names
    # new representatives (autotuner/compare_kernels.py)
    assert sum(r["compiled"] for r in results) == 8 + 2
    assert len({r["best"] for r in results}) == 1

"""Tune together across GPUs: processes on different GPUs of one kind split a
run's benchmarks; the tuning process finishes the run and every process adopts it.

Real processes, real compiles for GPUTarget("cuda", 90, 32). Only the GPU is faked
(tests/support/node_harness.py): its timings (SeededBench, drawn from a seed per process, so processes
tuning alone would disagree) and its identity (``Autotuner._device``: a kind and a uuid per fake
GPU). Each process reports the configs it screened.
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

import triton_kiln
from support import kernels
from support.basics import wait_no_processes
from triton_kiln.tuning import TuningDatabase

HERE = Path(__file__).resolve().parent
SRC = str(Path(triton_kiln.__file__).resolve().parents[1])
HARNESS = HERE / "support" / "node_harness.py"
CONFIGS = 8  # node_harness.tune's configs

pytestmark = pytest.mark.timeout(300)


def _spawn(
    cache: Path, go: Path, seed: int, bench_s: float | str, gpu: tuple[str, str] | None, **env: str
) -> subprocess.Popen[str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([SRC, environ.get("PYTHONPATH", "")])
    environ.update(env)
    command = [sys.executable, str(HARNESS), "tune", str(cache), str(go), str(seed), str(bench_s)]
    return subprocess.Popen(
        [*command, *(gpu or ())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
    )


def _pool_id(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    words = child.stdout.readline().split()
    assert words[:1] == ["POOL"], (words, child.stderr.read() if child.stderr else "")
    return words[1]


def _result(child: subprocess.Popen[str], timeout: float = 200) -> dict[str, Any]:
    out, err = child.communicate(timeout=timeout)
    assert child.returncode == 0, err[-3000:]
    return dict(json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:]))


def _kill_all(children: list[subprocess.Popen[str]]) -> None:
    for child in children:
        with contextlib.suppress(OSError):
            child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)


def _run(
    cache: Path, gpus: list[tuple[str, str] | None], bench_s: float = 0.8, **env: str
) -> list[dict[str, Any]]:
    """Processes started together, one per entry of ``gpus`` (its fake GPU); their reports."""
    go = cache.parent / "go"
    children = [_spawn(cache, go, seed, bench_s, gpu, **env) for seed, gpu in enumerate(gpus)]
    try:
        pools = [_pool_id(child) for child in children]
        go.touch()
        results = [_result(child) for child in children]
    finally:
        _kill_all(children)
    for pool in pools:
        assert not wait_no_processes(pool), "a process left something running"
    return results


def _screened(results: list[dict[str, Any]]) -> list[str]:
    """The configs ``results``'s processes screened, each as often as it was screened: the
    tuning process's checks of the winner or the final round's contenders another GPU's process
    screened (their outputs checked on the tuning process's inputs, ``node_share.check_here``)
    are left out, once each."""
    leader = next(r for r in results if r["loaded_from"] is None)
    helped = [label for r in results if r is not leader for label in r["benched_labels"]]
    rechecked = [label for label in leader["benched_labels"] if label in helped]
    allowed = {leader["best_label"], *leader.get("contenders", [])}
    assert len(rechecked) == len(set(rechecked)), rechecked  # each checked here once at most
    assert set(rechecked) <= allowed, (rechecked, allowed)
    return [label for label in leader["benched_labels"] if label not in helped] + helped


def _split(results: list[dict[str, Any]]) -> None:
    """The screened configs of ``results`` form disjoint shares whose union is every config."""
    labels = _screened(results)
    assert len(labels) == len(set(labels)) == CONFIGS, [r["benched_labels"] for r in results]
    assert sum(bool(r["benched_labels"]) for r in results) >= 2, results  # split, not one alone
    assert sum(r["loaded_from"] is None for r in results) == 1, results  # one finished the run...
    assert len({r["best"] for r in results}) == 1, results  # ...and all chose its best


def _runs(cache: Path) -> list[Any]:
    with TuningDatabase(cache / "tuning.sqlite3") as database:
        return list(database.runs())


@pytest.mark.parametrize("bench_s", [0.8, 0.02])  # screening slower than compiles, and faster (a GPU)
def test_four_processes_on_four_gpus_split_the_configs_and_choose_the_same(
    tmp_path: Path, bench_s: float
) -> None:
    cache = tmp_path / "cache"
    results = _run(cache, [("FakeGPU", f"gpu-{i}") for i in range(4)], bench_s)
    _split(results)
    assert sum(r["compiled"] for r in results) == CONFIGS  # each config compiled once on the node
    runs = _runs(cache)
    assert len(runs) == 1
    assert runs[0].finished
    assert len(runs[0].results) == CONFIGS
    assert runs[0].adoptions == 3
    assert {r.status for r in runs[0].results} == {"ok"}
    assert not list((cache / "node" / "tune").glob("*.share/results/*"))  # the share is cleaned


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["killed", "lags"])
def test_a_helper_that_dies_or_lags_its_config_is_rerun(tmp_path: Path, fault: str) -> None:
    """The leader starts first; two helpers on other GPUs join; one is SIGKILLed (or hangs) in
    its first benchmark: the leader re-runs that config, the others finish, nothing deadlocks."""
    cache, go, later = tmp_path / "cache", tmp_path / "go", tmp_path / "go-helpers"
    env = {"KILN_NODE_SHARE_WAIT_S": "3"}
    leader = _spawn(cache, go, 0, 1.0, ("FakeGPU", "gpu-0"), **env)
    slow = _spawn(cache, later, 1, 150.0, ("FakeGPU", "gpu-1"), **env)
    other = _spawn(cache, later, 2, 1.0, ("FakeGPU", "gpu-2"), **env)
    children = [leader, slow, other]
    try:
        pools = [_pool_id(child) for child in children]
        go.touch()
        deadline = time.monotonic() + 120
        while not list((cache / "node" / "tune").glob("*.share/leader.json")):
            assert time.monotonic() < deadline, "the leader never opened its share"
            time.sleep(0.02)
        later.touch()
        flag = cache / "benching-1"
        while not flag.exists():
            assert time.monotonic() < deadline, "the slow helper never claimed a config"
            time.sleep(0.02)
        started = time.monotonic()
        if fault == "killed":
            slow.send_signal(signal.SIGKILL)
        results = [_result(leader, 120), _result(other, 120)]
        finished_s = time.monotonic() - started
        if fault == "lags":
            assert slow.poll() is None  # still benchmarking its config: nobody waited for it
    finally:
        _kill_all(children)
    assert finished_s < 60, finished_s
    assert [r["loaded_from"] for r in results] == [None, "node"], results
    labels = _screened(results)
    assert sorted(set(labels)) == sorted(labels)
    assert len(labels) == CONFIGS
    assert len({r["best"] for r in results}) == 1
    runs = _runs(cache)
    assert len(runs) == 1
    assert runs[0].finished
    assert len(runs[0].results) == CONFIGS
    for pool in pools:
        assert not wait_no_processes(pool, timeout=15), "a process left something running"


def test_a_helper_that_cannot_benchmark_still_adopts_the_run(tmp_path: Path) -> None:
    """Helping is best effort: a helper whose bencher fails lets its GPU go and waits for the run."""
    cache, go, later = tmp_path / "cache", tmp_path / "go", tmp_path / "go-helper"
    leader = _spawn(cache, go, 0, 0.5, ("FakeGPU", "gpu-0"))
    helper = _spawn(cache, later, 1, "raise", ("FakeGPU", "gpu-1"))
    try:
        pools = [_pool_id(child) for child in (leader, helper)]
        go.touch()
        deadline = time.monotonic() + 120
        while not list((cache / "node" / "tune").glob("*.share/leader.json")):
            assert time.monotonic() < deadline, "the leader never opened its share"
            time.sleep(0.02)
        later.touch()
        results = [_result(leader, 120), _result(helper, 120)]
    finally:
        _kill_all([leader, helper])
    assert [r["loaded_from"] for r in results] == [None, "node"], results
    assert len(results[0]["benched_labels"]) == CONFIGS
    assert results[0]["best"] == results[1]["best"]
    for pool in pools:
        assert not wait_no_processes(pool, timeout=15)


def test_different_gpu_kinds_are_never_mixed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    gpus = [("FakeH100", "h-0"), ("FakeA100", "a-0"), ("FakeH100", "h-1"), ("FakeA100", "a-1")]
    results = _run(cache, gpus)
    for kind in ("FakeH100", "FakeA100"):
        _split([r for r, gpu in zip(results, gpus, strict=True) if gpu[0] == kind])
        assert {r["device"] for r, gpu in zip(results, gpus, strict=True) if gpu[0] == kind} == {kind}
    runs = _runs(cache)
    assert sorted(run.device_name for run in runs) == ["FakeA100", "FakeH100"]
    assert all(run.finished and len(run.results) == CONFIGS for run in runs)


@pytest.mark.parametrize(
    "case", ["same-gpu", "share-off", "node-off"]
)  # one GPU's processes never split; nor with sharing off
def test_no_split_on_one_gpu_or_with_sharing_off(tmp_path: Path, case: str) -> None:
    cache = tmp_path / "cache"
    gpus = [("FakeGPU", "gpu-0")] * 2 if case == "same-gpu" else [("FakeGPU", "gpu-0"), ("FakeGPU", "gpu-1")]
    env = {"share-off": {"KILN_NODE_SHARE": "0"}, "node-off": {"KILN_NODE": "0"}}.get(case, {})
    results = _run(cache, gpus, **env)
    screened = sorted(r["benched"] for r in results)
    if case == "node-off":
        assert screened == [CONFIGS, CONFIGS]  # each tunes alone
        return
    assert screened == [0, CONFIGS], results  # one process screened all, the other none
    assert len({r["best"] for r in results}) == 1
    assert sorted(str(r["loaded_from"]) for r in results) == ["None", "node"]


@pytest.mark.gpu
def test_on_the_gpus_two_ranks_split_only_across_gpus(tmp_path: Path) -> None:
    """Real GPUs, kiln's sandbox: with two or more GPUs, two ranks (one per GPU, as torchrun
    sets CUDA_VISIBLE_DEVICES) split the screening; with one, two processes on it do not."""
    import torch

    count = torch.cuda.device_count()
    cache, go = tmp_path / "cache", tmp_path / "go"
    visible = ["0", "1"] if count >= 2 else ["0", "0"]
    children = [_spawn(cache, go, i, "gpu", None, CUDA_VISIBLE_DEVICES=v) for i, v in enumerate(visible)]
    try:
        pools = [_pool_id(child) for child in children]
        go.touch()
        results = [_result(child) for child in children]
    finally:
        _kill_all(children)
    for pool in pools:
        assert not wait_no_processes(pool, timeout=15)
    assert len({r["best"] for r in results}) == 1, results
    if count >= 2:
        _split(results)
    else:
        assert sorted(r["benched"] for r in results) == [0, CONFIGS], results


ZERO = "BLOCK=1024, MODE=5, num_warps=4, num_stages=3, num_ctas=1"  # kernels.ZERO_WRITER: writes zeros
PLUS_ONE = "BLOCK=512, MODE=1, num_warps=4, num_stages=3, num_ctas=1"  # kernels.OFF_BY_ONE: adds 1


@pytest.mark.parametrize("owns_timing", ["0", "1"])  # the winner alone, or a final round's contenders
def test_a_wrong_config_a_helper_benchmarked_alone_is_checked_here_and_never_wins(
    tmp_path: Path, owns_timing: str
) -> None:
    """The output rule's case configs (``add_modes_kernel``: six compute x + y; the zero-writer, the fastest,
    and an off-by-one are wrong) split so that a helper benchmarks only the zero-writer (the other
    configs' claims are held, as by helpers that lag): among its one config nothing disagrees, so
    its own verdict trusts it. The leader checks it on its own inputs before it may race or win:
    it differs from the 6 of 8 configs that agree, is rejected, and every rank adopts the fastest
    correct config."""
    from triton_kiln.autotuner.node_share import CHECKED_HERE, _name
    from triton_kiln.node.locks import FileLock

    cache, go, later, gate = tmp_path / "cache", tmp_path / "go", tmp_path / "go-helper", tmp_path / "gate"
    env = {"KILN_NODE_SHARE_WAIT_S": "2"}
    command = ["tune-modes", str(cache)]
    children = []
    for seed, (start, gate_) in enumerate([(go, str(gate)), (later, "-")]):
        args = [*command, str(start), str(seed), owns_timing, gate_, "FakeGPU", f"gpu-{seed}"]
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
            **env,
        }
        children.append(subprocess.Popen([sys.executable, str(HARNESS), *args], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env=environ))  # fmt: skip
    held: list[FileLock] = []
    try:
        pools = [_pool_id(child) for child in children]
        go.touch()  # the leader opens its share; its stand-in GPU stays busy until the gate opens
        deadline = time.monotonic() + 120
        while (
            not (shares := list((cache / "node" / "tune").glob("*.share")))
            or not (shares[0] / "leader.json").exists()
        ):
            assert time.monotonic() < deadline, "the leader never opened its share"
            time.sleep(0.02)
        labels = [f"BLOCK={b}, MODE={m}, num_warps={w}, num_stages=3, num_ctas=1"
                  for b, m, w in kernels.WRONG_WRITER_CONFIGS]  # fmt: skip
        for label in labels:
            if label != ZERO:  # held, as by helpers that lag: only the zero-writer is left to claim
                lock = FileLock(shares[0] / "claims" / f"{_name(label)}.lock")
                assert lock.try_acquire()
                held.append(lock)
        later.touch()  # the helper joins, claims the zero-writer and puts its result
        while not (shares[0] / "results" / f"{_name(ZERO)}.json").exists():
            assert time.monotonic() < deadline, "the helper never benchmarked the zero-writer"
            time.sleep(0.02)
        gate.touch()
        leader, helper = (_result(child, 150) for child in children)
    finally:
        for lock in held:
            lock.release()
        _kill_all(children)
    for pool in pools:
        assert not wait_no_processes(pool, timeout=15), "a process left something running"
    assert helper["benched_labels"] == [ZERO]
    assert [leader["loaded_from"], helper["loaded_from"]] == [None, "node"]
    for report in (leader, helper):  # the same choice on every rank: the fastest correct config
        assert report["best"].startswith("BLOCK: 256, MODE: 0, num_warps: 2"), report["best"]
        status, why = report["results"][ZERO]
        assert status == "wrong_output", report["results"][ZERO]
        assert "out_ptr: differs from the 6 of 8 configs that agree" in why
        assert CHECKED_HERE in why
        assert report["results"][PLUS_ONE][0] == "wrong_output"
    assert sorted(leader["benched_labels"]) == sorted(labels)  # its 7, and the zero-writer checked here
    runs = _runs(cache)
    assert len(runs) == 1
    assert runs[0].finished

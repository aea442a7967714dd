"""Compile once per node: processes sharing a cache directory compile a key once.

Real compiles for GPUTarget("cuda", 90, 32), real processes, real SIGKILLs. The 200-trial
stress test drives the real lock and take-over code (kiln.pool.node_jobs.NodeJobs, the
manager's side of it, with a real ArtifactStore) in forked processes whose "compile" is a
stand-in: a short sleep and a stored artifact (a pool per trial would take 200 zygote starts).
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

import psutil
import pytest

import triton_kiln
from support.basics import add_request, pool_processes, wait_no_processes
from triton_kiln import settings as settings_mod
from triton_kiln.artifacts.store import ArtifactStore

HERE = Path(__file__).resolve().parent
SRC = str(Path(triton_kiln.__file__).resolve().parents[1])  # children import the kiln this test does
HARNESS = HERE / "support" / "node_harness.py"


def _child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    src = SRC
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _store_keys(cache: Path) -> set[str]:
    root = cache / "artifacts-v2"
    return {p.name for p in root.glob("*/*") if (p / "artifact.json").exists()}


# ---------------------------------------------------------------------------- the locks


def test_a_lock_is_held_once_and_freed_by_its_holders_death(tmp_path: Path) -> None:
    from triton_kiln.node.locks import FileLock

    path = tmp_path / "node" / "x.lock"
    mine = FileLock(path)
    assert mine.try_acquire()
    assert not FileLock(path).try_acquire()  # a second open of the file, even in this process
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from triton_kiln.node.locks import FileLock; "
         f"lock = FileLock({str(path)!r})\nwhile not lock.try_acquire(): time.sleep(0.01)\n"
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
    )  # fmt: skip
    try:
        time.sleep(0.3)
        mine.release()  # the file goes first: the child locks a new one
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        assert not FileLock(path).try_acquire()
    finally:
        child.kill()
        child.wait()
    assert FileLock(path).try_acquire()  # freed by the kernel when its holder died


def test_slots_bound_what_runs_at_once(tmp_path: Path) -> None:
    from triton_kiln.node.locks import Slots

    slots = Slots(tmp_path, 3)
    taken = [slots.try_take() for _ in range(3)]
    assert all(s is not None for s in taken)
    assert Slots(tmp_path, 3).try_take() is None  # another pool of the node finds none free
    Slots.give_back(taken[0])  # type: ignore[arg-type]
    assert Slots(tmp_path, 3).try_take() is not None


def test_a_forked_child_does_not_keep_the_lock(tmp_path: Path) -> None:
    from triton_kiln.node.locks import FileLock

    path = tmp_path / "node" / "y.lock"
    lock = FileLock(path)
    assert lock.try_acquire()
    pid = os.fork()
    if pid == 0:  # the child: its copy of the descriptor is closed after the fork
        os._exit(0 if lock.fd is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not FileLock(path).try_acquire()  # the parent still holds it


# ---------------------------------------------------------------------------- pools


@pytest.mark.timeout(120)
def test_two_pools_on_one_cache_compile_a_request_once(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    first = make_pool(cache_dir=cache, workers=1)
    second = make_pool(cache_dir=cache, workers=1)
    a = first.submit(add_request(128))
    b = second.submit(add_request(128))
    assert a.result(timeout=100).key == b.result(timeout=100).key
    compiled = first.stats.dispatched + second.stats.dispatched
    assert compiled == 1, (first.stats, second.stats)
    from triton_kiln.node.locks import node_dir

    assert first.stats.node_served + second.stats.node_served == 1
    assert not list(node_dir(cache).rglob("*.lock")) or all(
        p.parent.name == "slots" for p in node_dir(cache).rglob("*.lock")
    )  # no key's lock file left behind


@pytest.mark.timeout(120)
def test_with_the_node_off_each_pool_compiles(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    with settings_mod.scope(node=False):
        first = make_pool(cache_dir=cache, workers=1)
        second = make_pool(cache_dir=cache, workers=1)
    a = first.submit(add_request(64))
    b = second.submit(add_request(64))
    a.result(timeout=100)
    b.result(timeout=100)
    assert first.stats.dispatched + second.stats.dispatched == 2


# Every other config of the matmul set (36; the whole set is ~140 s of compiling on two quiet
# cores, bench/results/compile_batch-cpu2.json): eight processes contend for each config's lock
# as they would for the whole set, in half the suite's time. `node_harness.py compile-set CACHE
# GO 1` runs the whole set by hand.
EVERY = 2


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_eight_processes_compile_the_matmul_set_once_in_all(tmp_path: Path) -> None:
    n = 72 // EVERY
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    env = _child_env(TRITON_CACHE_DIR=str(tmp_path / "triton"))
    children = [
        subprocess.Popen(
            [sys.executable, str(HARNESS), "compile-set", str(cache), str(go), str(EVERY)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(8)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "READY", child.stderr.read() if child.stderr else line
        go.touch()  # all eight start at once
        outputs = [child.communicate(timeout=1400) for child in children]
    finally:
        for child in children:
            with contextlib.suppress(OSError):
                child.kill()
    results = []
    for (out, err), child in zip(outputs, children, strict=True):
        assert child.returncode == 0, err[-3000:]
        results.append(json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:]))
    assert all(not r["failed"] for r in results), results[0]["failed"][:3]
    keys = {k for r in results for k in r["keys"]}
    assert len(keys) == n
    assert all(len(r["keys"]) == n for r in results)  # every process has every artifact
    dispatched = sum(r["stats"]["dispatched"] for r in results)
    compiled = sum(r["stats"]["compiled"] for r in results)
    assert (dispatched, compiled) == (n, n), [r["stats"] for r in results]
    served = sum(r["stats"]["node_served"] + r["stats"]["disk_hits"] for r in results)
    assert served == 7 * n
    print(
        f"{n} configs, 8 processes: {dispatched} compiles in all; seconds {[r['seconds'] for r in results]}"
    )
    assert _store_keys(cache) == keys


@pytest.mark.timeout(120)
def test_a_process_killed_mid_compile_its_waiter_finishes_the_job(make_pool: Any, tmp_path: Path) -> None:
    sys.path.insert(0, str(HERE))
    from support import node_harness

    cache = tmp_path / "cache"
    holder = subprocess.Popen(
        [sys.executable, str(HARNESS), "hold", str(cache)],
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(KILN_TEST_SLOW_S="120"),  # its compile would take two minutes
    )
    try:
        assert holder.stdout is not None
        pool_line = holder.stdout.readline().split()
        assert pool_line[0] == "POOL", pool_line
        holder_pool = pool_line[1]
        assert holder.stdout.readline().strip() == "DISPATCHED"
        os.environ["KILN_TEST_SLOW_S"] = "0.1"  # our compile of the same key is quick
        try:
            waiter = make_pool(cache_dir=cache, workers=1, preload=["support.faults"])
            future = waiter.submit(node_harness.slow_request())
            deadline = time.monotonic() + 60
            while waiter.stats.node_waited < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert waiter.stats.node_waited == 1  # it waits for the holder's compile
            time.sleep(0.5)
            assert not future.done()
            assert waiter.stats.dispatched == 0
            holder.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            artifact = future.result(timeout=60)
        finally:
            os.environ.pop("KILN_TEST_SLOW_S", None)
        took = time.monotonic() - killed
    finally:
        holder.kill()
        holder.wait()
    assert artifact.key in _store_keys(cache)
    assert waiter.stats.node_takeovers == 1
    assert waiter.stats.dispatched == 1
    assert took < 30, took
    left = wait_no_processes(holder_pool, timeout=15)
    assert not left, f"the killed holder's processes are left: {[(p.pid, p.name()) for p in left]}"
    assert not pool_processes(holder_pool)
    assert not psutil.pid_exists(holder.pid) or psutil.Process(holder.pid).status() == psutil.STATUS_ZOMBIE


# ---------------------------------------------------------------------------- 200 trials with kills


class _StandInRequest:
    """What NodeJobs reads of a request: its key and a label."""

    def __init__(self, key: str) -> None:
        self.key = key

    def info(self) -> str:
        return f"stand-in {self.key[:8]}"


def _stand_in_artifact(key: str) -> Any:
    from triton_kiln.artifacts.artifact import LAUNCH_FIELDS, CompiledArtifact

    metadata: dict[str, Any] = dict.fromkeys(LAUNCH_FIELDS, 0)
    metadata.update(name="stand_in", target={"backend": "cuda", "arch": 90, "warp_size": 32})
    return CompiledArtifact(key=key, name="stand_in", binary=b"\x7fELF" + bytes(60), binary_ext="cubin",
                            metadata=metadata)  # fmt: skip


def _stress_child(cache: Path, keys: list[str], log_path: Path, seed: int) -> None:
    """What a pool's manager does with NodeJobs, the compile replaced by a short sleep + a stored artifact."""
    import random
    from concurrent.futures import Future

    from triton_kiln.pool.jobs import Job, PoolStats
    from triton_kiln.pool.node_jobs import NodeJobs

    rng = random.Random(seed)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    pid = os.getpid()
    settings = settings_mod.Settings(cache_dir=cache, workers=1, node_slots=2, node_poll_s=0.002)
    store = ArtifactStore(cache)
    node = NodeJobs(settings, store, PoolStats())

    def compile_here(job: Any) -> None:
        while not node.take_slot(job):
            time.sleep(0.001)
        os.write(log, f"S {job.request.key} {pid}\n".encode())
        time.sleep(rng.uniform(0, 0.008))
        store.put(_stand_in_artifact(job.request.key))
        os.write(log, f"E {job.request.key} {pid}\n".encode())
        node.ended(job, None)

    order = rng.sample(keys, len(keys))
    jobs = [Job(id=i, request=_StandInRequest(k), future=Future(), payload=b"", timeout_s=9.0)  # type: ignore[arg-type]
            for i, k in enumerate(order)]  # fmt: skip
    for job in jobs:
        if node.admit(job):
            compile_here(job)
    while node.waiting or node.ready:
        settled = node.poll(time.monotonic())
        for job, _ in settled.served:
            node.ended(job, None)
        for job in settled.run:
            compile_here(job)
        time.sleep(0.001)


def _check_exclusion(lines: list[str], killed: set[int]) -> list[str]:
    """Two live processes never compile one key at once (a killed one's compile just stops)."""
    active: dict[str, set[int]] = {}
    problems = []
    for line in lines:
        kind, key, pid_text = line.split()
        pid = int(pid_text)
        running = active.setdefault(key, set())
        if kind == "S":
            alive = running - killed
            if alive:
                problems.append(f"{pid} started {key[:8]} while {sorted(alive)} compiled it")
            running.add(pid)
        else:
            running.discard(pid)
    return problems


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_no_deadlock_and_no_loss_over_200_randomized_trials_with_kills(tmp_path: Path) -> None:
    import random

    from triton_kiln.node.locks import FileLock, node_dir

    rng = random.Random(22)
    cache = tmp_path / "cache"
    # processes an earlier test of this session left with pytest (its own pools wind down on
    # their own time) are not this test's: only children started from here on count
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    compiles = kills = takeovers_needed = 0
    for trial in range(200):
        keys = [f"{rng.getrandbits(256):064x}" for _ in range(4)]
        log_path = tmp_path / f"log-{trial}"
        children = []
        for i in range(3):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _stress_child(cache, keys, log_path, trial * 10 + i)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                os._exit(code)
            children.append(pid)
        time.sleep(rng.uniform(0, 0.012))
        victims = set(rng.sample(children, rng.choice([0, 1, 1, 2])))
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        kills += len(victims)
        deadline = time.monotonic() + 15
        for pid in children:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    for other in children:
                        with contextlib.suppress(OSError):
                            os.kill(other, signal.SIGKILL)
                    pytest.fail(f"trial {trial}: process {pid} still waiting after 15 s (a deadlock)")
                time.sleep(0.002)
            if pid not in victims:
                assert os.waitstatus_to_exitcode(status) == 0, f"trial {trial}: process {pid} failed"
        lines = log_path.read_text().splitlines() if log_path.exists() else []
        assert not _check_exclusion(lines, victims), (trial, _check_exclusion(lines, victims))
        finished = [x.split()[1] for x in lines if x.startswith("E ")]
        assert len(finished) == len(set(finished)), f"trial {trial}: a key compiled to the end twice"
        compiles += sum(1 for x in lines if x.startswith("S "))
        stored = _store_keys(cache)
        assert set(keys) <= stored, f"trial {trial}: keys lost: {set(keys) - stored}"  # nothing lost
        for key in keys:  # nothing left locked: every key's lock is free
            lock = FileLock(node_dir(cache) / "compile" / key[:2] / f"{key}.lock")
            assert lock.try_acquire(), f"trial {trial}: {key[:8]} still locked"
            lock.release()
        takeovers_needed += sum(1 for x in lines if x.startswith("S ") and int(x.split()[2]) in victims)
    left = [child for child in psutil.Process().children(recursive=True) if child.pid not in before]
    assert not left  # every child reaped: nothing left over
    assert kills > 100
    # each key compiled once, plus once more at most per compile a kill cut short (taken over)
    assert 800 <= compiles <= 800 + takeovers_needed
    print(f"200 trials, {kills} kills, {compiles} stand-in compiles, {time.monotonic() - started:.1f} s")


# ---------------------------------------------------------------------------- settings


def test_node_settings_parse_and_are_range_checked(tmp_path: Path) -> None:
    from triton_kiln.errors import SettingsError
    from triton_kiln.pool.node_jobs import slot_count

    env = {"KILN_NODE": "0", "KILN_NODE_SLOTS": "3", "KILN_NODE_POLL_S": "0.01", "KILN_NODE_WAIT_S": "5"}
    parsed = settings_mod.from_env(env)
    assert (parsed.node, parsed.node_slots, parsed.node_poll_s, parsed.node_wait_s) == (False, 3, 0.01, 5.0)
    assert slot_count(parsed) == 3
    defaults = settings_mod.from_env({})
    assert defaults.node is True
    assert slot_count(defaults.replace(workers=1)) == (os.cpu_count() or 1)
    assert slot_count(defaults.replace(workers=8)) == max(8, os.cpu_count() or 1)  # alone: never held back
    for variable, bad in (("KILN_NODE", "maybe"), ("KILN_NODE_SLOTS", "0"), ("KILN_NODE_POLL_S", "60")):
        with pytest.raises(SettingsError, match=variable):
            settings_mod.from_env({variable: bad})


@pytest.mark.timeout(120)
def test_unusable_lock_files_leave_the_pool_compiling_alone(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "node").write_text("not a directory")  # no lock file can be made under it
    pool = make_pool(cache_dir=cache, workers=1)
    assert pool.compile(add_request(32), timeout_s=100).binary[:4] == b"\x7fELF"
    assert pool.stats.dispatched == 1
    assert pool.submit(add_request(32)).done()  # and the pool still works

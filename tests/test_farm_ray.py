"""The compile farm on a real local Ray cluster (``ray start --head`` on 127.0.0.1, a free port).

The cluster has 2 CPUs (this machine's), no dashboard; every process it started is counted
after the tests (:mod:`ray_cluster`); each pool starts one node actor (the node's kiln pool).
Faults are the crash matrix's real ones (``faults.py``: ``abort()``, a read of address 0, a
sleep forever inside Triton's compile), preloaded in the nodes' zygotes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("ray", reason="the farm's tests need Ray (pip install 'triton-kiln[ray]')")

from support import faults
from support.basics import SM90, add_request, is_cubin
from support.ray_cluster import LocalRayCluster
from test_crash_matrix import check_failure
from triton_kiln import CompileRequest, CompileTimeoutError, WorkerCrashedError
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.farm import RayCompilePool
from triton_kiln.farm.errors import NoNodeError
from triton_kiln.pool.handles import ENV_POOL_ID

BENCH = Path(__file__).resolve().parents[1] / "bench"
HANG_TIMEOUT_S = 4.0  # test_crash_matrix.check_failure's value


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with LocalRayCluster(num_cpus=2) as running:
        yield running
    left = running.leftovers()
    assert not left, [(p.pid, p.name(), p.cmdline()[:3]) for p in left]


@pytest.fixture
def farm(cluster: LocalRayCluster, tmp_path: Path) -> Iterator[RayCompilePool]:
    pool = RayCompilePool(
        cluster.address, cache_dir=tmp_path / "cache", job_timeout_s=900, preload=["support.faults"]
    )
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)
    # Ray ends a killed actor asynchronously: the next test starts once this pool's node actor
    # and its kiln pool are gone, so each test counts only its own pools.
    deadline = time.monotonic() + 30
    while (left := kiln_pools(cluster)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"kiln pools left on the node after shutdown: {sorted(left)}"


def fault(mode: str) -> CompileRequest:
    return CompileRequest(getattr(faults, f"fault_{mode}"), {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90)


def matmul_requests() -> list[CompileRequest]:
    """bench/autotune.py's 72-config matmul set, for sm_90, as tuning compiles it (ranks_set)."""
    sys.path.insert(0, str(BENCH))
    import ranks_set

    return ranks_set.matmul_requests(SM90)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_72_matmul_configs_with_an_abort_a_segfault_and_a_hang(
    farm: RayCompilePool, cluster: LocalRayCluster
) -> None:
    good = matmul_requests()
    assert len(good) == 72
    bad = {mode: fault(mode) for mode in ("abort", "segv", "hang")}
    futures = {r.key: farm.submit(r) for r in good}
    bad_futures = {mode: farm.submit(r, timeout_s=HANG_TIMEOUT_S) for mode, r in bad.items()}
    for mode, future in bad_futures.items():
        check_failure(future.exception(timeout=600), "compile", mode)
    store = ArtifactStore(farm.settings.cache_dir)
    for request in good:
        artifact = futures[request.key].result(timeout=600)
        assert is_cubin(artifact.binary), request.label()
        stored = store.get(request.key)  # verified and put into the local store
        assert stored is not None
        assert stored.binary == artifact.binary
    assert farm.stats.failed == 3
    assert farm.stats.compiled == 72
    assert farm.stats.node_retries == 0  # crashes are not Ray's failures: nothing re-ran
    assert_no_stray_kiln_processes(cluster)


def kiln_pools(cluster: LocalRayCluster) -> dict[str, list[psutil.Process]]:
    """The cluster's kiln processes (zygotes and kiln workers), by the kiln pool they belong to."""
    pools: dict[str, list[psutil.Process]] = {}
    for proc in cluster.processes():
        with contextlib.suppress(psutil.Error):
            pool_id = proc.environ().get(ENV_POOL_ID)
            if pool_id:
                pools.setdefault(pool_id, []).append(proc)
    return pools


def shape(procs: list[psutil.Process]) -> tuple[int, int]:
    """A kiln pool's zygotes and kiln workers (their children, ptxas, not counted)."""
    pids = {p.pid for p in procs}
    parents = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            parents[proc.pid] = proc.ppid()
    zygotes = {pid for pid, ppid in parents.items() if ppid not in pids}
    return len(zygotes), sum(1 for ppid in parents.values() if ppid in zygotes)


def assert_no_stray_kiln_processes(cluster: LocalRayCluster) -> None:
    """One kiln pool on the node (its actor's): one zygote and at most one worker per CPU,
    nothing more; the crashed and the hung workers are gone (reaped, their groups killed)."""
    deadline = time.monotonic() + 30
    while True:
        pools = kiln_pools(cluster)
        shapes = {k: shape(v) for k, v in pools.items()}
        if len(pools) == 1 and all(z == 1 and w <= cluster.num_cpus for z, w in shapes.values()):
            return
        assert time.monotonic() < deadline, f"kiln pools (zygotes, workers): {shapes}"
        time.sleep(0.2)


@pytest.mark.timeout(300)
def test_one_kiln_pool_per_node_however_many_jobs_run_at_once(
    farm: RayCompilePool, cluster: LocalRayCluster
) -> None:
    # Before: each Ray worker process made its own kiln pool (one zygote each, 2 on 2 CPUs).
    requests = [add_request(n) for n in (32, 64, 128, 256, 512, 1024)]
    futures = [farm.submit(r) for r in requests]
    seen: dict[str, tuple[int, int]] = {}  # pool -> most zygotes, most workers at once
    while not all(f.done() for f in futures):
        for pool_id, procs in kiln_pools(cluster).items():
            zygotes, workers = shape(procs)
            most = seen.get(pool_id, (0, 0))
            seen[pool_id] = (max(most[0], zygotes), max(most[1], workers))
        time.sleep(0.05)
    assert all(is_cubin(f.result().binary) for f in futures)
    assert len(seen) == 1, seen  # one kiln pool on the node, whatever ran
    ((zygotes, workers),) = seen.values()
    assert zygotes == 1
    assert workers <= cluster.num_cpus  # one kiln worker per CPU at most
    assert_no_stray_kiln_processes(cluster)


@pytest.mark.timeout(300)
def test_the_nodes_kiln_pool_is_warm_before_the_first_job(cluster: LocalRayCluster, tmp_path: Path) -> None:
    # Before: a Ray worker's kiln pool started with its first task, so nothing ran here.
    earlier = set(kiln_pools(cluster))  # (before: other pools' Ray workers kept theirs)
    pool = RayCompilePool(cluster.address, cache_dir=tmp_path / "cache")
    try:
        deadline = time.monotonic() + 120
        while not set(kiln_pools(cluster)) - earlier:
            assert time.monotonic() < deadline, "no kiln pool started on the node"
            time.sleep(0.1)
        (node,) = pool.wait_ready(120)
        assert node["warm"]
        assert node["zygote"] is not None
        assert node["workers"] == cluster.num_cpus == len(node["kiln_workers"])
        assert pool.stats.dispatched == 0
        # Ray's workers run at niceness 15; the node's kiln pool compiles at the caller's (as a
        # local pool does) where the node allows it (root, or RLIMIT_NICE)
        if os.geteuid() == 0:
            mine = os.getpriority(os.PRIO_PROCESS, 0)
            kiln = [node["zygote"], *node["kiln_workers"]]
            assert {psutil.Process(pid).nice() for pid in kiln} == {mine}
            assert node["niceness"] == mine
        # the start-up's timeline, seconds since the pool was made (bench/farm.py's rows)
        stats = pool.stats
        assert stats.connect_s is not None
        assert stats.actor_created_s is not None
        assert stats.actor_ready_s is not None
        assert 0 <= stats.connect_s <= stats.actor_created_s <= stats.actor_ready_s
        times = stats.actor_timeline
        assert set(times) == {"process_s", "constructor_s", "pool_s", "zygote_ready_s"}, times
        assert times["process_s"] <= times["constructor_s"] <= times["pool_s"] <= times["zygote_ready_s"]
        assert stats.first_dispatch_s is None
        assert stats.first_result_s is None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.timeout(300)
def test_jobs_go_to_a_starting_node_actor_and_come_back_if_it_never_starts(
    farm: RayCompilePool, cluster: LocalRayCluster, tmp_path: Path
) -> None:
    # Before: jobs waited in the caller until the actor's ready() came back (one round trip
    # after its constructor); now they are sent at once and Ray holds them. Here the actor
    # cannot start (the first pool holds the node's CPUs): its jobs come back, no try counted.
    farm.wait_ready(120)
    second = RayCompilePool(cluster.address, cache_dir=tmp_path / "second", node_start_timeout_s=3.0)
    try:
        futures = [second.submit(add_request(n)) for n in (32, 64)]
        deadline = time.monotonic() + 2.5
        while second.stats.dispatched < 2:
            assert time.monotonic() < deadline, second.stats
            time.sleep(0.02)
        assert second.stats.actor_ready_s is None  # sent before the actor ran
        for future in futures:
            exc = future.exception(timeout=120)
            assert isinstance(exc, NoNodeError), repr(exc)
            assert "not running after 3 s" in str(exc)
        assert second.stats.node_retries == 0
        assert second.stats.first_dispatch_s is not None
    finally:
        second.shutdown(wait=True, cancel_futures=True)
    assert farm.compile(add_request(128)).binary  # the first pool's actor serves on


@pytest.mark.timeout(300)
def test_a_hang_fails_with_kilns_timeout_and_the_ray_worker_serves_on(farm: RayCompilePool) -> None:
    exc = farm.submit(fault("hang"), timeout_s=2.0).exception(timeout=120)
    assert isinstance(exc, CompileTimeoutError), repr(exc)
    assert "the limit is 2 s" in str(exc)
    assert is_cubin(farm.compile(add_request(2048)).binary)


@pytest.mark.timeout(300)
def test_compile_many_keeps_the_input_order_with_failures_in_place(farm: RayCompilePool) -> None:
    requests = [add_request(512), fault("abort"), add_request(1024), add_request(512)]
    results = farm.compile_many(requests, progress=False)
    assert [type(r).__name__ for r in results] == [
        "CompiledArtifact",
        "WorkerCrashedError",
        "CompiledArtifact",
        "CompiledArtifact",
    ]
    assert results[0] is results[3] or results[0].binary == results[3].binary  # one request, once
    with pytest.raises(WorkerCrashedError):
        farm.compile_many(requests, progress=False, return_exceptions=False)


@pytest.mark.timeout(300)
def test_a_second_submit_is_served_from_the_local_store(farm: RayCompilePool, tmp_path: Path) -> None:
    request = add_request(4096)
    first = farm.compile(request)
    again = RayCompilePool(cache_dir=farm.settings.cache_dir)  # Ray is joined already: same cluster
    try:
        assert again.compile(request).binary == first.binary
        assert again.stats.disk_hits == 1
        assert again.stats.dispatched == 0
    finally:
        again.shutdown()


@pytest.mark.timeout(300)
def test_a_request_whose_unpickling_crashes_fails_alone_and_is_not_retried(farm: RayCompilePool) -> None:
    # The request's constexpr segfaults whoever unpickles it: only a kiln worker of the node's
    # pool does (the node actor passes the sealed request on unopened), so kiln's typed error,
    # and the actor serves on. (Before: the Ray worker process unpickled it, and died.)
    (before,) = farm.wait_ready(120)
    request = CompileRequest(
        faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": faults.Detonator("segv")}, target=SM90
    )
    exc = farm.submit(request).exception(timeout=120)
    assert isinstance(exc, WorkerCrashedError), repr(exc)
    assert exc.signal_name == "SIGSEGV"
    assert "BLOCK=Detonator('segv')" in str(exc)  # the caller's own description of the job
    assert farm.stats.node_retries == 0
    assert is_cubin(farm.compile(add_request(8192)).binary)  # the farm goes on
    (after,) = farm.wait_ready(120)
    assert after["pid"] == before["pid"]  # the same node actor
    assert farm.stats.actor_starts == 1


@pytest.mark.timeout(300)
def test_a_killed_node_actors_jobs_run_again(farm: RayCompilePool, cluster: LocalRayCluster) -> None:
    (first,) = farm.wait_ready(120)
    slow = [
        CompileRequest(faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": b}, target=SM90)
        for b in (32, 64, 128, 256)
    ]  # each compile sleeps 2 s (faults' stage hook)
    futures = [farm.submit(r, timeout_s=120) for r in slow]
    time.sleep(1.0)  # the actor's two workers each compiling one
    assert farm.stats.dispatched == 4
    os.kill(first["pid"], signal.SIGKILL)
    for future in futures:
        assert is_cubin(future.result(timeout=240).binary)
    assert farm.stats.node_retries >= 2  # at least the two running jobs ran again
    assert farm.stats.failed == 0
    assert farm.stats.actor_starts == 2  # a new actor on the same (live) node
    (second,) = farm.wait_ready(120)
    assert second["pid"] != first["pid"]
    # the killed actor's zygote and kiln workers died with it (parent-death signals)
    old = [first["zygote"], *first["kiln_workers"]]
    deadline = time.monotonic() + 30
    while alive := [
        pid for pid in old if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
    ]:
        assert time.monotonic() < deadline, alive
        time.sleep(0.2)
    assert_no_stray_kiln_processes(cluster)


def _raylets(cluster: LocalRayCluster) -> set[int]:
    return {p.pid for p in cluster.processes() if "raylet" in p.name()}


def _wait_for_nodes(pool: RayCompilePool, nodes: int, timeout_s: float = 120.0) -> None:
    """Until ``nodes`` node actors are warm (their kiln pools up)."""
    deadline = time.monotonic() + timeout_s
    while len(pool.wait_ready(timeout_s=max(1.0, deadline - time.monotonic()))) < nodes:
        assert time.monotonic() < deadline, f"{nodes} node actors were not warm within {timeout_s} s"
        time.sleep(0.2)


QUICK_NODE_DEATH = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}
"""Ray's GCS declares a silent raylet dead after ~1.5 s rather than its default ~15 s (the loss
itself is real: the raylet and its workers get SIGKILL)."""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lost_nodes_jobs_run_again_on_another_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TEST_SLOW_S", "6")
    # the survivor (the head) runs two jobs at once (they sleep: no CPU), so the lost node's jobs
    # run beside its own rather than after them
    with LocalRayCluster(num_cpus=2, env=QUICK_NODE_DEATH) as cluster:
        head_raylets = _raylets(cluster)
        cluster.add_node(num_cpus=1)
        second = _raylets(cluster) - head_raylets
        assert len(second) == 1
        pool = RayCompilePool(cluster.address, cache_dir=tmp_path / "cache", preload=["support.faults"])
        try:
            # both nodes' actors warm first: a node lost while its actor still starts (5.8 s on a
            # loaded 2-core machine) had run no job, and its jobs go elsewhere as never started
            _wait_for_nodes(pool, 2)
            slow = [
                CompileRequest(faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": b}, target=SM90)
                for b in (32, 64, 128, 256)
            ]
            futures = [pool.submit(r, timeout_s=120) for r in slow]
            time.sleep(3)  # both nodes busy with a 6 s compile
            raylet = psutil.Process(second.pop())
            victims = [raylet, *raylet.children(recursive=True)]
            for proc in victims:
                with contextlib.suppress(psutil.NoSuchProcess):  # gone with the raylet already
                    proc.send_signal(signal.SIGKILL)
            for future in futures:
                assert is_cubin(future.result(timeout=400).binary)
            assert pool.stats.node_retries >= 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    assert not cluster.leftovers()


@pytest.mark.timeout(120)
def test_a_call_to_a_node_actor_whose_node_is_gone_means_the_node_was_lost(cluster: LocalRayCluster) -> None:
    """A call to a killed node's actor can come back from Ray as ``ActorUnschedulableError``
    ("the node specified via NodeAffinitySchedulingStrategy doesn't exist any more"), not as a
    lost actor: the farm takes it for a lost node, so the job runs again on the node left rather
    than being skipped as the job's own failure. An actor pinned to a node that does not exist
    gets that error on every call."""
    from triton_kiln.farm import ray_api

    connected = ray_api.connect(cluster.address, {})
    try:
        gone = ray_api.NodeInfo("ab" * 28, "127.0.0.9", 1)
        actor, _ = ray_api.start_node_actor(gone, 1, 1, (1, (), None))
        reply, outcome, message = ray_api.fetch(ray_api.control(actor, "ready"))
        assert reply is None
        assert "not schedulable" in message
        assert outcome is ray_api.Outcome.ACTOR_LOST, message
        ray_api.kill(actor)
    finally:
        if connected:
            ray_api.disconnect()


@pytest.mark.timeout(300)
def test_kiln_compile_on_ray_fills_the_cache_and_exits(cluster: LocalRayCluster, tmp_path: Path) -> None:
    # A real `kiln compile` process: it joins the cluster, compiles 3 configs x 2 targets, and
    # leaves Ray before exiting (a Ray object ref freed after ray.shutdown() ends the process).
    cache = tmp_path / "cache"
    command = [
        sys.executable, "-m", "triton_kiln", "compile", "support.farm_kernels:tuned_scale",
        "--signature", "x_ptr=*fp32,out_ptr=*fp32,n=i32", "--target", "cuda:90", "--target", "cuda:100",
        "--ray", cluster.address, "--cache-dir", str(cache), "--strict",
    ]  # fmt: skip
    here = Path(__file__).parent
    options: dict[str, Any] = {"env": cluster.env, "cwd": here, "capture_output": True, "text": True}
    done = subprocess.run(command, timeout=240, check=False, **options)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"6 of 6 compiled on Ray cluster {cluster.address}" in done.stdout
    assert "already been shutdown" not in done.stderr
    assert len(list((cache / "artifacts-v2").glob("*/*/artifact.json"))) == 6

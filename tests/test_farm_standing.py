"""Standing node compilers on a real local Ray cluster: one warm kiln pool per node
that outlives its drivers (``kiln farm up`` / ``down``, ``RayCompilePool(standing=True)``).

The cluster is ``test_farm_ray``'s (``ray start --head`` on 127.0.0.1, 2 CPUs, every process
counted after the module); each test ends the standing compilers it leaves (``farm down``) and
checks that no kiln process is left on the node.
"""

from __future__ import annotations

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
from test_farm_ray import cluster, kiln_pools  # noqa: F401 - the module's Ray cluster
from triton_kiln import CompileRequest, settings
from triton_kiln.farm import RayCompilePool
from triton_kiln.farm import standing as farm
from triton_kiln.farm.errors import NoNodeError


@pytest.fixture
def clean(cluster: LocalRayCluster) -> Iterator[LocalRayCluster]:  # noqa: F811
    """The cluster, its standing compilers ended after the test and no kiln process left."""
    yield cluster
    farm.down(cluster.address)
    assert_no_kiln_processes(cluster)


def assert_no_kiln_processes(ray: LocalRayCluster) -> None:
    deadline = time.monotonic() + 30
    while pools := kiln_pools(ray):
        assert time.monotonic() < deadline, {k: [p.pid for p in v] for k, v in pools.items()}
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while left := [pid for pid in pids if alive(pid)]:
        assert time.monotonic() < deadline, left
        time.sleep(0.1)


def driver(ray: LocalRayCluster, cache: Path, **kwargs: Any) -> RayCompilePool:
    options: dict[str, Any] = {"standing": True, "job_timeout_s": 120, **kwargs}
    return RayCompilePool(ray.address, cache_dir=cache, **options)


def fault(mode: str) -> CompileRequest:
    return CompileRequest(getattr(faults, f"fault_{mode}"), {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=SM90)


@pytest.mark.timeout(300)
def test_two_drivers_one_after_the_other_share_one_standing_actor(
    clean: LocalRayCluster, tmp_path: Path
) -> None:
    # Before: every RayCompilePool started its own node actor and killed it at close.
    first = driver(clean, tmp_path / "a")
    try:
        assert is_cubin(first.compile(add_request(64)).binary)
        (one,) = first.wait_ready(120)
        assert first.stats.actor_starts == 1
        assert first.stats.actors_attached == 0
    finally:
        first.shutdown()
    time.sleep(1.0)
    assert alive(one["pid"])  # close left it running, its warm kiln pool with it
    assert alive(one["zygote"])
    assert len(kiln_pools(clean)) == 1

    second = driver(clean, tmp_path / "b")
    try:
        assert is_cubin(second.compile(add_request(128)).binary)
        stats = second.stats
        assert stats.actor_starts == 0  # no new actor: the running one was attached to
        assert stats.actors_attached == 1
        assert stats.first_result_s is not None
        assert stats.actor_timeline["constructor_s"] < 0  # made before this driver
        (two,) = second.wait_ready(120)
        assert two["pid"] == one["pid"]  # the same actor process
        assert two["zygote"] == one["zygote"]  # and the same warm kiln pool
        assert two["drivers"] == 2
    finally:
        second.shutdown()
    time.sleep(1.0)
    assert alive(one["pid"])
    assert len(kiln_pools(clean)) == 1  # one kiln pool on the node, through both drivers


@pytest.mark.timeout(300)
def test_standing_off_ends_the_actor_at_close_and_the_setting_turns_it_on(
    clean: LocalRayCluster, tmp_path: Path
) -> None:
    # Before: there was no standing mode (no setting KILN_FARM_STANDING, no standing= argument).
    assert settings.current().farm_standing is False
    private = RayCompilePool(clean.address, cache_dir=tmp_path / "a")  # the default: not standing
    try:
        assert is_cubin(private.compile(add_request(64)).binary)
        (node,) = private.wait_ready(120)
    finally:
        private.shutdown()
    wait_gone([node["pid"], node["zygote"]])  # as before: the actor and its pool end with the driver
    assert_no_kiln_processes(clean)

    with settings.scope(farm_standing=True):
        shared = RayCompilePool(clean.address, cache_dir=tmp_path / "b")
    try:
        assert is_cubin(shared.compile(add_request(128)).binary)
        (node,) = shared.wait_ready(120)
    finally:
        shared.shutdown()
    time.sleep(1.0)
    assert alive(node["pid"])  # KILN_FARM_STANDING=1: left running


@pytest.mark.timeout(300)
def test_kiln_farm_up_then_a_driver_then_farm_down_leaves_no_kiln_process(
    clean: LocalRayCluster, tmp_path: Path
) -> None:
    # Before: `kiln farm` did not exist (click: "No such command 'farm'").
    options: dict[str, Any] = {"env": clean.env, "capture_output": True, "text": True, "timeout": 240}
    kiln = [sys.executable, "-m", "triton_kiln", "farm"]
    up = subprocess.run([*kiln, "up", "--ray", clean.address], check=False, **options)
    assert up.returncode == 0, up.stdout + up.stderr
    (line,) = up.stdout.strip().splitlines()
    assert ": started, warm, actor pid " in line, line
    assert f"{clean.num_cpus} workers" in line
    pid = int(line.split("actor pid ")[1].split(",")[0])
    again = subprocess.run([*kiln, "up", "--ray", clean.address], check=False, **options)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f": already running, warm, actor pid {pid}," in again.stdout  # up twice: still one

    pool = driver(clean, tmp_path / "cache")
    try:
        assert is_cubin(pool.compile(add_request(256)).binary)
        assert pool.stats.actor_starts == 0
        (node,) = pool.wait_ready(60)
        assert node["pid"] == pid
    finally:
        pool.shutdown()
    assert alive(pid)
    compile_ = [
        sys.executable, "-m", "triton_kiln", "compile", "support.farm_kernels:tuned_scale",
        "--signature", "x_ptr=*fp32,out_ptr=*fp32,n=i32", "--ray", clean.address, "--standing",
        "--cache-dir", str(tmp_path / "cli-cache"), "--strict",
    ]  # fmt: skip
    done = subprocess.run(compile_, check=False, cwd=Path(__file__).parent, **options)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 of 3 compiled on Ray cluster" in done.stdout
    assert alive(pid)  # `kiln compile --standing` used it and left it running
    assert len(kiln_pools(clean)) == 1

    down = subprocess.run([*kiln, "down", "--ray", clean.address], check=False, **options)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "1 standing compiler(s) ended" in down.stdout
    wait_gone([pid, node["zygote"], *node["kiln_workers"]])
    assert_no_kiln_processes(clean)


@pytest.mark.timeout(300)
def test_a_standing_actor_killed_between_drivers_is_replaced_by_the_next(
    clean: LocalRayCluster, tmp_path: Path
) -> None:
    # Before: no standing actor to lose (and no farm.up).
    (row,) = farm.up(clean.address)
    assert row["started"]
    assert row["warm"]
    os.kill(row["pid"], signal.SIGKILL)  # killed while no driver runs
    wait_gone([row["pid"], row["zygote"]])  # its kiln pool died with it
    pool = driver(clean, tmp_path / "cache")
    try:
        assert is_cubin(pool.compile(add_request(512)).binary)
        assert pool.stats.actor_starts == 1  # a new standing actor, made by this driver
        assert pool.stats.failed == 0
        (node,) = pool.wait_ready(120)
        assert node["pid"] != row["pid"]
    finally:
        pool.shutdown()
    time.sleep(1.0)
    assert alive(node["pid"])  # the replacement is standing too
    (back,) = farm.up(clean.address)
    assert not back["started"]
    assert back["pid"] == node["pid"]


@pytest.mark.timeout(300)
def test_a_crash_in_a_standing_actor_fails_only_its_job_and_it_serves_the_next_driver(
    clean: LocalRayCluster, tmp_path: Path
) -> None:
    (row,) = farm.up(clean.address, preload=["support.faults"])
    first = driver(clean, tmp_path / "a", preload=["support.faults"])
    try:
        results = first.compile_many([fault("abort"), add_request(1024)], progress=False)
        check_failure(results[0], "compile", "abort")
        assert is_cubin(results[1].binary)
        assert first.stats.node_retries == 0
    finally:
        first.shutdown()
    second = driver(clean, tmp_path / "b", preload=["support.faults"])
    try:
        assert is_cubin(second.compile(add_request(2048)).binary)
        (node,) = second.wait_ready(60)
        assert node["pid"] == row["pid"]  # the crash killed a kiln worker, not the actor
        assert second.stats.actor_starts == 0
    finally:
        second.shutdown()


@pytest.mark.timeout(300)
def test_a_driver_asking_for_preloads_the_standing_actor_lacks_is_refused(
    clean: LocalRayCluster, tmp_path: Path
) -> None:
    (row,) = farm.up(clean.address)  # no preloads
    pool = driver(clean, tmp_path / "cache", preload=["support.faults"])
    try:
        exc = pool.submit(add_request(4096)).exception(timeout=120)
        assert isinstance(exc, NoNodeError), repr(exc)
        assert "does not preload ['support.faults']" in str(exc)
        assert "kiln farm down" in str(exc)
    finally:
        pool.shutdown()
    assert alive(row["pid"])  # left alone, for the drivers it suits


@pytest.mark.timeout(300)
def test_two_drivers_at_once_share_the_standing_actor(clean: LocalRayCluster, tmp_path: Path) -> None:
    # Before: the second driver's actor waited for the first's CPUs (node_start_timeout_s).
    (row,) = farm.up(clean.address)
    first = driver(clean, tmp_path / "a")
    second = driver(clean, tmp_path / "b")  # Ray is joined: the same connection
    try:
        futures = [pool.submit(add_request(n)) for n in (32, 64, 128) for pool in (first, second)]
        assert all(is_cubin(f.result(timeout=120).binary) for f in futures)
        for pool in (first, second):
            assert pool.stats.actor_starts == 0
            assert pool.stats.actors_attached == 1
            (node,) = pool.wait_ready(60)
            assert node["pid"] == row["pid"]
        assert len(kiln_pools(clean)) == 1
    finally:
        second.shutdown()
        first.shutdown()
    assert alive(row["pid"])

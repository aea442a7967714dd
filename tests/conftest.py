"""Shared fixtures: fresh pools on fresh caches, and a leftover-process count after each test.

The whole suite (``python -m pytest``, no paths) runs on several processes where no GPU is and
pytest-xdist is installed (requirements-dev.txt): :func:`pytest_cmdline_main`."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.basics import gpu_available, wait_no_processes
from support.redis_server import RedisServer, running_server
from triton_kiln import CompilePool
from triton_kiln.settings import usable_cores


@pytest.fixture
def make_pool(tmp_path: Path) -> Iterator[Callable[..., CompilePool]]:
    """Factory for pools on a fresh cache; after the test: shut down and assert nothing leaked."""
    pools: list[CompilePool] = []

    def factory(**kwargs: Any) -> CompilePool:
        kwargs.setdefault("cache_dir", tmp_path / f"cache{len(pools)}")
        kwargs.setdefault("workers", 2)
        pool = CompilePool(**kwargs)
        pools.append(pool)
        return pool

    yield factory
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)
    for pool in pools:
        left = wait_no_processes(pool.pool_id)
        assert not left, f"processes leaked by pool {pool.pool_id}: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server on 127.0.0.1 for the test; after it: stopped, and no redis-server
    process left."""
    with running_server(tmp_path / "redis") as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


@pytest.fixture(autouse=True)
def _own_process_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # kiln's process-wide pool (get_pool(): kiln.install(), kiln.inductor.install(), ...) takes
    # the KILN_* settings of its first use and is kept for the process. Made by one test, it
    # served a later one from that test's cache: the user's own ~/.cache/kiln where the first set
    # no KILN_CACHE_DIR, whose binaries (the module's path is in their line info, not in the key)
    # were an earlier run's. Each test starts with none; the one it made is shut down after.
    from triton_kiln.pool import pool as pool_mod

    monkeypatch.setattr(pool_mod, "_DEFAULT_POOL", None)
    yield
    made = pool_mod._DEFAULT_POOL
    if made is not None and not made.closing:
        made.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(autouse=True)
def _no_program_record(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every test of a run is one program (pytest) on one cache directory: a record one test's
    # kiln.install() kept would start compiles in another's. tests/test_program_record.py turns
    # it on where it tests it.
    monkeypatch.setenv("KILN_PROGRAM_RECORD", "0")


@pytest.fixture(autouse=True)
def _no_remote_client_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # A process keeps one remote-cache client, with its circuit breaker, per URL. A test's
    # server listens on an ephemeral port that a later test's server can be given again, and
    # would then meet the earlier server's open breaker: each test starts with no client.
    remote = sys.modules.get("triton_kiln.remote")
    if remote is not None:
        monkeypatch.setattr(remote, "_clients", {})


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> str:
    """Where a contract that a CPU stand-in and a real GPU both show is checked: ``cpu`` (real
    compiles for sm_90; a stand-in for the GPU's driver, timings or outputs) and ``gpu`` (marked
    ``gpu``: skipped without one, :func:`pytest_collection_modifyitems`). A test that takes it
    writes the contract once and runs it on each."""
    return str(request.param)


SUITE_PROCESSES_MAX = 8
"""The most test processes the whole suite spreads over (each imports torch: ~1 GB)."""


def suite_processes(config: pytest.Config) -> int:
    """How many processes this run spreads its tests over (0: this one only).

    The whole suite (no paths given: pytest's ``testpaths``) on a machine with no GPU spreads over
    its cores, at most ``SUITE_PROCESSES_MAX``, file by file (``--dist loadfile``: a file's
    module-scoped servers and pools start once). Many tests wait (a hang killed at its timeout, a
    server or a torch import starting) rather than compute, so on CI's 2 cores two processes take
    the suite from ~21 to ~13 minutes. Never where a GPU is (its tests share one
    device and time it), nor when the run names files, ``-n``/``--dist`` itself, ``--pdb``,
    ``--collect-only``, or ``PYTEST_XDIST_AUTO_NUM_WORKERS=0``."""
    option = config.option
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return 0  # no pytest-xdist, or this is one of its workers
    if option.numprocesses is not None or option.dist != "no" or option.usepdb or option.collectonly:
        return 0
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS or gpu_available():
        return 0
    wanted = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if wanted is not None and wanted.strip().isdigit():
        return int(wanted)
    return min(usable_cores(), SUITE_PROCESSES_MAX)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Spread the whole suite over :func:`suite_processes` processes (before pytest-xdist reads
    its options in its own ``pytest_cmdline_main``)."""
    processes = suite_processes(config)
    if processes > 1:
        config.option.numprocesses = processes
        config.option.dist = "loadfile"


def _routing_state() -> tuple[bool, bool]:
    from triton_kiln.routing import autotune as routing
    from triton_kiln.routing import jit as jit_routing

    return routing.installed(), jit_routing.installed()


@contextlib.contextmanager
def _routing_given_back(what: str) -> Iterator[None]:
    """Fails ``what`` (a test, a module) that leaves kiln's routing other than it found it, and
    uninstalls it: a routing left in effect changes what every later test in the process
    decorates, and the order tests run in differs between one process and several (xdist)."""
    before = _routing_state()
    yield
    after = _routing_state()
    if after != before:
        from triton_kiln.routing import autotune as routing
        from triton_kiln.routing import jit as jit_routing

        routing.uninstall()
        jit_routing.uninstall()
        pytest.fail(
            f"this {what} left kiln's routing other than it found it (triton.autotune, plain JIT routed: "
            f"{before} -> {after}); pair each kiln.install() with kiln.uninstall()"
        )


@pytest.fixture(autouse=True, scope="module")
def _no_routing_left_by_a_module() -> Iterator[None]:
    with _routing_given_back("module (its module-scoped fixtures included)"):
        yield


@pytest.fixture(autouse=True)
def _no_routing_left_by_a_test(_no_routing_left_by_a_module: None) -> Iterator[None]:
    with _routing_given_back("test"):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Files that hold a ``slow`` test run first (the order within a file kept): the suite spreads
    # over processes file by file, and a slow file that starts last is the whole run's tail.
    slow_files = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow_files)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


FAILURE_LOG = "KILN_TEST_FAILURE_LOG"
"""A file each failing test's report is appended to as it fails (the GPU machine's suite runs
under a time limit: a run stopped at it still says why each test failed)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(FAILURE_LOG)
    # under xdist the controller writes each report (a crashed worker's too); its workers do not
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")

"""Shared fixtures: fresh pools on fresh caches, and a leftover-process count after each test."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from triton_kiln import CompilePool, CompileRequest, GPUTarget
from triton_kiln.pool.handles import ENV_POOL_ID

SM90 = GPUTarget("cuda", 90, 32)


def pool_processes(pool_id: str) -> list[psutil.Process]:
    """Every live process (zygote, workers, their children) that belongs to ``pool_id``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(ENV_POOL_ID) == pool_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait_no_processes(pool_id: str, timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while True:
        left = pool_processes(pool_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


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


@pytest.fixture(autouse=True)
def _fresh_triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


def add_request(block: int = 128, num_warps: int = 4, **kwargs: Any) -> CompileRequest:
    import kernels

    return CompileRequest(
        kernels.add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
        {"BLOCK": block},
        options={"num_warps": num_warps},
        target=kwargs.pop("target", SM90),
        **kwargs,
    )


def is_cubin(data: bytes) -> bool:
    return data[:4] == b"\x7fELF" and len(data) > 1000


def gpu_available() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

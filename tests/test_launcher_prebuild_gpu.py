"""On a GPU with Triton 3.5/3.6: a kernel compiled through kiln (plain jit routing, a
tuning run) is first launched without gcc in the calling thread: Triton's per-signature launcher
was built into Triton's cache by kiln's background thread while the pool compiled, so the
launch's ``compile_module_from_src`` is a cache hit; and the kernel's output is right.

Every ``compile_module_from_src`` call of Triton's NVIDIA driver for its launcher is recorded
(thread, whether Triton's cache held the module before the call) and then runs as Triton's own."""

from __future__ import annotations

import hashlib
import sysconfig
import threading
from collections.abc import Callable
from typing import Any

import pytest
import triton
import triton.language as tl

import triton_kiln as kiln
from triton_kiln import CompilePool
from triton_kiln.launch import prebuild
from triton_kiln.routing import jit as jit_routing
from triton_kiln.triton_compat.triton_launcher import LAUNCHER_MODULE
from triton_kiln.triton_compat.versions import builds_launcher_per_signature

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not builds_launcher_per_signature(), reason="this Triton builds no launcher per signature"
    ),
]


@triton.jit
def triple_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


@triton.jit
def routed_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """This file's own plain kernel: a kernel another test of the process launched with the same
    arguments (``kernels.add_kernel`` in test_jit_routing_gpu.py) is in its ``JITFunction``'s
    memory and would never reach the routed compile."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2 * x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def _in_tritons_cache(src: str, name: str) -> bool:
    from triton.runtime.build import platform_key
    from triton.runtime.cache import get_cache_manager

    key = hashlib.sha256((src + platform_key()).encode("utf-8")).hexdigest()
    return get_cache_manager(key).get_file(f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}") is not None


@pytest.fixture
def launcher_builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """``(thread name, cached before)`` of every build of Triton's launcher from now on (with a
    fresh prebuilder: this process's one remembers sources built into earlier tests' caches)."""
    from triton.backends.nvidia import driver

    monkeypatch.setattr(prebuild, "PREBUILDER", prebuild.LauncherPrebuilder())

    original = driver.compile_module_from_src
    calls: list[tuple[str, bool]] = []

    def record(src: str, name: str, **kwargs: Any) -> Any:
        if name == LAUNCHER_MODULE:
            calls.append((threading.current_thread().name, _in_tritons_cache(src, name)))
        return original(src=src, name=name, **kwargs)

    monkeypatch.setattr(driver, "compile_module_from_src", record)
    return calls


@pytest.fixture
def routed(make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch) -> Any:
    import triton

    if hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):  # see test_jit_routing_gpu.py
        monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", None)
    pool = make_pool()
    monkeypatch.setattr(jit_routing, "_pool", lambda: pool)
    jit_routing.install()
    yield pool
    jit_routing.uninstall()


def _main_thread_gcc(calls: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The launcher builds that ran gcc in the calling (main) thread: not cached before."""
    me = threading.current_thread().name
    return [(thread, cached) for thread, cached in calls if thread == me and not cached]


def test_a_routed_plain_jit_kernels_first_launch_runs_no_gcc(
    routed: CompilePool, launcher_builds: list[tuple[str, bool]]
) -> None:
    import torch

    n = 5000
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    routed_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + y)
    assert routed.stats.submitted >= 1  # compiled in kiln's pool
    assert prebuild.PREBUILDER.wait(60)
    assert ("kiln-launcher-prebuild", False) in launcher_builds  # built in the background
    assert _main_thread_gcc(launcher_builds) == [], launcher_builds


def test_an_autotuned_kernels_first_call_runs_no_gcc(
    make_pool: Callable[..., CompilePool], launcher_builds: list[tuple[str, bool]], tmp_path: Any
) -> None:
    import torch
    import triton

    from triton_kiln.tuning import TuningDatabase

    tuned = kiln.autotune(
        [kiln.Config({"BLOCK": b}, num_warps=4) for b in (128, 256, 1024)],
        key=["n"],
        pool=make_pool(),
        database=TuningDatabase(tmp_path / "tuning.sqlite3"),
    )(triple_kernel)
    n = 100_000
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 3 * x)
    assert prebuild.PREBUILDER.wait(60)
    assert ("kiln-launcher-prebuild", False) in launcher_builds  # built in the background
    assert _main_thread_gcc(launcher_builds) == [], launcher_builds


DRIVER_UTILS_SCRIPT = r"""
import json, sys, threading, time
import triton_kiln
from triton_kiln.launch import prebuild
from triton.backends.nvidia import driver

calls = []
original = driver.compile_module_from_src

def record(src, name, **kwargs):
    if name == "cuda_utils":
        calls.append([threading.current_thread().name, cached(src, name)])
    return original(src=src, name=name, **kwargs)

def cached(src, name):
    import hashlib, sysconfig
    from triton.runtime.build import platform_key
    from triton.runtime.cache import get_cache_manager
    key = hashlib.sha256((src + platform_key()).encode("utf-8")).hexdigest()
    return get_cache_manager(key).get_file(name + sysconfig.get_config_var("EXT_SUFFIX")) is not None

driver.compile_module_from_src = record
if sys.argv[1] == "prebuild":
    assert prebuild.start_driver_utils()
    for thread in threading.enumerate():
        if thread.name == "kiln-driver-prebuild":
            thread.join(60)
import torch
x = torch.ones(8, device="cuda")
from triton.runtime import driver as runtime_driver
runtime_driver.active.utils  # Triton's CudaUtils: built (or loaded) here
print(json.dumps(calls))
"""


@pytest.mark.parametrize("mode", ["prebuild", "none"])
def test_the_driver_utils_are_in_tritons_cache_before_the_first_use(mode: str, tmp_path: Any) -> None:
    """A fresh process with a fresh Triton cache: with kiln's prebuild, Triton's own
    ``CudaUtils`` build is a cache hit on the main thread; without, it runs gcc there."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / f"triton-{mode}")}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER_UTILS_SCRIPT, mode],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    calls = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "prebuild":
        assert calls[0] == ["kiln-driver-prebuild", False]
        assert [c for c in calls if c[0] == "MainThread"] in ([["MainThread", True]], [])
    else:
        assert calls == [["MainThread", False]]

"""The ``triton_parallel`` arm's mechanism (``bench/parallel_precompile.py``) without a GPU.

Triton's active driver is stood in for (it only names the device and sm_90); every compile is
Triton's own, for sm_90, for real. A stock ``triton.autotune`` kernel's tuning compiles every
config in the process pool into a fresh ``TRITON_CACHE_DIR``, after which Triton's own compile of
each config in this process is a cache hit: nothing new is compiled or written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import parallel_precompile  # noqa: E402
from support import parallel_precompile_kernels as kernels  # noqa: E402
from support.jit_support import FakeDriver  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(driver, "_active", FakeDriver())
    if hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):
        monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", None)
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))  # read by the workers as they start
    return cache


def configs() -> list[triton.Config]:
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 256) for w in (2, 4)]


def cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


@pytest.mark.timeout(600)
def test_a_tuning_compiles_every_config_in_the_pool_and_tritons_compile_then_hits_the_cache(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the module's own JITFunction, as the workers compile it (a JITFunction made again from its
    # function has another cache key on Triton 3.6.0, where a helper it calls reads a global)
    kernel = kernels.add_kernel
    tuner = triton.autotune(configs(), key=["n"])(kernel)
    x, y, out = (torch.zeros(1024) for _ in range(3))
    compiles: list[bool] = []

    def listener(*, cache_hit: bool, **_: Any) -> None:
        compiles.append(cache_hit)

    with parallel_precompile.installed(workers=2) as plan:
        # the pool compiles every config (no listener here), then Triton's JIT compiles each in
        # this process, as _bench would
        tuner.nargs = dict(zip(tuner.arg_names, (x, y, out, 1024), strict=False))
        plan.tune(tuner, configs(), {"grid": (1,)})
        stats = plan.stats()
        written = cache_files(fresh_cache)
        monkeypatch.setattr(triton.knobs.compilation, "listener", listener)
        tuner.nargs = None
        for config in configs():
            kernel.warmup(x, y, out, 1024, grid=(1,), **config.all_kwargs())
    assert (stats["jobs"], stats["failed"], stats["workers"]) == (4, 0, 2), stats
    assert sum(p.name.endswith(".cubin") for p in written) == 4
    assert compiles == [True] * 4  # Triton's own compile of each config: a cache hit
    assert cache_files(fresh_cache) == written  # and nothing new in the cache


@pytest.mark.timeout(600)
def test_the_wrapped_prune_configs_precompiles_and_is_put_back(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triton.runtime.autotuner import Autotuner

    hits: list[bool] = []
    monkeypatch.setattr(
        triton.knobs.compilation, "listener", lambda *, cache_hit, **_: hits.append(cache_hit)
    )

    original = Autotuner.prune_configs
    kernel = kernels.scale_kernel
    tuner = triton.autotune(configs(), key=["n"])(kernel)
    x, out = torch.zeros(1024), torch.zeros(1024)
    with parallel_precompile.installed(workers=2) as plan:
        assert Autotuner.prune_configs is not original
        tuner.warmup(x, out, 1024, grid=(1,))  # prunes (wrapped), then warms each config
    assert Autotuner.prune_configs is original
    stats = plan.stats()
    assert (stats["tunings"], stats["configs"], stats["jobs"], stats["failed"]) == (1, 4, 4, 0), stats
    assert hits == [True] * 4  # Autotuner.warmup's own compiles, after the pool's


def test_a_job_whose_kernel_a_worker_cannot_find_fails_alone(fresh_cache: Path) -> None:
    plan = parallel_precompile.Precompiler(workers=1)
    job = parallel_precompile.CompileJob(
        "no_such_module_here", "kernel", {"x": "*fp32"}, {}, {}, SM90, {"num_warps": 4}
    )
    try:
        (result,) = plan.compile([job])
    finally:
        plan.shutdown()
    assert result.error is not None
    assert "no_such_module_here" in result.error


def test_a_worker_refuses_to_import_kiln() -> None:
    plan = parallel_precompile.Precompiler(workers=1)
    try:
        future = plan._executor().submit(__import__, "triton_kiln")
        with pytest.raises(ImportError):
            future.result(timeout=120)
    finally:
        plan.shutdown()

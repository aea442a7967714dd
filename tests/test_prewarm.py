"""triton_kiln.autotuner.prewarm: what a tuning's first miss starts; a definition or install() starts nothing.

A GPU cannot exist on CI, so "a GPU is present" is the one thing faked here; Triton's key is
computed for real (into a fresh cache directory) and the pool start is recorded.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import triton

import triton_kiln as kiln
from support.kernels import add_kernel
from triton_kiln import settings, triton_compat
from triton_kiln.autotuner import prewarm as prewarm_mod
from triton_kiln.sandbox import registry


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A process that prewarmed nothing yet, with a recorded pool start, on a cache that has
    tuned before (``KILN_PREWARM=auto`` starts nothing there: tests/test_footprint.py)."""
    from test_footprint import record_a_run

    record_a_run(tmp_path / "tuning.sqlite3")
    events: list[str] = []
    monkeypatch.setattr(prewarm_mod, "_started", False)
    monkeypatch.setattr(prewarm_mod, "_untuned_checked", set())
    monkeypatch.setattr(prewarm_mod, "_compare_queued", False)
    monkeypatch.setattr(triton_compat.core, "_TRITON_KEY", None)
    import triton_kiln as kiln
    import triton_kiln.pool

    def pool() -> Any:
        events.append(f"pool after key file: {any(tmp_path.glob('triton-key-*.json'))}")
        return SimpleNamespace(start=lambda: events.append("zygote started"))

    monkeypatch.setattr(kiln.pool, "get_pool", pool)
    monkeypatch.setattr(registry, "prestart", lambda: events.append("sandbox"))
    with settings.scope(cache_dir=tmp_path):
        yield events


def _join_prewarm() -> None:
    for thread in threading.enumerate():
        if thread.name == "kiln-prewarm":
            thread.join(timeout=60)


def test_nothing_starts_without_a_gpu(fresh: list[str]) -> None:
    assert registry.gpu_present() is False
    assert prewarm_mod.prewarm(sandbox=True, pool=True) is False
    _join_prewarm()
    assert fresh == []


def test_a_gpu_machine_computes_the_key_then_makes_the_pool_once(
    fresh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    assert prewarm_mod.prewarm(sandbox=True, pool=True) is True
    assert prewarm_mod.prewarm(sandbox=False, pool=True) is True  # the pool starts once
    _join_prewarm()
    assert fresh == ["sandbox", "pool after key file: True", "zygote started"]


def test_defining_a_tuned_kernel_starts_nothing(fresh: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    configs: Any = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    kiln.autotune(configs=configs, key=["n"], sandbox=True)(add_kernel)
    _join_prewarm()
    assert fresh == []  # the sandbox and the pool wait for a tuning's first miss


def test_install_starts_nothing(fresh: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    kiln.install()
    try:
        _join_prewarm()
        assert fresh == []
    finally:
        kiln.uninstall()

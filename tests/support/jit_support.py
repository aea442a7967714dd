"""Shared by the plain-jit routing tests: the one fake (Triton's active GPU driver: there is no GPU
here; every compile targets sm_90 for real), a caller that cannot compile, and kiln's JIT routing
installed on a test pool."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import triton
import triton.compiler.compiler as triton_compiler
from triton.runtime import driver

from triton_kiln import CompilePool, GPUTarget
from triton_kiln.routing import jit as jit_routing

SM90 = GPUTarget("cuda", 90, 32)


class FakeDriver:
    """What ``JITFunction.run(..., warmup=True)`` asks of Triton's active driver."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return SM90

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")


@pytest.fixture(autouse=True)
def fake_driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """:class:`FakeDriver` as Triton's active driver, but for a test on the ``gpu`` backend
    (conftest's ``backend``), which runs on Triton's own."""
    # Other test modules (faults.py) install a compile stage hook in this process when imported;
    # with one, kiln leaves plain jit compiles to Triton (test_a_caller_stage_hook_...).
    if hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):
        monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", None)
    if "backend" in request.fixturenames and request.getfixturevalue("backend") == "gpu":
        return
    monkeypatch.setattr(driver, "_active", FakeDriver())


def cubin_sha(kernel: Any) -> str:
    return hashlib.sha256(kernel.asm["cubin"]).hexdigest()


@pytest.fixture
def caller_cannot_compile(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on a Triton compile in this process raises (a cache hit still loads). Returns
    the names of the kernels this process tried to compile."""
    tried: list[str] = []

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        tried.append(self.name)
        raise AssertionError(f"{self.name} was compiled in the calling process")

    monkeypatch.setattr(triton_compiler.ASTSource, "make_ir", refuse)
    return tried


@pytest.fixture
def route_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[CompilePool], None]]:
    """``route_on(pool)``: plain-jit routing installed with ``pool`` as kiln's pool; removed after."""

    def install(pool: CompilePool) -> None:
        monkeypatch.setattr(jit_routing, "_pool", lambda: pool)
        jit_routing.install()

    yield install
    jit_routing.uninstall()

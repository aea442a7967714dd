"""Shared by the kiln.inductor tests: the fixtures' sources, Inductor's own worker path, a parent
that cannot compile, and kiln.inductor installed on a test pool."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch._inductor.async_compile")

import torch._inductor.config as inductor_config
import triton.compiler.compiler as triton_compiler
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.codecache import _load_triton_kernel_from_source
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.compile_tasks import _worker_compile_triton

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks
from triton_kiln import CompilePool

FIXTURES = Path(__file__).resolve().parent / "inductor_fixtures"

# fixture file -> the kernel's name in it (as Inductor's generated modules name them)
KERNELS = {
    "pointwise": "triton_poi_fused_add_mul_relu_0",
    "reduction": "triton_red_fused_sum_0",
    "persistent_reduction": "triton_per_fused__softmax_0",
    "template_mm": "triton_tem_fused_mm_0",
    "user_kernel": "add_kernel",
    "combo_foreach": "triton_for_fused_add_mul_0",  # a combo kernel (two pointwise sub-kernels)
}


def source(kind: str, *, rename: str | None = None, tuned: bool = False) -> tuple[str, str]:
    """(kernel name, generated source) of a fixture; ``rename`` gives the kernel another name,
    ``tuned`` turns coordinate descent on in its ``inductor_meta`` (the binaries stay the same)."""
    name = KERNELS[kind]
    text = (FIXTURES / f"{kind}.py").read_text()
    if rename is not None:
        text = text.replace(name, rename)
        name = rename
    if tuned:
        on = text.replace("'max_autotune': ", "'coordinate_descent_tuning': True, 'max_autotune': ", 1)
        assert on != text, f"the {kind} fixture's inductor_meta has no 'max_autotune' entry"
        text = on
    return name, text


def precompiled(name: str, text: str) -> Any:
    """The kernel of a fixture's source, loaded and its configs compiled (in kiln's pool while
    kiln is installed), as the serial path and coordinate descent find it."""
    from torch._inductor.codecache import PyCodeCache

    kernel = getattr(PyCodeCache.load(text), name)
    kernel.precompile(warm_cache_only=True)
    return kernel


def load_kernel(name: str, text: str) -> Callable[[], Any]:
    """What ``AsyncCompile.triton`` hands its pool: ``load_kernel`` of ``_worker_compile_triton``."""
    return functools.partial(_load_triton_kernel_from_source, name, text)


def submit(name: str, text: str) -> Any:
    """A ``_worker_compile_triton`` job, submitted as ``AsyncCompile.triton`` submits it (with the
    cache directories of this moment, which Inductor sends along for its worker to set)."""
    extra_env = {v: os.environ[v] for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR") if v in os.environ}
    return AsyncCompile.process_pool().submit(_worker_compile_triton, load_kernel(name, text), extra_env, {})


def inductors_own(name: str, text: str) -> Any:
    """Inductor's own worker path for the job (run in this process, as its worker runs it)."""
    kernel, _ = _worker_compile_triton(load_kernel(name, text), {}, {})
    return kernel


def cubin_hashes(kernel: Any) -> list[str]:
    hashes = []
    for result in kernel.compile_results:
        compiled = result.kernel
        raw = getattr(compiled, "cubin_raw", None) or compiled.asm["cubin"]
        hashes.append(hashlib.sha256(raw).hexdigest())
    return hashes


@pytest.fixture(autouse=True)
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The only fake: Inductor asks Triton for an active GPU driver; there is none here. Every
    compile targets sm_90 (the fixtures' DeviceProperties), for real."""
    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))


@pytest.fixture
def four_compile_threads() -> Iterator[None]:
    """Inductor's parallel compile on (it is off with one compile thread)."""
    with inductor_config.patch(compile_threads=4):
        yield


@pytest.fixture
def parent_cannot_compile(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From the test's start, a Triton compile in this process raises: see :func:`refuse_compiles`."""
    return refuse_compiles(monkeypatch)


def refuse_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, a Triton compile in this process raises (a cache hit still loads): every
    compile must happen in kiln's workers. Returns the names of kernels the parent tried."""
    tried: list[str] = []

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        tried.append(self.name)
        raise AssertionError(f"{self.name} was compiled in the parent process")

    monkeypatch.setattr(triton_compiler.ASTSource, "make_ir", refuse)
    return tried


@pytest.fixture
def install_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[CompilePool], None]]:
    """``install_on(pool)``: kiln.inductor installed with ``pool`` as kiln's pool, each job's
    in-process work in this process's threads (no sidecar: its pool would be its own);
    uninstalled after."""

    def install(pool: CompilePool) -> None:
        monkeypatch.setattr(inductor_hooks, "_kiln_pool", lambda: pool)
        kiln_inductor.install(sidecar=False)

    yield install
    kiln_inductor.uninstall()

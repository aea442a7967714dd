"""The C++ wrapper's lazy compile (torch >= 2.12) through kiln, on CPU.

``torch.compile(..., options={"cpp_wrapper": True})`` with ``triton.autotune_at_compile_time``
off (the default outside AOTInductor) embeds each Triton kernel's ``async_compile.triton(...)``
call in the C++ module; at model load the C++ code calls
``triton_lazy_compile.start_kernel_compile(pending, name, source)``, which ``eval``s that call on
the module's own cached ``AsyncCompile()``, and the first run calls
``run_triton_kernel_with_autotune``, which takes the kernel from ``pending``. These tests call
``start_kernel_compile`` exactly as the C++ code does (the kernel's source embedded as
``cpp_wrapper_gpu.py`` embeds it), with the fixtures' sm_90 kernels: its compiles go to kiln's
workers (nothing compiles in this process), a config whose compile aborts is one dropped config,
and ``uninstall()`` leaves the module's ``AsyncCompile`` with Inductor's own pool. Timing a
kernel's configs on its first run needs a GPU (``tests/test_inductor_gpu.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from support.inductor_support import (
    fake_gpu,  # noqa: F401 - autouse fixture
    four_compile_threads,  # noqa: F401 - fixture
    install_on,  # noqa: F401 - fixture
    parent_cannot_compile,  # noqa: F401 - fixture
    source,
)

pytest.importorskip("torch._inductor.async_compile")

import torch._inductor.config as inductor_config
from torch._inductor.async_compile import AsyncCompile, CompiledTritonKernels
from torch._inductor.codecache import CodeCacheFuture
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

import triton_kiln.inductor as kiln_inductor
from triton_kiln import CompilePool
from triton_kiln.inductor.process_pool import InductorPool
from triton_kiln.triton_compat import inductor as compat

lazy_compile = compat.lazy_compile_module()
if lazy_compile is None:
    pytest.skip(
        f"torch {compat.torch_version()} has no C++-wrapper lazy compile "
        "(torch._inductor.runtime.triton_lazy_compile is torch 2.12's and later)",
        allow_module_level=True,
    )

PRELOAD = (
    "support.inductor_faults_preload"  # kilnfault_abort kernels abort the workers' compiler at num_warps=8
)


def embedded(name: str, text: str) -> str:
    """The kernel's ``{name}_source`` string as the C++ wrapper embeds it: the Python wrapper's
    ``async_compile.triton(...)`` call (``TritonScheduling.define_kernel``), between newlines."""
    return f"\nasync_compile.triton({name!r}, '''\n{text}''', device_str='cuda')\n"


@pytest.fixture(autouse=True)
def fresh_lazy_compile() -> Iterator[None]:
    """Each test starts with Inductor's in-memory kernel cache empty and the module's cached
    ``AsyncCompile`` as the process had it, given back after."""
    saved = compat.lazy_compile_async_compile()
    CompiledTritonKernels.cache_clear()
    yield
    CompiledTritonKernels.cache_clear()
    compat.set_lazy_compile_async_compile(saved)


def aborting_kernel() -> tuple[str, str]:
    return source("user_kernel", rename="add_kernel_kilnfault_abort")  # configs: 4 and 8 warps


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]


def test_start_kernel_compile_sends_its_compiles_to_kilns_pool(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    four_compile_threads: None,  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Model load: the compile is started in kiln's pool and not waited for; the config whose
    compile aborts is one WARNING, and the kernel the first run takes keeps the other config."""
    pool = make_pool(workers=2, preload=[PRELOAD])
    install_on(pool)
    name, text = aborting_kernel()
    pending: dict[str, Any] = {}
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        lazy_compile.start_kernel_compile(pending, name, embedded(name, text))
        started = pending[name]
        assert isinstance(started, CodeCacheFuture)  # a future: the load does not wait
        kernel, _ = started.future.result(timeout=300)  # what run_triton_kernel_with_autotune waits on
    assert [r.config.num_warps for r in kernel.compile_results] == [4]
    skipped = skipped_lines(caplog)
    assert len(skipped) == 1
    assert name in skipped[0]
    assert "SIGABRT" in skipped[0]
    assert parent_cannot_compile == []
    assert pool.stats.compiled == 1  # the 4-warp config; the 8-warp one died in its worker
    lazy_compile.start_kernel_compile(pending, name, embedded(name, text))  # a second load
    assert pending[name] is started


def test_start_kernel_compile_without_a_process_pool_compiles_in_kiln(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one compile thread Inductor compiles in the caller (``precompile``): those compiles
    are kiln's too, and the aborting config is dropped the same way. ``precompile`` then makes
    the launchers, which needs a CUDA driver: here that one step records the kernel and does
    nothing."""
    launched: list[Any] = []

    def make_launchers(self: CachingAutotuner) -> None:
        launched.append(self)

    monkeypatch.setattr(CachingAutotuner, "_make_launchers", make_launchers)
    install_on(make_pool(workers=2, preload=[PRELOAD]))
    name, text = aborting_kernel()
    pending: dict[str, Any] = {}
    with inductor_config.patch(compile_threads=1), caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        lazy_compile.start_kernel_compile(pending, name, embedded(name, text))
    kernel = pending[name]
    assert isinstance(kernel, CachingAutotuner)
    assert launched == [kernel]
    assert [r.config.num_warps for r in kernel.compile_results] == [4]
    assert any("SIGABRT" in line for line in skipped_lines(caplog))
    assert parent_cannot_compile == []


def test_without_kiln_the_lazy_compile_compiles_in_the_parent(
    parent_cannot_compile: list[str],  # noqa: F811
) -> None:
    """The checks above can fail: without kiln, the same load compiles in this process."""
    name, text = source("pointwise", rename="triton_poi_fused_stock_0")
    with (
        inductor_config.patch(compile_threads=1),
        pytest.raises(AssertionError, match="compiled in the parent"),
    ):
        lazy_compile.start_kernel_compile({}, name, embedded(name, text))
    assert parent_cannot_compile == [name]


def test_uninstall_gives_the_lazy_compiles_async_compile_inductors_own_pool(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    four_compile_threads: None,  # noqa: F811
) -> None:
    """The module keeps one ``AsyncCompile()`` for the process's life, made by whichever load
    came first: made while kiln is installed, it holds nothing of kiln's, and after
    ``uninstall()`` it gives Inductor's own pool; a compile started under kiln still finishes."""
    compat.set_lazy_compile_async_compile(None)  # the first load of the process comes next
    own_pool = AsyncCompile.__dict__["process_pool"]
    install_on(make_pool(workers=2))
    name, text = source("pointwise", rename="triton_poi_fused_lazy_0")
    pending: dict[str, Any] = {}
    lazy_compile.start_kernel_compile(pending, name, embedded(name, text))
    made = compat.lazy_compile_async_compile()
    assert type(made) is AsyncCompile
    assert isinstance(made.process_pool(), InductorPool)
    assert vars(made) == {}  # the pool is the class's: nothing of kiln's on the instance
    kiln_inductor.uninstall()
    assert AsyncCompile.__dict__["process_pool"] is own_pool
    assert AsyncCompile._ready_future is None
    assert compat.lazy_compile_async_compile() is made
    assert vars(made) == {}  # so its next compile asks the class: Inductor's own pool
    kernel, _ = pending[name].future.result(timeout=300)
    assert len(kernel.compile_results) == 2

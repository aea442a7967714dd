"""kiln.inductor's crash behaviour, with real faults in kiln's workers: the
compiler aborts, segfaults or hangs in one config of a codegen kernel (only that config is
lost), in one template choice (only that choice fails, with kiln's reason), and in every config
of a kernel (one clear error naming the kernel, its source file and the signal). Other jobs in
flight are unaffected; the pool's processes are counted after each test (make_pool)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from support.inductor_support import (
    fake_gpu,  # noqa: F401 - autouse fixture
    four_compile_threads,  # noqa: F401 - fixture
    install_on,  # noqa: F401 - fixture
    source,
    submit,
)

pytest.importorskip("torch._inductor.async_compile")

from torch._inductor.async_compile import AsyncCompile, CompiledTritonKernels
from torch._inductor.codecache import PyCodeCache

from triton_kiln import CompilePool, CompileTimeoutError, WorkerCrashedError
from triton_kiln.inductor import InductorConfigCrashedError, InductorKernelError

PRELOAD = (
    "support.inductor_faults_preload"  # the workers' compiler faults on kilnfault_<mode> kernels, num_warps=8
)
# Every compile of the pool has this limit, the good choices' beside the hang too: long enough
# for them on a busy 2-core machine, where one CPU hog beside the test leaves them under 10 s and
# two can push one past it.
HANG_TIMEOUT_S = 15.0
MODES = ("abort", "segv", "hang")
SIGNAL = {"abort": "SIGABRT", "segv": "SIGSEGV"}


def faulty_pool(make_pool: Callable[..., CompilePool], mode: str) -> CompilePool:
    timeout = HANG_TIMEOUT_S if mode == "hang" else 300.0
    return make_pool(workers=2, preload=[PRELOAD], job_timeout_s=timeout)


def check_reason(text: str, mode: str) -> None:
    if mode == "hang":
        assert "timed out" in text
    else:
        assert SIGNAL[mode] in text


@pytest.mark.parametrize("mode", MODES)
def test_a_codegen_kernel_loses_only_its_faulting_config(
    mode: str,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = faulty_pool(make_pool, mode)
    install_on(pool)
    name, text = source("user_kernel", rename=f"add_kernel_kilnfault_{mode}")  # configs: 4 and 8 warps
    healthy = submit(*source("pointwise"))  # in flight at the same time
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        kernel, _ = submit(name, text).result(timeout=300)
    assert [r.config.num_warps for r in kernel.compile_results] == [4]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1
    assert name in skipped[0]
    assert "num_warps: 8" in skipped[0]
    check_reason(skipped[0], mode)
    other, _ = healthy.result(timeout=300)
    assert len(other.compile_results) == 2
    # the pool goes on serving: the same kernel's good config again is a cache hit, a new one compiles
    again, _ = submit(*source("reduction")).result(timeout=300)
    assert again.compile_results


@pytest.mark.parametrize("mode", MODES)
def test_a_template_choice_that_faults_is_one_failed_choice(
    mode: str,
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    four_compile_threads: None,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As select_algorithm precompiles a Triton template choice: ``AsyncCompile().triton(...)``
    and its ``.future``; a failed future marks that one choice failed."""
    CompiledTritonKernels.cache_clear()
    pool = faulty_pool(make_pool, mode)
    install_on(pool)
    bad_name, bad_text = source("template_mm", rename=f"triton_tem_fused_mm_kilnfault_{mode}_0")
    bad_text = bad_text.replace("num_warps=4,", "num_warps=8,", 1)  # the choice's only config faults
    good_name, good_text = source("template_mm")
    compile_ = AsyncCompile()
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        bad = compile_.triton(kernel_name=bad_name, source_code=bad_text).future
        good = compile_.triton(kernel_name=good_name, source_code=good_text).future
        error = bad.exception(timeout=300)
        kernel, _ = good.result(timeout=300)
    assert isinstance(error, InductorKernelError)
    assert error.kernel == bad_name
    assert error.source_file.endswith(".py")
    assert error.source_file in str(error)
    check_reason(str(error), mode)
    cause = error.failures[0][1]
    assert isinstance(cause, CompileTimeoutError if mode == "hang" else WorkerCrashedError)
    if mode != "hang":
        assert cause.signal_name == SIGNAL[mode]
    assert any(bad_name in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
    assert len(kernel.compile_results) == 1
    CompiledTritonKernels.cache_clear()


def test_a_single_config_compiled_in_the_parent_fails_alone(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    """Coordinate descent compiles one config at a time through ``_precompile_config`` and
    treats an exception as a failed config: a crash is :class:`InductorConfigCrashedError`."""
    pool = faulty_pool(make_pool, "abort")
    install_on(pool)
    name, text = source("user_kernel", rename="add_kernel_kilnfault_abort")
    kernel = getattr(PyCodeCache.load(text), name)
    four, eight = kernel.configs
    with pytest.raises(InductorConfigCrashedError) as caught:
        kernel._precompile_config(eight)
    assert isinstance(caught.value.__cause__, WorkerCrashedError)
    assert "SIGABRT" in str(caught.value)
    assert name in str(caught.value)
    assert kernel._precompile_config(four).config is four


def test_no_config_left_is_one_clear_error(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    pool = faulty_pool(make_pool, "segv")
    install_on(pool)
    name, text = source("user_kernel", rename="add_kernel_kilnfault_segv")
    text = text.replace("'num_warps': 4", "'num_warps': 8")  # both configs fault now
    with pytest.raises(InductorKernelError) as caught:
        submit(name, text).result(timeout=300)
    message = str(caught.value)
    assert name in message
    assert caught.value.source_file in message
    assert message.count("SIGSEGV") == 2
    assert "has no config that compiled" in message

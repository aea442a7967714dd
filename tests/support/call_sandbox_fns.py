"""Picklable callables for tests/test_call_sandbox.py (the sandbox process imports this module)."""

from __future__ import annotations

import os


def pid() -> int:
    return os.getpid()


def variable() -> str | None:
    return os.environ.get("KILN_TEST_CALL_VALUE")


def warmup_fails() -> None:
    raise OSError("no device here (the warm-up's own error)")


def unpicklable_result() -> object:
    return lambda: None


class OnlyThere:
    """Unpickles only in a process where ``KILN_TEST_CALL_VALUE`` is set (the sandbox, here)."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, ())


def _rebuild() -> OnlyThere:
    if not os.environ.get("KILN_TEST_CALL_VALUE"):
        raise RuntimeError("this class cannot be rebuilt in this process")
    return OnlyThere()


def result_only_there() -> OnlyThere:
    return OnlyThere()


def start_helper_and_hang() -> None:
    """Starts a helper process (its pid in ``KILN_TEST_CALL_PID_FILE``), then hangs."""
    import subprocess
    import time

    helper = subprocess.Popen(["sleep", "1000"])
    with open(os.environ["KILN_TEST_CALL_PID_FILE"], "w") as handle:
        handle.write(str(helper.pid))
    while True:
        time.sleep(1)


ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def add_kernel_source() -> object:
    """``kernels.add_kernel`` at BLOCK=64, as ``triton.compile`` takes it."""
    import triton

    from support.kernels import add_kernel

    return triton.compiler.ASTSource(add_kernel, dict(ADD_SIGNATURE), {"BLOCK": 64})


def compile_add_kernel() -> str:
    """A real compile for sm_90 in the calling process (the sandbox here); its cache hash."""
    import triton
    from triton.backends.compiler import GPUTarget

    return str(triton.compile(add_kernel_source(), target=GPUTarget("cuda", 90, 32)).hash)

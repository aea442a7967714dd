"""Real faults, in real processes, for kiln's crash matrix.

Nothing here pretends: ``abort`` calls libc's ``abort()`` (SIGABRT, after printing a line
the way a failed C++ assertion does), ``segv`` reads address 0 (SIGSEGV), ``exit`` calls
``os._exit(3)``, ``hang`` sleeps forever, ``memory`` allocates and touches memory until the
process is killed, ``raise`` raises a Python exception.

The faults fire in the phase a test asks for:

* ``request``: while the worker unpickles the request (a :class:`Detonator` constexpr);
* ``compile``: inside Triton's compile pipeline, from a stage hook that runs after LLVM
  codegen (before ptxas) (``fault_<mode>`` kernels);
* ``result``: while the worker serializes the job's outcome (``result_<mode>`` kernels raise
  an exception whose pickling detonates).

Importing this module installs the stage hook in that process (workers import it when they
load a kernel defined here).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

from triton_kiln.triton_compat import install_stages_hook

MODES = ("abort", "segv", "exit", "hang", "raise", "memory")
ASSERTION_TEXT = "LinearLayout.cpp:512: reshapeOuts: Assertion `kiln-injected' failed."
MEMORY_CAP_BYTES = 6 << 30  # stop growing here (then hang) so a broken limit is a timeout, not an OOM


class FaultError(RuntimeError):
    """The Python exception ``raise`` faults throw."""


def detonate(mode: str) -> Any:
    if mode == "abort":
        os.write(2, f"python: {ASSERTION_TEXT}\n".encode())
        ctypes.CDLL(None).abort()
    elif mode == "segv":
        ctypes.string_at(0)
    elif mode == "exit":
        os._exit(3)
    elif mode == "hang":
        while True:
            time.sleep(1)
    elif mode == "raise":
        raise FaultError(f"injected {mode} fault")
    elif mode == "memory":
        blocks = []
        chunk = 64 << 20
        while len(blocks) * chunk < MEMORY_CAP_BYTES:
            blocks.append(bytearray(b"\x01") * chunk)
        while True:
            time.sleep(1)
    raise ValueError(f"unknown fault mode {mode!r}")


class OnUnpickle:
    """A constexpr value whose unpickling (in the worker that receives the request carrying it)
    calls ``call(*args)``; its repr, as a request shows it, is ``Name(arg, ...)``."""

    def __init__(self, call: Callable[..., Any], *args: Any) -> None:
        self.call = call
        self.args = args

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.args))})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.call, self.args)


class Detonator(OnUnpickle):
    """A constexpr value that detonates when a worker unpickles the request carrying it."""

    def __init__(self, mode: str) -> None:
        super().__init__(detonate, mode)


def noisy_value(text: str, value: int) -> int:
    """Write ``text`` to the worker's stderr (fd 2, as C++ code would) and return ``value``."""
    os.write(2, f"{text}\n".encode())
    return value


class Noisy(OnUnpickle):
    """A constexpr value that prints to stderr when a worker unpickles it, then compiles fine."""

    def __init__(self, text: str, value: int) -> None:
        super().__init__(noisy_value, text, value)


def temp_marker(report: str, mode: str, value: int) -> int:
    """Create a file where ``tempfile`` puts temporary files (as Triton does for ptxas), write
    its path to ``report``, then detonate ``mode`` (or return ``value`` for ``"none"``)."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="kiln-test-", suffix=".ptx")
    os.close(fd)
    with open(report, "w") as f:
        f.write(path)
    return value if mode == "none" else detonate(mode)


class TempMarker(OnUnpickle):
    """A constexpr value that runs :func:`temp_marker` when a worker unpickles it."""

    def __init__(self, report: str, mode: str, value: int = 64) -> None:
        super().__init__(temp_marker, report, mode, value)


def run_child(program: str, seconds: str, value: int) -> int:
    """Run ``program seconds`` to its end as Triton runs ptxas (a blocking child of the worker,
    in its process group), then return ``value``."""
    import subprocess

    subprocess.run([program, seconds], check=True, close_fds=False)
    return value


class ChildInWorker(OnUnpickle):
    """A constexpr value whose unpickling in a worker runs :func:`run_child` (a stand-in for a
    long ptxas: a copy of ``sleep`` named ``ptxas``)."""

    def __init__(self, program: str, seconds: str, value: int = 64) -> None:
        super().__init__(run_child, program, seconds, value)


class ResultBomb(Exception):
    """An exception whose pickling (in the worker, when sending the result) detonates."""

    def __init__(self, mode: str) -> None:
        super().__init__(f"result bomb ({mode})")
        self.mode = mode

    def __reduce__(self) -> tuple[Any, ...]:
        detonate(self.mode)
        raise AssertionError("unreachable")


class Unpicklable(RuntimeError):
    """A compile error carrying an attribute that cannot be pickled (a lambda)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.callback = lambda: None


def _stage_hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        name = str(metadata.get("name", ""))
        if name.startswith("fault_"):
            detonate(name.removeprefix("fault_"))
        if name.startswith("result_"):
            raise ResultBomb(name.removeprefix("result_"))
        if name == "unpicklable_error":
            raise Unpicklable("this error holds a lambda")
        if name == "local_class_error":

            class LocalError(RuntimeError):
                pass

            raise LocalError("raised from a class defined inside a function")
        if name.startswith("slow_"):
            time.sleep(float(os.environ.get("KILN_TEST_SLOW_S", "2")))
        return make_cubin(src, metadata)

    stages["cubin"] = cubin_stage


install_stages_hook(_stage_hook, "kiln-tests-faults")


@triton.jit
def fault_abort(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def fault_segv(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def fault_exit(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def fault_hang(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def fault_raise(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def fault_memory(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def result_abort(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def result_segv(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def result_exit(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def result_hang(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def result_raise(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def result_memory(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def unpicklable_error(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def local_class_error(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def slow_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def kernel_for(phase: str, mode: str) -> Any:
    """The kernel that faults in ``phase`` with ``mode`` (request-phase faults use any kernel)."""
    if phase == "compile":
        return globals()[f"fault_{mode}"]
    if phase == "result":
        return globals()[f"result_{mode}"]
    return slow_kernel


# --------------------------------------------------------------------------- GPU-side faults
# For the autotuner's fault suite: one kernel whose constexpr FAULT picks what goes wrong.
# 0 healthy; 1 illegal memory access; 2 never finishes; 3 wrong values; 4 the compiler aborts
# (the llir stage hook below aborts when it sees the marker constant that only FAULT=4 emits).
COMPILER_ABORT_MARKER = 4242.5


@triton.jit
def faulty_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr, FAULT: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if FAULT == 1:
        tl.store(out_ptr + offsets + (1 << 40), x * 3.0, mask=mask)
    elif FAULT == 2:
        acc = x
        for i in range(2_000_000_000):  # a dependent load per step: minutes, not seconds
            acc = acc * 1.0000001 + tl.load(x_ptr + (i % n))
        tl.store(out_ptr + offsets, acc, mask=mask)
    elif FAULT == 3:
        tl.store(out_ptr + offsets, x * 4.0, mask=mask)
    elif FAULT == 4:
        tl.store(out_ptr + offsets, x * 4242.5, mask=mask)
    else:
        tl.store(out_ptr + offsets, x * 3.0, mask=mask)


def _marker_hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_llir = stages["llir"]

    def llir_stage(src: Any, metadata: dict[str, Any]) -> Any:
        if "4.242500e+03" in str(src):
            os.write(2, f"python: {ASSERTION_TEXT}\n".encode())
            ctypes.CDLL(None).abort()
        return make_llir(src, metadata)

    stages["llir"] = llir_stage


install_stages_hook(_marker_hook, "kiln-tests-marker")

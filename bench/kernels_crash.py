"""A kernel whose compile really crashes the process, for the worker-replacement measurement.

Importing this module installs a Triton stage-inspection hook (a small copy of the one in
``tests/faults.py``) that wraps the ``cubin`` stage: when the kernel being compiled is named
``bench_crash_abort`` it calls libc's ``abort()`` after LLVM codegen and before ptxas, so the
compiling process dies with SIGABRT exactly as it would on a failed C++ assertion. Every other
kernel passes through untouched.

It lives apart from :mod:`kernels_bench` so that the benchmarked compiles never run through
the hook: only processes that load this module (the crash measurement's pool) install it.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import triton
import triton.language as tl

CRASH_PREFIX = "bench_crash_"
ASSERTION_TEXT = "kernels_crash.py: bench_crash_abort: Assertion `kiln-bench-injected' failed."

_previous_hook = triton.knobs.runtime.add_stages_inspection_hook


def _stage_hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    if _previous_hook is not None:
        _previous_hook(backend, stages, options, language, capability)
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        if str(metadata.get("name", "")) == f"{CRASH_PREFIX}abort":
            os.write(2, f"python: {ASSERTION_TEXT}\n".encode())
            ctypes.CDLL(None).abort()
        return make_cubin(src, metadata)

    stages["cubin"] = cubin_stage


triton.knobs.runtime.add_stages_inspection_hook = _stage_hook


@triton.jit
def bench_crash_abort(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


CRASH_SIGNATURE: dict[str, str] = {"x_ptr": "*fp32"}

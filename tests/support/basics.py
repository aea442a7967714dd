"""What most tests use: the sm_90 target, a compile request for ``kernels.add_kernel``, a check
that bytes are a cubin, whether a GPU is here, the live processes of a pool, and a function made
to meet CPython's transient AST error once."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import psutil

from triton_kiln import CompileRequest, GPUTarget
from triton_kiln.pool.handles import ENV_POOL_ID

SM90 = GPUTarget("cuda", 90, 32)


def pool_processes(pool_id: str) -> list[psutil.Process]:
    """Every live process (zygote, workers, their children) that belongs to ``pool_id``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(ENV_POOL_ID) == pool_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait_no_processes(pool_id: str, timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while True:
        left = pool_processes(pool_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def add_request(block: int = 128, num_warps: int = 4, **kwargs: Any) -> CompileRequest:
    from support import kernels

    return CompileRequest(
        kernels.add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
        {"BLOCK": block},
        options={"num_warps": num_warps},
        target=kwargs.pop("target", SM90),
        **kwargs,
    )


def is_cubin(data: bytes) -> bool:
    return data[:4] == b"\x7fELF" and len(data) > 1000


def gpu_available() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def ast_race_once(real: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """``real``, except that its first call raises CPython 3.11's transient ``SystemError`` (two
    threads parsing Python source at once); and the list that counts the calls that raised it."""
    raced: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(1)
            raise SystemError("AST constructor recursion depth mismatch (before=60, after=58)")
        return real(*args, **kwargs)

    return racing, raced

"""A workload for ``kiln tune`` on a GPU: a ``triton.autotune``'d kernel (4 configs), called for two keys.

``kiln tune`` imports this module after ``kiln.install()``, so ``triton.autotune`` here is kiln's.
The kernel is ``kernels.add_kernel`` (``out = 2 * x + y``), as in ``tests/test_bundle_gpu.py``, whose
helper runs the bundle in a fresh process with Triton's compiler blocked.
"""

from __future__ import annotations

import os

import torch
import triton

from support import kernels

SIZES = (100_000, 4096)

add_kernel = triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)],
    key=["n"],
)(kernels.add_kernel)


def warm_up() -> None:
    """Every key of the workload once, with its output checked."""
    for n in SIZES:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.zeros_like(x)
        add_kernel[lambda m, n=n: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
        torch.testing.assert_close(out, 2 * x + y)


def warm_up_then_fail() -> None:
    """Tunes both keys, then fails as a workload can (what it tuned must not be lost)."""
    warm_up()
    raise RuntimeError(f"the workload failed after tuning (pid {os.getpid()})")

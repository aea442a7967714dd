"""A user-defined ``triton.autotune`` kernel for ``bench/inductor_faults.py``'s codegen case: called
inside ``torch.compile``, Inductor copies it into its generated code and compiles each config.

Its name starts with ``kiln_bench_crashy`` so the fault hook can pick it; the configs differ in
``num_warps`` only (1, 2, 4), so one of them (2 by default) is the one that aborts.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

WARPS = (1, 2, 4)


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=w) for w in WARPS], key=["n"])
@triton.jit
def kiln_bench_crashy_affine(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


def affine_then_scale(x: Any) -> Any:
    """``(2x + 1) * 3``: the kernel, then an Inductor pointwise kernel."""
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    kiln_bench_crashy_affine[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out * 3.0


def affine_then_scale_reference(x: Any) -> Any:
    """The same in torch (eager, no Triton compile: the fault never fires here)."""
    return (x * 2.0 + 1.0) * 3.0

"""A process that compiles, under ``torch.compile`` with kiln's sandbox, a user-defined Triton kernel
whose 8-warp config makes a real illegal memory access, and reports as one JSON line what kiln's
runtime autotune did (``tests/test_inductor_runtime_autotune.py``, on the GPU machine).

Inductor times the kernel's two configs at its first call (its runtime autotune). Without kiln's
sandbox that timing runs here and the bad config ends this process's CUDA context; with it, the
config is skipped in the sandbox and this process runs the other. Run as
``python -m support.runtime_autotune_ima`` from ``tests/``.
"""

from __future__ import annotations

import json
import logging
import sys

import torch
import triton
import triton.language as tl

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks

# elements past the output (no allocation of this process reaches there); a constexpr, the only
# kind of global a Triton kernel may read
WILD = tl.constexpr(1 << 40)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def scale_ima_at_1024(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask) * 3.0
    if BLOCK == 1024:  # this config stores far outside its output: an illegal memory access
        tl.store(out_ptr + (offsets.to(tl.int64) + WILD), value, mask=mask)
    else:
        tl.store(out_ptr + offsets, value, mask=mask)


def scaled_plus_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    scale_ima_at_1024[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out + 1


def main() -> int:
    logging.basicConfig(level=logging.WARNING)  # kiln's warnings on stderr, where the test shows them
    kiln_inductor.install(sandbox_benchmarks=True)
    try:
        x = torch.randn(1 << 20, device="cuda")
        error = None
        try:
            got = torch.compile(scaled_plus_one)(x)
            torch.cuda.synchronize()
        except Exception as exc:  # the report still says what kiln did, then the error is raised
            error = exc
        runtime = inductor_hooks.current_runtime_autotune()
        assert runtime is not None
        report = {
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "max_error": None if error is not None else float((got - (x * 3 + 1)).abs().max()),
            "kernels": runtime.stats.kernels,
            "configs": runtime.stats.configs,
            "in_parent": runtime.stats.in_parent,
            "skipped": [[s.kernel, s.config, str(s.failure)] for s in runtime.stats.skipped],
            "restarts": runtime.sandbox.restarts,
            "context_alive": None
            if error is not None
            else float((torch.ones(8, device="cuda") * 2).sum()) == 16.0,
        }
        print(json.dumps(report))
        if error is not None:
            raise error
    finally:
        kiln_inductor.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tune one Triton kernel with kiln (the tutorial's example: docs/TUTORIAL.md).

Run on a machine with an NVIDIA GPU, torch and kiln installed::

    python docs/examples/tune_softmax.py

The first run compiles and times every config; a second run finds the result in kiln's tuning
database and tunes nothing.
"""

import logging
import time

import torch
import triton
import triton.language as tl

import triton_kiln as kiln

logging.basicConfig(level=logging.WARNING, format="%(message)s")
logging.getLogger("kiln").setLevel(logging.INFO)  # kiln's lines: where each key's config came from

CONFIGS = [
    triton.Config({"BLOCK": block}, num_warps=warps, num_stages=stages)
    for block in (1024, 2048, 4096)
    for warps in (4, 8, 16)
    for stages in (1, 2)
]


@kiln.autotune(configs=CONFIGS, key=["n_cols"])
@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=mask)


def main() -> None:
    x = torch.randn(8192, 1000, device="cuda")
    out = torch.empty_like(x)
    started = time.perf_counter()
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1])
    torch.cuda.synchronize()
    print(f"first call: {time.perf_counter() - started:.1f} s")
    print(f"best config: {softmax_kernel.best_config}")
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    print("output matches torch.softmax")


if __name__ == "__main__":
    main()

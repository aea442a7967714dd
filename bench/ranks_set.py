"""The 72-config matmul of ``bench/autotune.py`` as compile requests (no GPU needed).

``bench/ranks.py`` tunes it on a GPU; the CPU tests (``tests/test_node.py``) compile it for
``GPUTarget("cuda", 90, 32)`` from 8 processes at once through one cache.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import autotune
import kernels_bench
from triton_kiln import CompileRequest
from triton_kiln.triton_compat import GPUTarget

SM90 = GPUTarget("cuda", 90, 32)
POINTERS = ("a_ptr", "b_ptr", "c_ptr")


# How Triton's binder specializes the set's call (4096 x 4096 fp16, contiguous): unit strides as
# constexpr 1, pointers and multiples of 16 with tt.divisibility 16. These are the compiles the
# autotuner runs (unspecialized, the same configs compile 4-5x slower: scalar, unaligned loads).
UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn")
DIVISIBLE = (*POINTERS, "M", "N", "K", "stride_am", "stride_bk", "stride_cm")


def matmul_requests(target: GPUTarget = SM90) -> list[CompileRequest]:
    """One request per config of :func:`autotune.matmul_configs`, specialized as tuning compiles
    them (fp16 pointers, i32 sizes and strides)."""
    kernel = kernels_bench.matmul_kernel
    signature = {name: ("*fp16" if name in POINTERS else "i32") for name in kernel.arg_names}
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        del signature[name]
    signature.update(dict.fromkeys(UNIT_STRIDES, "constexpr"))
    return [
        CompileRequest(
            kernel,
            signature,
            {**config.kwargs, **dict.fromkeys(UNIT_STRIDES, 1)},
            attrs={name: [["tt.divisibility", 16]] for name in DIVISIBLE},
            options={"num_warps": config.num_warps, "num_stages": config.num_stages},
            target=target,
        )
        for config in autotune.matmul_configs()
    ]

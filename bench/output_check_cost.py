"""What the native sandbox's output check costs per config, step by step, on the GPU machine.

Run from the repository root on a machine with a GPU (no torch needed)::

    python bench/output_check_cost.py --mb 32 --json out.json

For one bfloat16 output of ``--mb`` MB in device memory (kiln's C module, as in the sandbox),
the median over ``--repeats`` of: the copy to the host into a fresh buffer and into a reused
one, decoding, the NaN/Inf test, the bitwise comparison with a representative and the full
comparison with a slightly different one; then the same two comparisons on the GPU
(``kiln.sandbox.device_check``: the summary kernel, compiled by kiln's pool for this device,
launched through kiln's C launcher, its rows read back), which copy no output to the host.
Prints a table and the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import numpy as np

from triton_kiln.launch.native import native
from triton_kiln.sandbox import compare_np


def timed(fn: Callable[[], Any], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - started) * 1e3)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    cuda = native()
    cuda.cuda_init(0)
    n = opts.mb * 1024 * 1024 // 2
    words = (np.random.default_rng(0).standard_normal(n, dtype=np.float32).view(np.uint32) >> 16).astype(
        np.uint16
    )
    ptr = cuda.mem_alloc(words.nbytes)
    cuda.memcpy_htod(ptr, words)
    reused = np.empty(words.nbytes, dtype=np.uint8)

    def read_fresh() -> Any:
        buffer = np.empty(words.nbytes, dtype=np.uint8)
        cuda.memcpy_dtoh(buffer, ptr)
        return buffer

    def view(buffer: Any) -> Any:
        return compare_np.raw_view(buffer, "torch.bfloat16", 2, (n,), (1,))

    raw = view(read_fresh())
    host = compare_np.decode(raw, "torch.bfloat16")
    other_words = words.copy()
    other_words[::97] ^= 1
    other = compare_np.decode(other_words, "torch.bfloat16")
    steps = {
        "read_fresh_ms": timed(read_fresh, opts.repeats),
        "read_reused_ms": timed(lambda: cuda.memcpy_dtoh(reused, ptr), opts.repeats),
        "decode_ms": timed(lambda: compare_np.decode(raw, "torch.bfloat16"), opts.repeats),
        "nonfinite_ms": timed(lambda: compare_np.produced_nonfinite(host, lambda: host), opts.repeats),
        "compare_same_ms": timed(lambda: compare_np.compare_one("y", host, host, None), opts.repeats),
        "compare_close_ms": timed(lambda: compare_np.compare_one("y", other, host, None), opts.repeats),
        "fingerprint_ms": timed(lambda: compare_np.fingerprint_words("torch.bfloat16", raw), opts.repeats),
    }
    other_ptr = cuda.mem_alloc(other_words.nbytes)
    cuda.memcpy_htod(other_ptr, other_words)
    steps.update(device_steps(ptr, other_ptr, n, words.nbytes, opts.repeats))
    result = {"mb": opts.mb, "dtype": "torch.bfloat16", "repeats": opts.repeats, **steps}
    for key, value in steps.items():
        print(f"{key:18} {value:8.2f}")
    print(json.dumps(result))
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1) + "\n")


def device_steps(ptr: int, other_ptr: int, n: int, nbytes: int, repeats: int) -> dict[str, float]:
    """The output check on the GPU: one summary against an identical and a close representative."""
    from triton_kiln import CompilePool, triton_compat
    from triton_kiln.autotuner import compare_kernels
    from triton_kiln.sandbox.device_check import DeviceArray
    from triton_kiln.sandbox.native_worker import NativeState

    dtype = "torch.bfloat16"
    started = time.perf_counter()
    with CompilePool() as pool:
        futures = compare_kernels.submit(pool, triton_compat.local_target(), {dtype})
        specs = compare_kernels.specs(pool, futures, 300.0)
        compile_ms = (time.perf_counter() - started) * 1e3
        state = NativeState(0)
        loaded = state.device_check.set_kernels(specs)
        if dtype not in loaded["loaded"]:
            raise SystemExit(f"the check kernel did not load: {loaded}")
    check = state.device_check
    out = DeviceArray(ptr, dtype, (n,), n, nbytes)
    other = DeviceArray(other_ptr, dtype, (n,), n, nbytes)

    def summary(a: DeviceArray, b: DeviceArray) -> Any:
        check._seen.clear()  # every call launches the kernel
        return check.summarize(a, b, ptr)

    return {
        "device_kernel_compile_ms": compile_ms,
        "device_compare_same_ms": timed(lambda: summary(out, out), repeats),
        "device_compare_close_ms": timed(lambda: summary(other, out), repeats),
    }


if __name__ == "__main__":
    main()

"""What the native sandbox's output check costs per config, step by step, on the GPU machine.

Run from the repository root on a machine with a GPU (no torch needed)::

    python bench/output_check_cost.py --mb 32 --json out.json

For one bfloat16 output of ``--mb`` MB in device memory (kiln's C module, as in the sandbox),
the median over ``--repeats`` of: the copy to the host into a fresh buffer and into a reused
one, decoding, the NaN/Inf test, the bitwise comparison with a representative and the full
comparison with a slightly different one. Prints a table and the JSON.
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
    result = {"mb": opts.mb, "dtype": "torch.bfloat16", "repeats": opts.repeats, **steps}
    for key, value in steps.items():
        print(f"{key:18} {value:8.2f}")
    print(json.dumps(result))
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

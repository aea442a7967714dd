"""Inductor benchmark requests that fault for real, for kiln.inductor's sandbox tests.

:class:`FaultyRequest` is a real ``BenchmarkRequest`` (picklable, as Inductor's are); its
``benchmark()`` runs in whatever process unpickles it (kiln's sandbox) and faults there: ``abort``
(libc ``abort()``, SIGABRT), ``segv`` (reads address 0), ``exit`` (``os._exit(7)``),
``hang`` (sleeps forever), ``raise`` (a Python error), ``ima`` (raises the error torch raises after
an illegal memory access: the one fake, as there is no GPU here), ``ok`` (returns its time). Each
notes where it ran in ``pid_file`` when given: one JSON line with its pid and the variables
Inductor's benchmark process needs (``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``,
``TORCH_WARM_POOL``).
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from typing import Any

from torch._inductor.autotune_process import BenchmarkRequest

MODES = ("ok", "abort", "segv", "exit", "hang", "raise", "ima")
IMA_TEXT = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call"
)


class FaultyRequest(BenchmarkRequest):
    def __init__(self, mode: str, result: float = 1.0, pid_file: str = "") -> None:
        assert mode in MODES, mode
        self.mode = mode
        self.result = result
        self.pid_file = pid_file
        self.num_warps = 4
        self.num_stages = 2
        self.module_path = f"<{mode} request>"

    def benchmark(self, *input_tensors: Any, out: Any = None) -> float:
        if self.pid_file:
            names = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_WARM_POOL")
            seen = {"pid": os.getpid(), **{name: os.environ.get(name) for name in names}}
            with open(self.pid_file, "a") as handle:
                handle.write(json.dumps(seen) + "\n")
        if self.mode == "abort":
            os.write(2, b"python: bench.cpp:1: run: Assertion `injected' failed.\n")
            ctypes.CDLL(None).abort()
        elif self.mode == "segv":
            ctypes.string_at(0)
        elif self.mode == "exit":
            os._exit(7)
        elif self.mode == "hang":
            while True:
                time.sleep(1)
        elif self.mode == "raise":
            raise ValueError("the benchmark raised on its own")
        elif self.mode == "ima":
            raise RuntimeError(IMA_TEXT)
        return self.result

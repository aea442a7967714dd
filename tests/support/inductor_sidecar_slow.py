"""Imported first in kiln's Inductor sidecar by the sidecar-death test (``Sidecar(preload=...)``):
a job whose kernel's name contains ``_slowjob`` sleeps 60 s in the sidecar before its work, so
the test can kill the sidecar while that job is in flight. Every other job runs unchanged."""

from __future__ import annotations

import time
from typing import Any

from torch._inductor.runtime import compile_tasks

_original = compile_tasks._worker_compile_triton


def _worker_compile_triton(load_kernel: Any, extra_env: Any, extra_config: Any) -> Any:
    if "_slowjob" in str(getattr(load_kernel, "args", ("",))[0]):
        time.sleep(60)
    return _original(load_kernel, extra_env, extra_config)


# the parent pickles Inductor's function by name; the sidecar's unpickling then finds this one
compile_tasks._worker_compile_triton = _worker_compile_triton

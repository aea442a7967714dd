"""Preloading modules into the zygote keeps it single-threaded (so forking stays safe)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import pytest

from support.basics import add_request, is_cubin


def threads_after_import(module: str, env: dict[str, str] | None = None) -> int:
    code = f"import os, {module}; print(len(os.listdir('/proc/self/task')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return int(out.stdout.strip())


@pytest.mark.timeout(120)
def test_numpy_preload_is_fork_safe(make_pool: Any) -> None:
    pytest.importorskip("numpy")
    import os

    plain_env = {k: v for k, v in os.environ.items() if not k.endswith("NUM_THREADS")}
    if threads_after_import("numpy", plain_env) == 1:
        pytest.skip("numpy starts no BLAS threads on this machine; nothing to prove")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        pool = make_pool(workers=2, preload=["numpy"])
        assert pool.wait_ready(60)
        info = pool.zygote_info
        assert info["preloaded"] == {"numpy": None}
        assert len(info["threads"]) == 1, info["threads"]
        assert is_cubin(pool.compile(add_request(256)).binary)
    assert pool.stats.zygote_starts == 1

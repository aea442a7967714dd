"""Kernels calling ``@jit`` helpers of a torch module (inductor's ``triton_helpers``, used by
Helion's generated code) travel to workers as source: rebuilding one never imports torch (which
costs a worker seconds), and the binary is Triton's own."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch._inductor.runtime.triton_helpers")

from support.basics import SM90
from support.inductor_helpers_kernel import rowmax_kernel
from triton_kiln import CompilePool, CompileRequest, triton_compat

SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def test_the_helper_is_a_jit_global_not_the_torch_module() -> None:
    request = CompileRequest(rowmax_kernel, SIGNATURE, {"BLOCK": 128}, target=SM90)
    globals_ = dict(request.spec.globals)
    assert globals_["triton_helpers.maximum"][0] == "jit"
    assert "triton_helpers" not in globals_  # the module itself is not needed
    assert request.spec.by_source


def test_rebuilding_it_in_a_fresh_process_imports_no_torch(tmp_path: Path) -> None:
    request = CompileRequest(rowmax_kernel, SIGNATURE, {"BLOCK": 128}, target=SM90)
    path = tmp_path / "request.pkl"
    path.write_bytes(pickle.dumps(request))
    src = str(Path(__file__).resolve().parents[1] / "src")
    script = (
        f"import sys, pickle; sys.path.insert(0, {src!r}); "
        f"request = pickle.loads(open({str(path)!r}, 'rb').read()); "
        "kernel = request.spec.load(); "
        "print(type(kernel).__name__, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["JITFunction", "False"]


def test_the_pool_compiles_it_to_tritons_own_binary(make_pool: Callable[..., CompilePool]) -> None:
    request = CompileRequest(rowmax_kernel, SIGNATURE, {"BLOCK": 128}, target=SM90)
    artifact = make_pool().submit(request).result(timeout=120)
    with tempfile.TemporaryDirectory() as cache:
        previous = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            direct = triton_compat.compile_kernel(request.ast_source(rowmax_kernel), SM90, {})
        finally:
            if previous is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = previous
    assert artifact.binary == direct.asm["cubin"]

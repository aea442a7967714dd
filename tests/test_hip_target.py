"""``kiln compile ... --target hip:gfx942`` compiles as Triton compiles for that target: real
compiles for gfx942 (no GPU needed), with torch and with torch not importable; HIP kernels are
checked for the metadata HIP's launcher reads, not CUDA's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import triton

import triton_kiln as kiln
from support import kernels
from triton_kiln import CompilePool, CompileRequest, GPUTarget, triton_compat
from triton_kiln.artifacts.artifact import CompiledArtifact

GFX942 = GPUTarget("hip", "gfx942", 64)
SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


TRITONS_OWN = """
import sys, triton, kernels
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
source = ASTSource(kernels.scale_kernel, {signature!r}, {{"BLOCK": 64}})
compiled = triton.compile(source, target=GPUTarget("hip", "gfx942", 64))
open(sys.argv[1], "wb").write(compiled.asm["hsaco"])
"""


@pytest.fixture(scope="module")
def tritons_own(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Triton's own compile of ``scale_kernel`` for gfx942, in a fresh process (skips where this
    Triton cannot compile for gfx942)."""
    work = tmp_path_factory.mktemp("tritons-own")
    out = work / "scale_kernel.hsaco"
    env = {**os.environ, "PYTHONPATH": str(TESTS), "TRITON_CACHE_DIR": str(work / "triton-cache")}
    code = TRITONS_OWN.format(signature=SIGNATURE)
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:  # a Triton without a working AMD backend: nothing to compare with
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"Triton {triton.__version__} cannot compile for gfx942 here: {last}")
    return out.read_bytes()


def test_the_pool_compiles_for_gfx942_the_binary_triton_compiles(
    tritons_own: bytes, make_pool: Callable[..., CompilePool]
) -> None:
    request = CompileRequest(kernels.scale_kernel, SIGNATURE, {"BLOCK": 64}, target=GFX942)
    artifact = make_pool(workers=1).compile(request)
    assert artifact.binary_ext == "hsaco"
    assert artifact.backend == "hip"
    assert artifact.binary == tritons_own
    assert "global_scratch_size" not in artifact.metadata  # HIP has none, and needs none


def hidden_torch(tmp_path: Path) -> Path:
    """A directory that, first on ``PYTHONPATH``, makes ``import torch`` fail as without torch."""
    package = tmp_path / "no-torch" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    return package.parent


@pytest.mark.parametrize("torch_importable", [True, False])
def test_kiln_compile_for_hip_gfx942(tritons_own: bytes, tmp_path: Path, torch_importable: bool) -> None:
    paths = [str(SRC), str(TESTS)]
    if not torch_importable:
        paths.insert(0, str(hidden_torch(tmp_path)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "KILN_CACHE_DIR": str(tmp_path / "cache")}
    env["KILN_WORKERS"] = "1"
    command = [sys.executable, "-m", "triton_kiln", "compile", "support.kernels:scale_kernel"]
    options = [
        "--signature",
        "x_ptr=*fp32,out_ptr=*fp32,n=i32",
        "--config",
        "BLOCK=64",
        "--target",
        "hip:gfx942",
    ]
    result = subprocess.run(
        [*command, *options], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 of 1 compiled" in output, output
    assert list((tmp_path / "cache").rglob("scale_kernel.hsaco")), output


def test_binding_for_hip_without_torch_specializes_as_triton_does() -> None:
    """AMD's buffer-op specialization (``"S"``) of a stand-in pointer, computed without torch,
    is Triton's own (which imports torch to compute it)."""
    torch = pytest.importorskip("torch")
    from triton.runtime.jit import MockTensor, create_function_from_signature

    fn = kernels.scale_kernel
    tritons = create_function_from_signature(fn.signature, fn.params, triton_compat.make_backend(GFX942))
    _backend, kilns = triton_compat.argument_binder(fn, GFX942)
    cases = [
        (triton_compat.StandInTensor("fp32", True), triton_compat.StandInTensor("fp32", False), 1024),
        (MockTensor.wrap_dtype(torch.float16), triton_compat.StandInTensor("fp16", True), 7),
    ]
    for args in cases:
        assert kilns(*args, BLOCK=64)[1] == tritons(*args, BLOCK=64)[1], args
    assert any("S" in str(attr) for _, attr in kilns(*cases[0], BLOCK=64)[1])


def hip_metadata() -> dict[str, object]:
    return {
        "name": "k",
        "num_warps": 4,
        "num_ctas": 1,
        "shared": 0,
        "target": {"backend": "hip", "arch": "gfx942", "warp_size": 64},
        "warp_size": 64,
        "profile_scratch_size": 0,
        "profile_scratch_align": 1,
        "launch_cooperative_grid": False,
    }


def test_a_hip_artifact_needs_the_fields_hips_launcher_reads() -> None:
    CompiledArtifact("k" * 64, "k", b"\x7fELF", "hsaco", hip_metadata())  # no CUDA-only field needed
    for name in ("warp_size", "profile_scratch_size", "launch_cooperative_grid"):
        metadata = {k: v for k, v in hip_metadata().items() if k != name}
        with pytest.raises(kiln.MissingMetadataError, match=name):
            CompiledArtifact("k" * 64, "k", b"\x7fELF", "hsaco", metadata)


def test_a_cuda_artifact_still_needs_its_global_scratch_fields() -> None:
    cuda = {**hip_metadata(), "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}
    with pytest.raises(kiln.MissingMetadataError, match="global_scratch_size"):
        CompiledArtifact("k" * 64, "k", b"\x00", "cubin", cuda)

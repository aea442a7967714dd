"""Binaries that ask for Triton's runtime allocation (global or profile scratch), on CPU.

A kernel with device-side tensor descriptors (``tl.make_tensor_descriptor``) is compiled for
sm_90 for real; what needs a GPU (the C launcher calling the allocator, the sandboxes running
it) is in ``test_scratch_gpu.py``. Here: the binary asks for scratch, kiln's launcher accepts it
(no refusal, no fallback), kiln's size and alignment are Triton's own rule (checked against
Triton's launcher code), and the native sandbox loads it with scratch memory of its own.
"""

from __future__ import annotations

import contextvars
from pathlib import Path
from typing import Any

import pytest

from support.basics import SM90
from support.host_memory import HostMemoryDriver
from triton_kiln import CompileRequest
from triton_kiln.launch.launcher import fast_path_blocker
from triton_kiln.launch.scratch import ScratchNeed, ScratchNeeds
from triton_kiln.launch.spec import LaunchSpec

SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "M": "i32", "N": "i32"}


def desc_request(block_m: int = 32, block_n: int = 64) -> CompileRequest:
    from support import kernels

    return CompileRequest(
        kernels.desc_add_kernel,
        dict(SIGNATURE),
        {"BLOCK_M": block_m, "BLOCK_N": block_n},
        options={"num_warps": 4},
        target=SM90,
    )


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[CompileRequest, Any, dict[str, str]]:
    """The descriptor kernel compiled once for sm_90 (a real compile): request, artifact, files."""
    from triton_kiln import CompilePool

    root = tmp_path_factory.mktemp("scratch")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(root / "triton-cache"))
        pool = CompilePool(cache_dir=root / "cache", workers=1)
        try:
            request = desc_request()
            artifact = pool.compile(request)
            files = pool.triton_files(artifact)
        finally:
            pool.shutdown(wait=True)
    return request, artifact, files


def test_descriptor_kernel_asks_for_global_scratch(compiled: Any) -> None:
    _, artifact, _ = compiled
    meta = artifact.metadata
    assert meta["global_scratch_size"] > 0, meta
    assert meta["global_scratch_align"] >= 1
    assert not meta["tensordesc_meta"]  # device-side descriptors: no host descriptor arguments
    needs = ScratchNeeds.from_metadata(meta)
    assert needs.any
    assert needs.pairs()[0] == (meta["global_scratch_size"], meta["global_scratch_align"])


def test_kilns_launcher_accepts_a_scratch_binary(compiled: Any) -> None:
    """Before: "it needs a global scratch buffer" sent the binary to Triton's launcher (and the
    native sandbox to the torch sandbox)."""
    request, artifact, _ = compiled
    spec = LaunchSpec.from_request(request)
    assert spec.unsupported_reason() is None
    assert spec.kinds() == "PPPiiCC"
    assert fast_path_blocker(artifact, spec, fast_launch=True) is None


def _tritons_requests(
    grid: tuple[int, int, int], num_ctas: int, global_: tuple[int, int], profile: tuple[int, int]
) -> list[tuple[str, int, int, int]]:
    """What Triton's own CUDA launcher (``CudaLauncher.__call__``) asks its allocators for: its
    code runs; only the driver call at the end is replaced (there is no GPU here)."""
    import triton
    from triton.backends.nvidia.driver import CudaLauncher
    from triton.runtime import _allocation

    asked: list[tuple[str, int, int, int]] = []
    launcher = CudaLauncher.__new__(CudaLauncher)  # __init__ needs the GPU driver
    launcher.num_ctas = num_ctas
    launcher.global_scratch_size, launcher.global_scratch_align = global_
    launcher.profile_scratch_size, launcher.profile_scratch_align = profile
    launcher.launch_cooperative_grid = launcher.launch_pdl = False
    launcher.arg_annotations = launcher.kernel_signature = None  # read by 3.7's call only
    launcher.launch = lambda *args: None

    def allocator(kind: str) -> Any:
        def allocate(size: int, align: int, stream: int) -> None:
            asked.append((kind, size, align, stream))

        return allocate

    def run() -> None:
        triton.set_allocator(allocator("global"))
        _allocation.set_profile_allocator(allocator("profile"))
        launcher(*grid, 1234, None, None, None, None, None)

    try:
        contextvars.copy_context().run(run)
    finally:
        _allocation.set_profile_allocator(None)
    return asked


@pytest.mark.parametrize("grid", [(1, 1, 1), (7, 1, 1), (3, 5, 2), (0, 4, 1)])
@pytest.mark.parametrize("num_ctas", [1, 2])
@pytest.mark.parametrize(
    ("global_", "profile"), [((384, 128), (0, 1)), ((0, 1), (8, 8)), ((256, 64), (24, 16))]
)
def test_scratch_request_is_tritons_rule(
    grid: tuple[int, int, int], num_ctas: int, global_: tuple[int, int], profile: tuple[int, int]
) -> None:
    needs = ScratchNeeds(ScratchNeed(*global_), ScratchNeed(*profile))
    ours = []
    for kind, need in (("global", needs.global_), ("profile", needs.profile)):
        request = need.request(grid, num_ctas)
        if request is not None:
            ours.append((kind, *request, 1234))
    assert ours == _tritons_requests(grid, num_ctas, global_, profile)


def test_scratch_request_of_a_short_grid() -> None:
    need = ScratchNeed(384, 128)
    assert need.request((5,)) == need.request((5, 1, 1)) == (5 * 384, 128)
    assert ScratchNeed(0, 1).request((5,)) is None


class _RecordingLaunchers:
    """``cuda.Launcher`` for the native sandbox on CPU: records what it was made with."""

    def __init__(self) -> None:
        self.made: list[dict[str, Any]] = []

    def __call__(
        self, binary: bytes, name: str, kinds: str, block_x: int, shared: int, n_extra: int, **kw: Any
    ) -> Any:
        self.made.append({"name": name, "kinds": kinds, "n_extra": n_extra, **kw})
        return type("L", (), {"n_params": -1, "n_expected": 0})()


def test_native_sandbox_loads_a_scratch_binary_with_its_own_memory(compiled: Any) -> None:
    """Before: ``Unsupported("it needs a global scratch buffer")`` sent it to the torch sandbox,
    which had no allocator either (every config: ``bench_error``)."""
    from triton_kiln.sandbox.device_inputs import ScratchMemory
    from triton_kiln.sandbox.native_worker import NativeState

    request, artifact, files = compiled
    state = NativeState.__new__(NativeState)  # no CUDA: the constructor's driver calls are skipped
    cuda = HostMemoryDriver()
    launchers = _RecordingLaunchers()
    cuda.Launcher = launchers  # type: ignore[attr-defined]
    state.cuda = cuda
    state.kernels, state.unsupported = {}, {}
    state.scratch = (ScratchMemory(cuda), ScratchMemory(cuda))
    spec = {
        "key": artifact.key,
        "group": files,
        "arg_names": [*SIGNATURE, "BLOCK_M", "BLOCK_N"],
        "signature": dict(request.signature),
        "constexprs": dict(request.constexprs),
    }
    state.kernel(spec)
    assert not state.unsupported
    (made,) = launchers.made
    assert made["scratch"] == ScratchNeeds.from_metadata(artifact.metadata).pairs()
    assert made["allocators"] == state.scratch  # the sandbox's own memory, no torch, no Triton


def test_sandbox_scratch_memory_is_aligned_reused_and_grown() -> None:
    from triton_kiln.sandbox.device_inputs import ScratchMemory

    cuda = HostMemoryDriver()
    scratch = ScratchMemory(cuda)
    first = scratch(1000, 128, 0)
    assert first % 128 == 0
    assert scratch(1000, 128, 0) == first  # reused: launches on one stream run in order
    assert scratch(10, 128, 0) == first
    cuda.log.clear()
    bigger = scratch(100_000, 1024, 0)
    assert bigger % 1024 == 0
    assert cuda.log == ["sync"]  # no kernel still uses the old buffer when it is freed
    assert len(cuda.memory) == 1
    block, at = cuda._find(bigger)
    assert len(block) - at >= 100_000
    assert scratch(0, 128, 0) is None  # nothing asked: a null pointer
    scratch.free()
    assert not cuda.memory


def test_torch_sandbox_allocator_honours_alignment() -> None:
    torch = pytest.importorskip("torch")
    from triton_kiln.sandbox.torch_worker import torch_scratch_allocator

    allocate = torch_scratch_allocator(torch, torch.device("cpu"))
    for size, align in [(384, 128), (4096, 1024), (100, 4096), (0, 128)]:
        buffer = allocate(size, align, None)
        assert buffer.dtype == torch.int8
        assert buffer.numel() == size
        if size:
            assert buffer.data_ptr() % align == 0


def test_allocator_sources_are_tritons(tmp_path: Path) -> None:
    from triton.runtime import _allocation

    from triton_kiln import triton_compat

    sources = triton_compat.scratch_allocator_sources()
    assert sources is not None
    assert sources[0] is _allocation._allocator
    assert isinstance(sources[0], contextvars.ContextVar)
    assert sources[1] is _allocation._profile_allocator

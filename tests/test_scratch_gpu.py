"""Binaries that need Triton's runtime allocation, on a real GPU (sm_90: device-side descriptors).

A kernel built on ``tl.make_tensor_descriptor`` asks for global scratch. The caller sets a
torch allocator with ``triton.set_allocator``, as libraries do. Before: every config failed in
the sandbox (``bench_error: RuntimeError: Kernel requires a runtime memory allocation, but no
allocator was set``), and kiln's launcher refused the binary (Triton's launcher ran it). Now:
every config is ``ok`` in the native sandbox (its own scratch memory), the torch sandbox (its
own allocator) and in-process; the tuned kernel launches through kiln's C launcher, which calls
the caller's allocator once per launch with Triton's size and alignment, on the caller's stream,
from the calling thread's context; a bundle's kernel does the same.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from triton_kiln.launch.scratch import ScratchNeeds

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")

M, N = 300, 1000  # not multiples of the blocks: the descriptors clip the edges


class CountingAllocator:
    """What libraries set: ``torch.empty(size, dtype=torch.int8, device="cuda")``, counted."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int | None]] = []

    def __call__(self, size: int, align: int, stream: int | None) -> Any:
        self.calls.append((size, align, stream))
        return torch.empty(size, dtype=torch.int8, device="cuda")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


@pytest.fixture
def allocator() -> Iterator[CountingAllocator]:
    import triton
    from triton.runtime import _allocation

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("device-side tensor descriptors need sm_90 or newer")
    previous = _allocation._allocator.get()
    counting = CountingAllocator()
    triton.set_allocator(counting)
    yield counting
    triton.set_allocator(previous)


@pytest.fixture
def fresh_sandboxes(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, Any]]:
    """A registry of sandboxes of this test's own (closed after it)."""
    from triton_kiln.sandbox import registry

    sandboxes: dict[int, Any] = {}
    monkeypatch.setattr(registry, "_SANDBOXES", sandboxes)
    yield sandboxes
    for sandbox in sandboxes.values():
        sandbox.close()


def _tuned(pool: Any, sandbox: bool) -> Any:
    import triton_kiln as kiln
    from support import kernels

    configs = [kiln.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=4) for bm in (16, 32) for bn in (32, 64)]
    return kiln.autotune(configs, key=["M", "N"], pool=pool, sandbox=sandbox)(kernels.desc_add_kernel)


def _grid(meta: dict[str, Any]) -> tuple[int, int]:
    return (-(-meta["M"] // meta["BLOCK_M"]), -(-meta["N"] // meta["BLOCK_N"]))


def _entries(tuned: Any) -> list[Any]:
    return [entry for table in tuned._variants.tables.tables.values() for entry in table.values()]


def _inputs() -> tuple[Any, Any, Any]:
    x = torch.randn(M, N, device="cuda")
    y = torch.randn(M, N, device="cuda")
    return x, y, torch.full_like(x, float("nan"))


@pytest.mark.parametrize("where", ["native", "torch", "in_process"])
def test_descriptor_kernel_tunes_and_launches_through_kilns_launcher(
    make_pool: Any,
    allocator: CountingAllocator,
    fresh_sandboxes: dict[int, Any],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    monkeypatch.setenv("KILN_NATIVE_SANDBOX", "0" if where == "torch" else "1")
    tuned = _tuned(make_pool(workers=4), sandbox=where != "in_process")
    x, y, out = _inputs()
    tuned[_grid](x, y, out, M, N)
    torch.cuda.synchronize()
    run = tuned.last_run
    assert run is not None
    assert [r.status for r in run.results] == ["ok"] * 4, [(r.status, r.reason) for r in run.results]
    assert torch.equal(out, x + y)

    if where == "native":  # no config went to the torch sandbox (the fallback)
        (sandbox,) = fresh_sandboxes.values()
        assert type(sandbox).__name__ == "NativeSandbox"
        assert sandbox.torch_sandbox is None
    if where == "torch":
        (sandbox,) = fresh_sandboxes.values()
        assert type(sandbox).__name__ == "Sandbox"

    (entry,) = _entries(tuned)
    assert entry.launcher.is_fast, entry.launcher.fallback_reason  # kiln's C launcher, not Triton's
    needs = ScratchNeeds.from_metadata(entry.launcher.artifact.metadata)
    assert needs.global_.size > 0
    assert entry.launcher.native.scratch == needs.pairs()
    kwargs = tuned.best_config.kwargs
    grid = _grid({"M": M, "N": N, **kwargs})
    expected = needs.global_.request(grid)
    assert expected is not None

    # Tuple grid: the whole call in C; grid function: LaunchEntry.launch. One allocation each,
    # Triton's size and alignment, on the caller's stream.
    allocator.calls.clear()
    stream = torch.cuda.current_stream().cuda_stream
    for call_grid in (grid, _grid, grid):
        out.fill_(float("nan"))
        tuned[call_grid](x, y, out, M, N)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
    assert allocator.calls == [(expected[0], expected[1], stream)] * 3

    side = torch.cuda.Stream()
    allocator.calls.clear()
    with torch.cuda.stream(side):
        out.fill_(float("nan"))
        tuned[grid](x, y, out, M, N)
    side.synchronize()
    assert torch.equal(out, x + y)
    assert allocator.calls == [(expected[0], expected[1], side.cuda_stream)]


def test_allocator_is_the_calling_threads(make_pool: Any, allocator: CountingAllocator) -> None:
    """``triton.set_allocator`` sets a ContextVar: kiln's launcher reads it in the calling
    thread's context at each launch, as Triton's launcher does."""
    import triton

    tuned = _tuned(make_pool(workers=4), sandbox=True)
    x, y, out = _inputs()
    tuned[_grid](x, y, out, M, N)
    grid = _grid({"M": M, "N": N, **tuned.best_config.kwargs})
    theirs = CountingAllocator()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            with pytest.raises(RuntimeError, match="no allocator was set"):
                tuned[grid](x, y, out, M, N)  # a new thread's context: Triton's NullAllocator
            triton.set_allocator(theirs)
            out.fill_(float("nan"))
            tuned[grid](x, y, out, M, N)
            torch.cuda.synchronize()
        except BaseException as exc:
            errors.append(exc)

    allocator.calls.clear()
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert not errors, errors
    assert torch.equal(out, x + y)
    assert len(theirs.calls) == 1
    assert allocator.calls == []
    (entry,) = _entries(tuned)
    assert entry.launcher.is_fast


def test_bundle_kernel_uses_the_callers_allocator(
    make_pool: Any, allocator: CountingAllocator, tmp_path: Path
) -> None:
    import triton_kiln as kiln

    tuned = _tuned(make_pool(workers=4), sandbox=True)
    x, y, out = _inputs()
    tuned[_grid](x, y, out, M, N)
    path = kiln.save_bundle(tmp_path / "desc", tuned)
    kernel = kiln.load_bundle(path, register=False)["desc_add_kernel"]
    grid = _grid({"M": M, "N": N, **tuned.best_config.kwargs})  # the bundle's variant
    allocator.calls.clear()
    for call_grid in (_grid, grid, _grid):
        out.fill_(float("nan"))
        kernel[call_grid](x, y, out, M, N)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
    launcher = kernel.variant_for((x, y, out, M, N)).launcher
    assert launcher.is_fast, launcher.fallback_reason
    assert launcher.native.scratch == ScratchNeeds.from_metadata(launcher.artifact.metadata).pairs()
    assert len(allocator.calls) == 3


def test_profile_scratch_comes_from_tritons_profile_allocator(
    make_pool: Any, allocator: CountingAllocator
) -> None:
    """The second scratch parameter (profile scratch, instrumented builds) is looked up where
    Triton's launcher looks it up (``set_profile_allocator``). No uninstrumented build asks for
    it, so this launcher is told the binary does (it ignores the pointer); both allocators are
    called, each with Triton's rule."""
    from triton.runtime import _allocation

    from triton_kiln import triton_compat
    from triton_kiln.launch.native import native

    tuned = _tuned(make_pool(workers=4), sandbox=False)
    x, y, out = _inputs()
    tuned[_grid](x, y, out, M, N)
    (entry,) = _entries(tuned)
    artifact = entry.launcher.artifact
    needs = ScratchNeeds.from_metadata(artifact.metadata)
    launcher = native().Launcher(
        artifact.binary,
        artifact.name,
        entry.launcher.spec.kinds(),
        32 * artifact.num_warps,
        artifact.shared,
        2,
        scratch=(needs.pairs()[0], (48, 16)),
        allocators=triton_compat.scratch_allocator_sources(),
    )
    profile = CountingAllocator()
    _allocation.set_profile_allocator(profile)
    try:
        grid = _grid({"M": M, "N": N, **tuned.best_config.kwargs})
        stream = torch.cuda.current_stream().cuda_stream
        out.fill_(float("nan"))
        allocator.calls.clear()
        launcher.launch(grid, stream, (x, y, out, M, N, *entry.tail))
        torch.cuda.synchronize()
    finally:
        _allocation.set_profile_allocator(None)
    assert torch.equal(out, x + y)
    programs = grid[0] * grid[1]
    assert allocator.calls == [(programs * needs.global_.size, needs.global_.align, stream)]
    assert profile.calls == [(programs * 48, 16, stream)]

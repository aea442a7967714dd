"""kiln's fast launch path on a real GPU: same outputs as Triton, CUDA graphs, streams, fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _single(kernel: Any, pool: Any, key: tuple[str, ...] = ("n",), **constexprs: Any) -> Any:
    import triton_kiln as kiln

    return kiln.autotune([kiln.Config(constexprs, num_warps=4)], key=list(key), pool=pool)(kernel)


def _fast_entries(tuned: Any) -> list[Any]:
    return [entry for table in tuned._variants.tables.tables.values() for entry in table.values()]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 17, 4096, 100_003])
@pytest.mark.parametrize("stride", [1, 3])
@pytest.mark.parametrize(
    ("alpha", "flag", "offset", "square"), [(2.5, True, 7, False), (-0.5, False, -3, True)]
)
@pytest.mark.parametrize("grid_kind", ["tuple", "meta"])
def test_fast_path_matches_triton(
    make_pool: Any,
    dtype: str,
    n: int,
    stride: int,
    alpha: float,
    flag: bool,
    offset: int,
    square: bool,
    grid_kind: str,
) -> None:
    """A tuple grid launches entirely in C (BoundCall); a grid function goes through
    ``LaunchEntry.launch``: both must give Triton's output, bit for bit."""
    import triton

    from support import kernels

    pool = make_pool(workers=2)
    tuned = _single(kernels.axpby_kernel, pool, BLOCK=256)
    dt = getattr(torch, dtype)
    x = torch.randn(n * stride, device="cuda").to(dt)
    expected = torch.full((n,), float("nan"), device="cuda", dtype=dt)
    grid = (triton.cdiv(n, 256),)
    kernels.axpby_kernel[grid](
        x, expected, n, stride, alpha, flag, offset, BLOCK=256, SQUARE=square, num_warps=4
    )
    call_grid: Any = grid
    if grid_kind == "meta":
        call_grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    for attempt in range(3):  # the first call registers the fast entry, the others use it
        out = torch.full_like(expected, float("nan"))
        tuned[call_grid](x, out, n, stride, alpha, flag, offset, square)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, expected, rtol=0, atol=0, msg=f"call {attempt}")
    entries = _fast_entries(tuned)
    assert len(entries) == 1
    assert entries[0].launcher.is_fast, entries[0].launcher.fallback_reason
    launcher = entries[0].launcher.native
    assert launcher.n_params in (-1, launcher.n_expected)


def test_2d_grid_and_strides(make_pool: Any) -> None:
    import triton

    from support import kernels

    pool = make_pool(workers=2)
    tuned = _single(kernels.tile2d_kernel, pool, key=("M", "N"), BM=32, BN=64)
    for shape in [(100, 300), (64, 64), (1, 1000)]:
        base = torch.randn(shape[1], shape[0], device="cuda").t()  # non-contiguous view
        out = torch.empty(shape[1], shape[0], device="cuda")
        grid = lambda meta: (triton.cdiv(meta["M"], meta["BM"]), triton.cdiv(meta["N"], meta["BN"]))  # noqa: E731
        for _ in range(2):
            out.zero_()
            tuned[grid](base, out, shape[0], shape[1], base.stride(0), base.stride(1))
            torch.testing.assert_close(out, base.t() + 1, msg=f"shape {shape}")
    entries = _fast_entries(tuned)
    assert all(e.launcher.is_fast for e in entries), [e.launcher.fallback_reason for e in entries]


def test_cuda_graph_capture_and_replay(make_pool: Any) -> None:
    from support import kernels

    pool = make_pool(workers=2)
    tuned = _single(kernels.add_kernel, pool, BLOCK=1024)
    n = 10_000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.zeros_like(x)
    grid = (10,)
    tuned[grid](x, y, out, n)  # registers the fast entry outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        tuned[grid](x, y, out, n)  # warm-up on the capture stream
    stream.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        tuned[grid](x, y, out, n)
    for value in (1.0, -2.0, 3.5):
        x.fill_(value)
        y.fill_(1.0)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, torch.full_like(out, 2 * value + 1.0))
    assert all(e.launcher.is_fast for e in _fast_entries(tuned))


def test_non_default_stream_is_used(make_pool: Any) -> None:
    from support import kernels

    pool = make_pool(workers=2)
    tuned = _single(kernels.add_kernel, pool, BLOCK=1024)
    n = 1 << 20
    x = torch.ones(n, device="cuda")
    y = torch.ones(n, device="cuda")
    out = torch.zeros_like(x)
    tuned[(n // 1024,)](x, y, out, n)
    torch.cuda.synchronize()
    out.zero_()
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keep the side stream busy (~0.1 s)
        tuned[(n // 1024,)](x, y, out, n)
        done = torch.cuda.Event()
        done.record(side)
    # Launched behind the sleep on the side stream, so not finished yet.
    assert not done.query()
    side.synchronize()
    torch.testing.assert_close(out, torch.full_like(out, 3.0))


def test_fallback_to_triton_launcher_when_disabled(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from support import kernels

    monkeypatch.setenv("KILN_FAST_LAUNCH", "0")
    pool = make_pool(workers=2)
    tuned = _single(kernels.add_kernel, pool, BLOCK=1024)
    n = 5000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    for _ in range(2):
        out = torch.zeros_like(x)
        tuned[(5,)](x, y, out, n)
        torch.testing.assert_close(out, 2 * x + y)
    entries = _fast_entries(tuned)
    assert entries
    assert not entries[0].launcher.is_fast
    assert entries[0].launcher.fallback_reason == "KILN_FAST_LAUNCH=0"


def test_cpu_tensor_is_refused_clearly(make_pool: Any) -> None:
    from support import kernels

    pool = make_pool(workers=2)
    tuned = _single(kernels.add_kernel, pool, BLOCK=1024)
    n = 4096
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    tuned[(4,)](x, y, out, n)
    with pytest.raises(ValueError, match="not GPU memory"):
        tuned[(4,)](x.cpu(), y, out, n)
    tuned[(4,)](x, y, out, n)  # still works
    torch.testing.assert_close(out, 2 * x + y)

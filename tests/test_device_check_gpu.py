"""The output check on the GPU, on a real GPU.

* The summary kernel (``kiln.sandbox.compare_kernel``) on many random cases (NaN, Inf, near the
  tolerance, overflow, integers, bool) gives, through ``Summary``/``measured``, the host rule's
  verdict (``compare_np.compare``) and NaN/Inf finding, exactly.
* The native sandbox with the kernel (compiled by kiln's pool, sent as ``compare_kernels``)
  checks outputs on the GPU (``check_on == "gpu"``) with the same verdicts as a sandbox checking
  on the host, and checks a 128 MB output faster than the host copy does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from test_device_summary import KINDS, random_case
from test_native_sandbox_gpu import _compiled, _inputs, _spec, _target
from triton_kiln.autotuner import compare_kernels
from triton_kiln.sandbox import compare_kernel, compare_np
from triton_kiln.sandbox.device_summary import SLOTS, Summary, measured, produced_nonfinite
from triton_kiln.sandbox.native_client import NativeSandbox

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

torch = pytest.importorskip("torch")

TORCH_VIEWS = {  # what the kernel's pointer is typed as, for Triton's own launch here
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float64": "float64",
    "torch.int32": "int32",
    "torch.bool": "uint8",
}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _on_device(words: Any, dtype: str) -> Any:
    raw = torch.from_numpy(np.ascontiguousarray(words).view(np.uint8).copy()).cuda()
    return raw.view(getattr(torch, TORCH_VIEWS[dtype]))


def _device_summary(out: Any, ref: Any, before: Any, dtype: str) -> Summary:
    n = out.numel()
    grid = compare_kernel.programs(n)
    part = torch.empty(grid * SLOTS, dtype=torch.float64, device="cuda")
    kind = compare_kernel.VARIANTS[dtype][0]
    compare_kernel.output_summary_kernel[(grid,)](
        out, ref, before, part, n, KIND=kind, BLOCK=compare_kernel.BLOCK
    )
    torch.cuda.synchronize()
    return Summary.reduce(part.view(grid, SLOTS).tolist())


@pytest.mark.parametrize("dtype", list(KINDS))
def test_device_summary_equals_the_host_rule(dtype: str) -> None:
    rng = np.random.default_rng(7 + len(dtype))
    floating = "float" in dtype
    for _ in range(300):
        out, ref, before = random_case(rng, dtype)
        big = rng.random() < 0.1  # a few large ones: several blocks per program
        if big:
            out, ref, before = (np.tile(a, 5000) for a in (out, ref, before))
        summary = _device_summary(*(_on_device(a, dtype) for a in (out, ref, before)), dtype)
        host_out, host_ref = compare_np.decode(out, dtype), compare_np.decode(ref, dtype)
        for tolerances in (None, (1e-2, 1e-2)):
            expected = compare_np.compare({"x": host_out}, {"x": host_ref}, tolerances)
            got = compare_np.judge(
                {"x": host_out},
                {"x": host_ref},
                tolerances,
                compare_np._describe,
                lambda a, b, s=summary: measured(s, floating),
            )
            assert (got.ok, got.detail) == (expected.ok, expected.detail), (dtype, summary)
            same = got.max_abs_diff == expected.max_abs_diff
            assert same or (np.isnan(got.max_abs_diff) and np.isnan(expected.max_abs_diff))
        before_host = compare_np.decode(before, dtype)
        assert produced_nonfinite(summary, floating) == compare_np.produced_nonfinite(
            host_out, lambda b=before_host: b
        )


def _check_kernels(pool: Any, dtypes: set[str]) -> dict[str, Any]:
    futures = compare_kernels.submit(pool, _target(), dtypes)
    return compare_kernels.specs(pool, futures, 120.0)


def test_the_sandbox_checks_on_the_gpu_with_the_host_verdicts(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    n = 100_003
    args = _inputs(n)
    compiled = [_compiled(pool, b, f) for b, f in ((256, 0), (1024, 0), (256, 3), (1024, 0))]
    verdicts = {}
    for where in ("gpu", "host"):
        sandbox = NativeSandbox(device=torch.cuda.current_device())
        if where == "gpu":
            sandbox.set_compare_kernels(_check_kernels(pool, {"torch.float32"}))
        sandbox.set_inputs(args, [], [])
        outcomes = [sandbox.bench(_spec(pool, request, artifact, n)) for request, artifact in compiled]
        assert all(o.status == "ok" for o in outcomes), outcomes
        assert {o.sandbox["check_on"] for o in outcomes} == {where}
        verdicts[where] = [(tuple(o.check), dict(o.check.outputs)) for o in outcomes]
        reference = sandbox._settled_reference()  # what the torch sandbox would be seeded with
        assert reference is not None
        assert torch.equal(reference[0]["out_ptr"].cuda(), args["x_ptr"] * 3.0)
        sandbox.close()
    assert verdicts["gpu"] == verdicts["host"]
    assert verdicts["gpu"][2][0][0] is False  # the wrong config
    assert torch.count_nonzero(args["out_ptr"]) == 0


def test_a_large_output_is_checked_faster_on_the_gpu(make_pool: Any) -> None:
    pool = make_pool(workers=2)
    n = 32 << 20  # 128 MB of fp32, as DyT's outputs at 16384x4096 bf16 x2
    args = _inputs(n)
    compiled = [_compiled(pool, b, 0) for b in (256, 512, 1024)]
    check_s = {}
    for where in ("gpu", "host"):
        sandbox = NativeSandbox(device=torch.cuda.current_device())
        if where == "gpu":
            sandbox.set_compare_kernels(_check_kernels(pool, {"torch.float32"}))
        sandbox.set_inputs(args, [], [])
        outcomes = [sandbox.bench(_spec(pool, request, artifact, n)) for request, artifact in compiled]
        check_s[where] = [o.sandbox["check_s"] for o in outcomes]
        sandbox.close()
    print(f"\ncheck of a 128 MB output, per config: gpu {check_s['gpu']}, host {check_s['host']}")
    assert max(check_s["gpu"][1:]) < min(check_s["host"][1:])

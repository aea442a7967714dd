"""The output rule on a real GPU: a kernel writing per-program partial sums whose layout follows
``BLOCK`` (Liger's DyT backward pattern) keeps every config, and every config competes; a config
that writes wrong values into the real output, with no ``reference=``, is rejected. The fastest
config with a parameter value no other config has (the zero-writer) is checked on both backends
in ``test_output_rule.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")


@triton.jit
def double_with_partials(x_ptr, y_ptr, partial_ptr, n, BLOCK: tl.constexpr, SKEW: tl.constexpr):
    """y = 2x, and each program's partial sum of x at ``partial[program_id]`` (its layout, the
    number of columns written, follows BLOCK; only ``partial.sum()`` is meaningful). SKEW=1 with
    BLOCK=256 is a wrong config: it adds 1 to y."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = x * 2.0
    if SKEW == 1 and BLOCK == 256:
        y = y + 1.0
    tl.store(y_ptr + offsets, y, mask=mask)
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


@pytest.fixture(autouse=True)
def _own_tuning_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _tune(make_pool: Any, configs: list[Any], sandbox: bool) -> tuple[Any, Any, Any, Any]:
    import triton_kiln as kiln

    tuned = kiln.autotune(
        configs, key=["n"], pool=make_pool(workers=4), sandbox=sandbox, reset_to_zero=["partial_ptr"]
    )(double_with_partials)
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    partial = torch.zeros(n // 256, device="cuda")
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, partial, n)
    torch.cuda.synchronize()
    return tuned, x, y, partial


@pytest.mark.parametrize("sandbox", [True, False])
def test_partial_sums_whose_layout_follows_block_keep_every_config(make_pool: Any, sandbox: bool) -> None:
    import triton_kiln as kiln

    configs = [kiln.Config({"BLOCK": b, "SKEW": 0}, num_warps=w) for b in (256, 512, 1024) for w in (2, 4)]
    tuned, x, y, partial = _tune(make_pool, configs, sandbox)
    run = tuned.last_run
    assert [r.status for r in run.results] == ["ok"] * len(configs), run.results
    assert not any(r.flagged for r in run.results)  # scratch is not checked: all compete equally
    assert all("partial_ptr not checked" in (r.reason or "") for r in run.results)
    assert all("BLOCK" in (r.reason or "") for r in run.results)
    assert not any("y_ptr" in (r.reason or "") for r in run.results)  # the real output agrees
    torch.testing.assert_close(y, x * 2.0)
    torch.testing.assert_close(partial.sum(), x.sum(), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("sandbox", [True, False])
def test_a_wrong_config_is_rejected_without_a_reference(make_pool: Any, sandbox: bool) -> None:
    import triton_kiln as kiln

    shapes = [(256, 0, 2), (256, 0, 4), (512, 0, 2), (512, 0, 4), (512, 1, 2), (512, 1, 4), (256, 1, 4)]
    configs = [kiln.Config({"BLOCK": b, "SKEW": s}, num_warps=w) for b, s, w in shapes]
    tuned, x, y, _ = _tune(make_pool, configs, sandbox)
    by_label = tuned.last_run.results_by_label
    wrong = by_label["BLOCK=256, SKEW=1, num_warps=4, num_stages=3, num_ctas=1"]
    assert wrong.status == "wrong_output", wrong
    assert "y_ptr: differs from the 6 of 7 configs that agree" in (wrong.reason or "")
    assert sum(r.status == "ok" for r in by_label.values()) == 6
    assert tuned.best_config.kwargs != {"BLOCK": 256, "SKEW": 1}
    torch.testing.assert_close(y, x * 2.0)

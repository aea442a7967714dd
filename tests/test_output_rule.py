"""The output rule (kiln.autotuner.outputs) end to end on CI: real compiles, FakeBench outputs.

Each test tunes ``scale_kernel`` with configs whose (fake) outputs follow a pattern, and checks
which configs the rule rejects, flags or trusts; the last tests drive the native sandbox's
numpy side (:class:`~kiln.sandbox.compare.Representatives` with ``compare_np``) directly.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triton_kiln as kiln
from test_autotune_cpu import make_tuner, tune
from triton_kiln.sandbox import compare_np
from triton_kiln.sandbox.compare import MAX_REPRESENTATIVES, Representatives, Verdict

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(240)

N = 4096


def grid_configs(blocks: tuple[int, ...], warps: tuple[int, ...]) -> list[Any]:
    return [kiln.Config({"BLOCK": b}, num_warps=w) for b in blocks for w in warps]


def good(config: Any) -> dict[str, Any]:
    return {"out_ptr": torch.arange(N, dtype=torch.float32) * 3.0}


def statuses(tuner: Any) -> dict[str, str]:
    return {r.label: r.status for r in tuner.last_run.results}


def run(make_pool: Any, tmp_path: Path, cfgs: list[Any], outputs_of: Any, **kwargs: Any) -> Any:
    fastest = {c.kwargs["BLOCK"] * 10 + c.num_warps: i for i, c in enumerate(cfgs)}
    tuner, bench = make_tuner(
        make_pool,
        tmp_path,
        cfgs,
        lambda c: 1.0 + fastest[c.kwargs["BLOCK"] * 10 + c.num_warps] / 100,
        outputs_of=outputs_of,
        **kwargs,
    )
    tune(tuner, bench)
    return tuner


def test_config_dependent_scratch_is_accepted_and_reported(make_pool: Any, tmp_path: Path) -> None:
    """DyT's pattern: a partial-sum buffer whose layout follows BLOCK: equal BLOCKs agree,
    different BLOCKs differ; the real output agrees everywhere. Every config is accepted."""
    cfgs = grid_configs((64, 128, 256), (2, 4, 8))

    def outputs(config: Any) -> dict[str, Any]:
        partial = torch.zeros(64)
        columns = N // config.kwargs["BLOCK"] // 16
        partial[:columns] = 12.0 / columns  # same sum, another layout
        return {**good(config), "x_ptr": partial}

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    results = tuner.last_run.results
    assert {r.status for r in results} == {"ok"}
    assert all(r.flagged and "x_ptr not checked" in (r.reason or "") for r in results)
    assert all("BLOCK" in (r.reason or "") and "scratch" in (r.reason or "") for r in results)
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert tuner.best_config.num_warps == 2


def test_a_single_wrong_config_among_agreeing_ones_is_rejected(make_pool: Any, tmp_path: Path) -> None:
    cfgs = grid_configs((64, 128, 256), (2, 4, 8))

    def outputs(config: Any) -> dict[str, Any]:
        if config.kwargs["BLOCK"] == 128 and config.num_warps == 4:
            bad = good(config)["out_ptr"].clone()
            bad[7] += 100.0
            return {"out_ptr": bad}
        return good(config)

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    by_label = {r.label: r for r in tuner.last_run.results}
    wrong = by_label["BLOCK=128, num_warps=4, num_stages=3, num_ctas=1"]
    assert wrong.status == "wrong_output"
    assert "out_ptr: differs from the 8 of 9 configs that agree" in (wrong.reason or "")
    assert sum(r.status == "ok" and not r.flagged for r in by_label.values()) == 8
    assert tuner.configs_timings[next(c for c in cfgs if c.kwargs["BLOCK"] == 128 and c.num_warps == 4)][
        0
    ] == float("inf")


def test_the_wrong_config_is_rejected_even_when_first_and_fastest(make_pool: Any, tmp_path: Path) -> None:
    """The first clean config used to be the reference; a wrong first one is now outvoted."""
    cfgs = grid_configs((64, 128, 256), (2, 4))

    def outputs(config: Any) -> dict[str, Any]:
        if config.kwargs["BLOCK"] == 64 and config.num_warps == 2:
            return {"out_ptr": good(config)["out_ptr"] * 2}
        return good(config)

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    assert statuses(tuner)["BLOCK=64, num_warps=2, num_stages=3, num_ctas=1"] == "wrong_output"
    assert tuner.best_config.kwargs == {"BLOCK": 64}
    assert tuner.best_config.num_warps == 4


def test_an_even_split_no_parameter_explains_is_flagged_not_rejected(make_pool: Any, tmp_path: Path) -> None:
    cfgs = grid_configs((64, 128, 256), (2, 4))
    odd = {(64, 2), (128, 4), (256, 2)}  # neither BLOCK nor num_warps separates the halves

    def outputs(config: Any) -> dict[str, Any]:
        base = good(config)["out_ptr"]
        return {"out_ptr": base + 50.0 if (config.kwargs["BLOCK"], config.num_warps) in odd else base}

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    results = tuner.last_run.results
    assert {r.status for r in results} == {"ok"}
    assert all(r.flagged and "configs disagree (3 + 3 of 6)" in (r.reason or "") for r in results)


def test_a_deviant_group_explained_by_a_parameter_is_flagged(make_pool: Any, tmp_path: Path) -> None:
    """Eight configs agree; the one BLOCK=256 config differs: BLOCK may explain it (flagged)."""
    cfgs = [*grid_configs((64, 128), (2, 4, 8, 16)), kiln.Config({"BLOCK": 256}, num_warps=4)]

    def outputs(config: Any) -> dict[str, Any]:
        base = good(config)["out_ptr"]
        return {"out_ptr": base + 100.0 if config.kwargs["BLOCK"] == 256 else base}

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    lone = tuner.last_run.results_by_label["BLOCK=256, num_warps=4, num_stages=3, num_ctas=1"]
    assert lone.status == "ok"
    assert lone.flagged
    assert "no config among them has its BLOCK=256" in (lone.reason or "")


def test_nan_in_one_config_is_rejected(make_pool: Any, tmp_path: Path) -> None:
    cfgs = grid_configs((64, 128, 256), (2, 4))

    def outputs(config: Any) -> dict[str, Any]:
        out = good(config)["out_ptr"].clone()
        if config.kwargs["BLOCK"] == 256 and config.num_warps == 4:
            out[3] = float("nan")
        return {"out_ptr": out}

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    nan = tuner.last_run.results_by_label["BLOCK=256, num_warps=4, num_stages=3, num_ctas=1"]
    assert nan.status == "wrong_output"
    assert "NaN/Inf where 5 of 6 configs wrote numbers" in (nan.reason or "")
    assert sum(s == "ok" for s in statuses(tuner).values()) == 5


def test_a_mismatch_with_the_users_reference_is_rejected(make_pool: Any, tmp_path: Path) -> None:
    """With reference=, the user's outputs decide, even against a unanimous majority."""
    cfgs = grid_configs((64, 128), (2, 4))

    def outputs(config: Any) -> dict[str, Any]:
        base = good(config)["out_ptr"]
        return {"out_ptr": base if config.kwargs["BLOCK"] == 128 else base + 100.0}

    tuner = run(
        make_pool,
        tmp_path,
        cfgs,
        outputs,
        reference=lambda args: args["out_ptr"].copy_(torch.arange(N, dtype=torch.float32) * 3.0),
    )
    got = statuses(tuner)
    assert {label: status for label, status in got.items() if status == "ok"} == {
        label: "ok" for label in got if label.startswith("BLOCK=128,")
    }
    rejected = [r for r in tuner.last_run.results if r.status == "wrong_output"]
    assert all((r.reason or "").startswith("differs from your reference: out_ptr") for r in rejected)
    assert tuner.best_config.kwargs == {"BLOCK": 128}


# ------------------------------------------------------------ the native sandbox's numpy side


def _host(values: Any) -> compare_np.HostArray:
    return compare_np.HostArray("torch.float32", np.asarray(values, dtype=np.float32))


def _keeper() -> Representatives[compare_np.HostArray]:
    return Representatives(lambda name, out, ref: compare_np.compare_one(name, out, ref, None))


def _check(keeper: Representatives[compare_np.HostArray], values: Any, nonfinite: bool = False) -> Verdict:
    out = _host(values)
    return keeper.check(
        {"da": out}, lambda n: compare_np.fingerprint_words("torch.float32", out.values), {"da": nonfinite}
    )


def test_representatives_place_outputs_and_the_verdict_pickles() -> None:
    keeper = _keeper()
    a, b = np.zeros(8), np.ones(8)
    first = _check(keeper, a)
    assert first == (True, 0.0, "reference")  # as the sandboxes always answered
    same = _check(keeper, a + 1e-6)
    assert same[0] is True
    assert same.outputs["da"].cluster == first.outputs["da"].cluster
    other = _check(keeper, b)
    assert other[0] is False
    assert "da: max |diff|" in other[2]
    assert other.outputs["da"].differs_from == (first.outputs["da"].cluster,)
    assert other.outputs["da"].cluster not in (None, first.outputs["da"].cluster)
    assert _check(keeper, b).outputs["da"].cluster == other.outputs["da"].cluster
    for k in range(2, MAX_REPRESENTATIVES):
        _check(keeper, np.full(8, float(k)))
    beyond = _check(keeper, np.full(8, 99.0))
    assert beyond.outputs["da"].cluster is None  # memory stays bounded
    assert len(beyond.outputs["da"].differs_from) == MAX_REPRESENTATIVES
    back = pickle.loads(pickle.dumps(other))
    assert isinstance(back, Verdict)
    assert back == other
    assert back.outputs == other.outputs


def test_fingerprints_match_between_numpy_words_and_torch_tensors() -> None:
    """A representative the native sandbox settled on keeps its name in the torch sandbox."""
    from triton_kiln.sandbox.compare import tensor_fingerprint

    t = torch.randn(5, 7).to(torch.bfloat16)
    words = t.contiguous().view(torch.uint16).numpy()
    assert compare_np.fingerprint_words("torch.bfloat16", words) == tensor_fingerprint(t)
    assert tensor_fingerprint(t) != tensor_fingerprint(t + 1)


def test_produced_nonfinite_ignores_nan_that_was_there_before() -> None:
    before = _host([np.nan, 1.0, 2.0])
    assert not compare_np.produced_nonfinite(_host([np.nan, 1.0, 3.0]), lambda: before)
    assert compare_np.produced_nonfinite(_host([np.nan, np.inf, 3.0]), lambda: before)
    assert not compare_np.produced_nonfinite(_host([0.0, 1.0, 3.0]), lambda: pytest.fail("read"))


@pytest.mark.parametrize("dtype", ["torch.float32", "torch.float16", "torch.bfloat16"])
@pytest.mark.parametrize(
    "case",
    ["same", "close", "far", "nan_out", "nan_both", "inf_both", "inf_out", "huge", "empty"],
)
def test_numpy_measure_agrees_with_torch_on_every_path(dtype: str, case: str) -> None:
    """The one-pass fast path of the numpy check gives what the torch check gives (NaN, Inf and
    values whose differences overflow take the exact path)."""
    from triton_kiln.sandbox.compare import compare as torch_compare

    rng = np.random.default_rng(0)
    ref = rng.standard_normal(257).astype(np.float32)
    out = ref.copy()
    if case == "empty":
        ref, out = ref[:0], out[:0]
    elif case == "close":
        out[3] += 1e-3
    elif case == "far":
        out[::7] += 5.0
    elif case == "nan_out":
        out[4] = np.nan
    elif case == "nan_both":
        out[4] = ref[4] = np.nan
        out[9] += 0.5
    elif case == "inf_both":
        out[5] = ref[5] = np.inf
        out[11] -= 0.25
    elif case == "inf_out":
        out[6] = -np.inf
    elif case == "huge":
        big = 60000.0 if dtype == "torch.float16" else 3e38
        ref[:2], out[:2] = big, -big
    torch_dtype = getattr(torch, dtype.split(".")[1])
    t_ref, t_out = torch.from_numpy(ref).to(torch_dtype), torch.from_numpy(out).to(torch_dtype)

    def host(t: Any) -> compare_np.HostArray:
        if dtype == "torch.bfloat16":
            return compare_np.decode(t.view(torch.uint16).numpy(), dtype)
        return compare_np.decode(t.numpy(), dtype)

    mine = compare_np.compare({"y": host(t_out)}, {"y": host(t_ref)})
    theirs = torch_compare({"y": t_out}, {"y": t_ref})
    assert (mine.ok, mine.detail) == (theirs.ok, theirs.detail)
    if np.isfinite(theirs.max_abs_diff):
        assert mine.max_abs_diff == pytest.approx(theirs.max_abs_diff, rel=1e-6)
    else:
        assert str(mine.max_abs_diff) == str(theirs.max_abs_diff)  # nan or inf, both


def test_produced_nonfinite_on_huge_finite_values_and_on_inf() -> None:
    big = compare_np.HostArray("torch.float64", np.array([1.7e308, 1.7e308, 1.0]))
    assert not compare_np.produced_nonfinite(big, lambda: pytest.fail("read"))
    bad = compare_np.HostArray("torch.float64", np.array([1.7e308, 1.7e308, np.inf]))
    assert compare_np.produced_nonfinite(bad, lambda: compare_np.HostArray("torch.float64", np.zeros(3)))

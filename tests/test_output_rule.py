"""The output rule (kiln.autotuner.outputs) end to end on CI: real compiles, FakeBench outputs.

Each test tunes ``scale_kernel`` with configs whose (fake) outputs follow a pattern, and checks
which configs the rule rejects, flags or trusts; the last tests drive the native sandbox's
numpy side (:class:`~kiln.sandbox.compare.Representatives` with ``compare_np``) directly. The
zero-writer case runs on both backends (``backend``): the stand-in here, the real kernel on a GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import triton

import triton_kiln as kiln
from support.basics import SM90
from support.kernels import OFF_BY_ONE, WRONG_WRITER_CONFIGS, ZERO_WRITER, add_modes_kernel
from test_autotune_cpu import FakeBench, make_tuner, tune
from test_native_check import make_state
from test_native_check import run as native_run
from triton_kiln.autotuner.outputs import config_params, decide
from triton_kiln.sandbox import compare_np
from triton_kiln.sandbox.compare import MAX_REPRESENTATIVES, Representatives, Verdict
from triton_kiln.tuning import TuningDatabase, format_table

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
    assert [(r.status, r.flagged) for r in results] == [("ok", False)] * 9  # all compete equally
    assert all("x_ptr not checked" in (r.reason or "") for r in results)
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


def test_an_even_split_no_parameter_explains_is_flagged_not_rejected(
    make_pool: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfgs = grid_configs((64, 128, 256), (2, 4))
    odd = {(64, 2), (128, 4), (256, 2)}  # neither BLOCK nor num_warps separates the halves

    def outputs(config: Any) -> dict[str, Any]:
        base = good(config)["out_ptr"]
        return {"out_ptr": base + 50.0 if (config.kwargs["BLOCK"], config.num_warps) in odd else base}

    with caplog.at_level(logging.WARNING, logger="kiln.autotune"):
        tuner = run(make_pool, tmp_path, cfgs, outputs)
    results = tuner.last_run.results
    assert {r.status for r in results} == {"ok"}
    assert all(r.flagged and "configs disagree (3 + 3 of 6)" in (r.reason or "") for r in results)
    assert tuner.best_config.kwargs == {"BLOCK": 64}  # no config is trusted: the fastest wins
    assert tuner.best_config.num_warps == 2
    warned = [r.getMessage() for r in caplog.records if r.name == "kiln.autotune"]
    assert any("no config's outputs could be confirmed" in m for m in warned), warned
    assert "no config's outputs could be confirmed" in format_table(tuner.last_run)


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


# ----------------------------------------------------- a config that disagrees never wins

ZERO = f"BLOCK=1024, MODE={ZERO_WRITER}, num_warps=4, num_stages=3, num_ctas=1"
PLUS_ONE = f"BLOCK=512, MODE={OFF_BY_ONE}, num_warps=4, num_stages=3, num_ctas=1"
WRONG = (ZERO, PLUS_ONE)


def issue_configs() -> list[Any]:
    return [kiln.Config({"BLOCK": b, "MODE": m}, num_warps=w) for b, m, w in WRONG_WRITER_CONFIGS]


def issue_runtime(config: Any) -> float:
    """The zero-writer is the fastest config, the off-by-one the next; then the six correct ones."""
    mode = config.kwargs["MODE"]
    shape = (config.kwargs["BLOCK"], mode, config.num_warps)
    return {ZERO_WRITER: 0.5, OFF_BY_ONE: 0.8}.get(mode, 1.0 + WRONG_WRITER_CONFIGS.index(shape) / 100)


def issue_output(config: Any, x: Any, y: Any) -> Any:
    """What ``add_modes_kernel`` writes into ``out`` with ``config``."""
    mode = config.kwargs["MODE"]
    if mode == ZERO_WRITER:
        return torch.zeros_like(x)
    return x + y + (1.0 if mode == OFF_BY_ONE else 0.0)


class HostSandboxBench(FakeBench):
    """:class:`FakeBench` whose output check is the native sandbox's own
    (``NativeState.check_outputs`` on host memory, ``host_memory.HostMemoryDriver``): each
    config's run writes its output into ``out_ptr``, and the verdict travels back as the
    sandbox's does."""

    def __init__(self, tuner: Any, args: Any, kwargs: Any, runtime_of: Any, output_of: Any) -> None:
        super().__init__(tuner, args, kwargs, runtime_of)
        x, y, out = (t.numpy() for t in args[:3])
        self.state = make_state({"x_ptr": x, "y_ptr": y, "out_ptr": out})
        self.output_of = output_of

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> Any:
        outcome = super().bench(candidate, artifact, grid, phase)
        verdict = native_run(self.state, "out_ptr", self.output_of(candidate.config).numpy())
        return dataclasses.replace(outcome, check=verdict)


def wrong_writers_on_cpu(make_pool: Any, tmp_path: Path, check: str) -> tuple[Any, Any, Any, Any]:
    """Real compiles for sm_90; the stand-in GPU's timings (:func:`issue_runtime`) and outputs
    (:func:`issue_output`), checked by the native sandbox's own code on host memory (``sandbox``)
    or by the autotuner in this process. Returns the tuner, ``x``, ``y`` and ``out``."""
    x, y = torch.randn(N), torch.randn(N)

    def bench(tuner: Any, args: Any, kw: Any) -> Any:
        output_of = lambda config: issue_output(config, x, y)  # noqa: E731
        if check == "sandbox":
            return HostSandboxBench(tuner, args, kw, issue_runtime, output_of)
        return FakeBench(tuner, args, kw, issue_runtime, lambda config: {"out_ptr": output_of(config)})

    tuner = kiln.autotune(
        issue_configs(),
        key=["n"],
        pool=make_pool(workers=2),
        database=TuningDatabase(tmp_path / "tuning.sqlite3"),
        target=SM90,
    )(add_modes_kernel)
    tuner._bencher_factory = bench
    out = torch.full((N,), -7.0)
    tuner.run(x, y, out, N, grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), warmup=True)
    return tuner, x, y, out


def wrong_writers_on_gpu(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str
) -> tuple[Any, Any, Any, Any]:
    """The kernel tuned and launched on the GPU, timed and checked in the sandbox or in process."""
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))
    configs = issue_configs()
    tuned = kiln.autotune(configs, key=["n"], pool=make_pool(workers=4), sandbox=check == "sandbox")(
        add_modes_kernel
    )
    n = 1 << 24
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full_like(x, -7.0)
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    torch.cuda.synchronize()
    return tuned, x, y, out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("check", ["sandbox", "in process"])
def test_the_zero_writer_and_the_off_by_one_are_rejected_and_never_chosen(
    backend: str, make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str
) -> None:
    """The case as found on the GPU: eight configs, six compute x + y, one writes zeros (the
    fastest, its MODE held by no other config), one adds 1. Both wrong ones were flagged, kept
    ``ok``, and the zero-writer was chosen: the caller got zeros. Both are ``wrong_output`` now;
    a correct config wins."""
    if backend == "cpu":
        tuner, x, y, out = wrong_writers_on_cpu(make_pool, tmp_path, check)
    else:
        tuner, x, y, out = wrong_writers_on_gpu(make_pool, tmp_path, monkeypatch, check)

    by_label = tuner.last_run.results_by_label
    for label in WRONG:
        assert by_label[label].status == "wrong_output", by_label[label]
        assert "out_ptr: differs from the 6 of 8 configs that agree" in (by_label[label].reason or "")
    correct = [r for label, r in by_label.items() if label not in WRONG]
    assert [(r.status, r.flagged) for r in correct] == [("ok", False)] * 6, correct
    assert tuner.best_config.kwargs["MODE"] == 0
    assert tuner.last_run.passed_over == ()

    if backend == "cpu":  # the stand-in's timings: which correct config is fastest is known
        assert tuner.best_config.kwargs == {"BLOCK": 256, "MODE": 0}
        assert tuner.best_config.num_warps == 2
        zero = next(c for c in tuner.configs if c.kwargs["MODE"] == ZERO_WRITER)
        assert tuner.configs_timings[zero][0] == float("inf")
        table = format_table(tuner.last_run)
        assert "8 configs: 6 ok, 2 failed (wrong_output 2)" in table
        assert "passed over" not in table
    else:  # the GPU's own timings: the zero-writer really is the fastest; the caller's output exact
        zero, plus_one = by_label[ZERO], by_label[PLUS_ONE]
        assert zero.runtime_ms is not None
        assert zero.runtime_ms < min(r.runtime_ms or 0.0 for r in [*correct, plus_one]), by_label
        assert torch.equal(out, x + y)


@pytest.mark.parametrize("first", range(len(WRONG_WRITER_CONFIGS)))
def test_the_decision_does_not_depend_on_which_config_was_checked_first(first: int) -> None:
    """The first config checked becomes the first representative: a wrong one first is outvoted
    all the same (the native sandbox's check on host memory, then :func:`decide`)."""
    from triton_kiln.tuning.configs import config_json, config_label

    configs = issue_configs()
    order = configs[first:] + configs[:first]
    x, y = torch.randn(N), torch.randn(N)
    state = make_state({"x_ptr": x.numpy(), "y_ptr": y.numpy(), "out_ptr": np.full(N, -7.0, np.float32)})
    verdicts = {config_label(c): native_run(state, "out_ptr", issue_output(c, x, y).numpy()) for c in order}
    decision = decide(verdicts, {config_label(c): config_params(config_json(c)) for c in order})
    assert sorted(decision.rejected) == sorted(WRONG)
    assert decision.flagged == {}
    assert decision.scratch == {}


def test_liger_dyt_backward_configs_all_stay_ok_and_compete() -> None:
    """Liger DyT's backward, its 18 configs (BLOCK_N x num_warps x num_stages), on the native
    check: DX agrees everywhere; DA holds per-program partial sums in columns that follow BLOCK_N
    (only their sum means anything). DA is scratch on evidence (three BLOCK_N groups of six):
    no config is rejected or flagged."""
    from triton_kiln.tuning.configs import config_json, config_label

    cols = 8
    configs = [
        kiln.Config({"BLOCK_N": b}, num_warps=w, num_stages=s)
        for b in (1024, 2048, 4096)
        for w in (4, 8, 16)
        for s in (1, 2)
    ]
    rng = np.random.default_rng(0)
    dx = rng.standard_normal(4096).astype(np.float32)
    partial = rng.standard_normal(cols).astype(np.float32)
    state = make_state({"DX": np.zeros(4096, np.float32), "DA": np.zeros(cols, np.float32)})
    verdicts = {}
    for config in configs:
        used = 4096 // config.kwargs["BLOCK_N"]  # programs along N: the columns written
        da = np.zeros(cols, np.float32)
        da[:used] = partial.sum() / used
        state.inputs.restore_all()
        state.cuda.memcpy_htod(state.inputs.tensors["DX"].ptr, dx.tobytes())
        state.cuda.memcpy_htod(state.inputs.tensors["DA"].ptr, da.tobytes())
        verdicts[config_label(config)] = state.check_outputs()
    decision = decide(verdicts, {config_label(c): config_params(config_json(c)) for c in configs})
    assert decision.rejected == {}
    assert decision.flagged == {}
    assert decision.scratch == {"DA": "BLOCK_N"}
    assert all(decision.reason(config_label(c))[0] == "ok" for c in configs)


def test_a_lone_config_with_a_parameter_value_no_other_has_is_rejected(
    make_pool: Any, tmp_path: Path
) -> None:
    """Eight configs agree; the one BLOCK=256 config differs. Its value is held by no other
    config, which is no evidence that the argument is scratch (it used to be: flagged, kept)."""
    cfgs = [*grid_configs((64, 128), (2, 4, 8, 16)), kiln.Config({"BLOCK": 256}, num_warps=4)]
    cfgs = cfgs[-1:] + cfgs[:-1]  # the lone config is the fastest

    def outputs(config: Any) -> dict[str, Any]:
        base = good(config)["out_ptr"]
        return {"out_ptr": base + 100.0 if config.kwargs["BLOCK"] == 256 else base}

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    lone = tuner.last_run.results_by_label["BLOCK=256, num_warps=4, num_stages=3, num_ctas=1"]
    assert lone.status == "wrong_output"
    assert "out_ptr: differs from the 8 of 9 configs that agree" in (lone.reason or "")
    assert tuner.best_config.kwargs == {"BLOCK": 64}


def test_two_configs_sharing_a_value_that_agree_and_differ_from_a_majority_are_scratch(
    make_pool: Any, tmp_path: Path
) -> None:
    """Seven configs agree; the two BLOCK=256 configs agree with each other and differ: positive
    evidence that the argument follows BLOCK. It is not checked; every config competes."""
    cfgs = [*grid_configs((256,), (2, 4)), *grid_configs((64, 128), (2, 4, 8, 16))][:9]

    def outputs(config: Any) -> dict[str, Any]:
        base = good(config)["out_ptr"]
        return {"out_ptr": base + 100.0 if config.kwargs["BLOCK"] == 256 else base}

    tuner = run(make_pool, tmp_path, cfgs, outputs)
    results = tuner.last_run.results
    assert [(r.status, r.flagged) for r in results] == [("ok", False)] * 9
    assert all("out_ptr not checked" in (r.reason or "") for r in results)
    assert tuner.best_config.kwargs == {"BLOCK": 256}
    assert tuner.best_config.num_warps == 2


def test_a_flagged_fastest_config_is_passed_over_and_the_log_and_report_say_so(
    make_pool: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two of four configs write NaN (too few numbers to reject them: flagged) and are the
    fastest; the fastest trusted config wins, and the log and the report name the passed-over one."""
    cfgs = grid_configs((64, 128), (2, 4))

    def outputs(config: Any) -> dict[str, Any]:
        out = good(config)["out_ptr"].clone()
        if config.kwargs["BLOCK"] == 64:
            out[3] = float("nan")
        return {"out_ptr": out}

    with caplog.at_level(logging.WARNING, logger="kiln.autotune"):
        tuner = run(make_pool, tmp_path, cfgs, outputs)
    by_label = tuner.last_run.results_by_label
    fastest = "BLOCK=64, num_warps=2, num_stages=3, num_ctas=1"
    assert by_label[fastest].status == "ok"
    assert by_label[fastest].flagged
    assert tuner.best_config.kwargs == {"BLOCK": 128}
    assert tuner.best_config.num_warps == 2
    warned = [r.getMessage() for r in caplog.records if r.name == "kiln.autotune"]
    assert any("passed over" in m and fastest in m and "NaN/Inf" in m for m in warned), warned
    table = format_table(tuner.last_run)
    assert f"passed over: {fastest} (1.0000 ms)" in table
    assert "NaN/Inf" in table.split("passed over:")[1]


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


def test_configs_checked_here_for_another_gpu_are_decided_with_all_checked_here_before() -> None:
    """Node sharing: the leader checks another GPU's contenders one round at a
    time (``node_share.check_here``). Its own two configs agree; a helper's correct config checked
    in a first round makes three; a helper's wrong one checked in a later round is decided with
    all of them (3 of 4 agree: rejected), not with the leader's own two alone (2 of 3: flagged)."""
    from triton_kiln.autotuner.outputs import InProcessCheck, OutputChecks, apply_here
    from triton_kiln.tuning.configs import config_json, config_label
    from triton_kiln.tuning.results import ConfigResult

    configs = grid_configs((64, 128), (2, 4))
    labels = [config_label(c) for c in configs]
    results = {
        label: ConfigResult(label, config_json(c), "ok") for label, c in zip(labels, configs, strict=True)
    }
    checker = OutputChecks(False, InProcessCheck(None, None))
    before = {"out_ptr": torch.full((N,), -7.0)}
    for label in labels:  # own, own, the helper's correct one, the helper's wrong one
        out = good(None)["out_ptr"] + (100.0 if label == labels[3] else 0.0)
        checker.verdicts[label] = checker.in_process.check({"out_ptr": out}, before)
    checker.ruled = set(labels[:2])  # the rule ran on the leader's own two
    apply_here([labels[2]], results, checker, "checked here")
    assert (results[labels[2]].status, results[labels[2]].reason) == ("ok", "checked here")
    apply_here([labels[3]], results, checker, "checked here")
    assert results[labels[3]].status == "wrong_output", results[labels[3]]
    assert "out_ptr: differs from the 3 of 4 configs that agree" in (results[labels[3]].reason or "")
    assert (results[labels[3]].reason or "").endswith("; checked here")

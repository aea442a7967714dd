"""``bench/choice_harness.py`` (issue 21 item 2), without a GPU: both arms' choices handed to
Triton's own autotuner (nothing would be benchmarked), the alternating order, and the limit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import choice_harness  # noqa: E402
import realworld  # noqa: E402
import realworld_child  # noqa: E402
import realworld_ops  # noqa: E402
from kernels import add_kernel  # noqa: E402


def _tuner() -> Any:
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128, 256) for w in (4, 8)]
    return triton.autotune(configs=configs, key=["n"])(add_kernel)


def test_each_arm_choice_answers_tritons_cache_lookup_so_nothing_is_tuned() -> None:
    tuner = _tuner()
    key_a, key_b = (1024, "torch.float32"), (4096, "torch.float32")
    kiln = {
        "k": [
            [repr(key_a), realworld_child.config_json(tuner.configs[1])],
            [repr(key_b), realworld_child.config_json(tuner.configs[4])],
        ]
    }
    ours = {
        "k": [
            [repr(key_a), realworld_child.config_json(tuner.configs[0])],
            [repr(key_b), realworld_child.config_json(tuner.configs[0])],
        ]
    }
    originals: dict[int, list[Any]] = {}
    every = list(tuner.configs)
    applied = choice_harness.apply_choices(
        [tuner], kiln, lambda t: "k", realworld_child.config_json, originals
    )
    assert applied == {"k": 2}
    assert tuner.configs == [every[1], every[4]]
    assert key_a in tuner.cache  # Triton's run looks the key up: no benchmark
    assert tuner.cache[key_a] is every[1]
    assert tuner.cache[key_b] is every[4]
    with pytest.raises(KeyError, match="no chosen config"):
        tuner.cache[(7, "torch.float32")]
    # the other arm's choices are found among the kernel's own configs, not the cut-down list
    choice_harness.apply_choices([tuner], ours, lambda t: "k", realworld_child.config_json, originals)
    assert tuner.configs == [every[0]]  # one config: Triton launches it without tuning


def test_a_choice_not_among_the_configs_is_reported() -> None:
    tuner = _tuner()
    wanted = {"k": [["(1,)", {"kwargs": {"BLOCK": 7}, "num_warps": 4}]]}
    applied = choice_harness.apply_choices([tuner], wanted, lambda t: "k", realworld_child.config_json, {})
    assert "not among" in applied["k"]


def test_arms_alternate_and_each_time_is_the_median_of_its_rounds() -> None:
    order: list[str] = []
    times = iter([1.0, 2.0, 2.0, 1.0, 3.0, 9.0])
    state = {"arm": ""}

    def setup(arm: str) -> Any:
        return lambda: (order.append(arm), state.update(arm=arm))

    timed = choice_harness.time_alternately(
        {"kiln": setup("kiln"), "triton": setup("triton")}, lambda: None, lambda fn: next(times), 3
    )
    assert order == ["kiln", "triton", "triton", "kiln", "kiln", "triton"]
    assert timed["kiln"] == {"ms": 1.0, "runs": [1.0, 1.0, 3.0]}
    assert timed["triton"] == {"ms": 2.0, "runs": [2.0, 2.0, 9.0]}


def test_the_limit_is_the_longest_compile_or_their_sum_over_the_cores_plus_the_final_round() -> None:
    def run(compiles: list[float | None], final_s: float) -> dict[str, Any]:
        results = [{"compile_s": c} for c in compiles]
        return {"run": {"results": results, "split": {"final_s": final_s}}}

    # 4 cores: 8 compiles of 1 s -> 2 s; one long compile of 5 s dominates the other run
    runs = [run([1.0] * 8, 0.5), run([5.0, 0.1, None], 0.25)]
    assert choice_harness.limit_s(runs, 4) == pytest.approx(2.0 + 0.5 + 5.0 + 0.25)
    assert choice_harness.limit_s([run([None], 1.0)], 4) is None  # served from the database


def test_summary_rows_carry_the_harness_times_the_limit_and_the_shape(tmp_path: Path) -> None:
    kiln_run = {"run": {"results": [{"compile_s": 2.0}, {"compile_s": 1.0}], "split": {"final_s": 0.5}}}
    arms = {
        "triton": {"first_s": 12.6, "configs": 36},
        "kiln": {"first_s": 5.0, "kiln_runs": {"_dyt_fwd_kernel": [kiln_run]}},
        "harness": {"kiln_choice_ms_triton_harness": 1.01, "triton_choice_ms_triton_harness": 1.0},
    }
    row = realworld.summarize("liger_dyt_fwdbwd_16384x4096", arms, tmp_path)
    assert row["shape"] == "16384x4096 bf16 fwd+bwd"
    assert row["kiln_choice_ms_triton_harness"] == 1.01
    assert row["triton_choice_ms_triton_harness"] == 1.0
    assert row["choice_ratio_triton_harness"] == pytest.approx(1.01)
    assert row["limit_s"] == pytest.approx(max(2.0, 3.0 / (__import__("os").cpu_count() or 1)) + 0.5)
    assert row["kiln_first_over_limit"] == pytest.approx(5.0 / row["limit_s"])
    assert "liger_dyt_fwdbwd_16384x4096" in realworld_ops.DEFAULT_OPS
    assert all(op.shape for op in realworld_ops.OPS.values())

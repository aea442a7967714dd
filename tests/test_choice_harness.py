"""``bench/choice_harness.py``, without a GPU: both arms' choices handed to
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
from support.kernels import add_kernel  # noqa: E402


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
    assert row["limit_s"] == pytest.approx(max(2.0, 3.0 / len(__import__("os").sched_getaffinity(0))) + 0.5)
    assert row["kiln_first_over_limit"] == pytest.approx(5.0 / row["limit_s"])
    assert "liger_dyt_fwdbwd_16384x4096" in realworld_ops.DEFAULT_OPS
    assert all(op.shape for op in realworld_ops.OPS.values())


# -- per kernel launch, under the tuner's own _bench --------------------------------------------


class _Stop(Exception):
    pass


def test_the_captured_key_is_the_one_tritons_own_run_computes() -> None:
    """Triton's real ``Autotuner.run`` looks the key up in its cache; a cache that records the
    key and stops the launch (no GPU here) shows the key ``triton_tuning_key`` computes."""
    import torch

    tuner = _tuner()
    looked_up: list[Any] = []

    class Recording(dict[Any, Any]):
        def __contains__(self, key: object) -> bool:
            looked_up.append(key)
            return True

        def __getitem__(self, key: Any) -> Any:
            raise _Stop

    tuner.cache = Recording()
    x = torch.ones(100)
    args = (x, x, torch.empty(100, dtype=torch.float16), 100)
    with pytest.raises(_Stop):
        tuner.run(*args, grid=(1,), warmup=False)
    assert looked_up == [choice_harness.triton_tuning_key(tuner, args, {"grid": (1,), "warmup": False})]
    assert looked_up[0] == (100, "torch.float32", "torch.float32", "torch.float16")


def test_capture_records_the_first_launch_per_kernel_and_key_and_puts_run_back() -> None:
    import torch

    tuner = _tuner()
    calls: list[Any] = []
    tuner.run = lambda *a, **k: calls.append((a, k))  # the launch itself needs a GPU
    fake_run = tuner.run
    x = torch.ones(8)
    capture = choice_harness.Capture(lambda t: "add")
    with capture.during([tuner]) as launches:
        tuner[(1,)](x, x, x, 1024)
        tuner[(2,)](x, x, x, 1024)  # the same key: the first launch stands for it
        tuner[(4,)](x, x, x, 4096)
    assert len(calls) == 3  # every launch still ran
    assert [(launch.name, launch.key) for launch in launches] == [
        ("add", (1024, "torch.float32", "torch.float32", "torch.float32")),
        ("add", (4096, "torch.float32", "torch.float32", "torch.float32")),
    ]
    assert launches[0].args == (x, x, x, 1024)
    assert launches[0].kwargs["grid"] == (1,)
    assert tuner.run is fake_run  # put back
    plain = _tuner()
    with choice_harness.Capture(lambda t: "p").during([plain]):
        assert "run" in vars(plain)
    assert "run" not in vars(plain)  # the class's run again


def _launch(tuner: Any, key: tuple[Any, ...]) -> Any:
    return choice_harness.Launch(tuner, "k", key, (), {})


def test_both_choices_alternate_per_launch_and_the_op_time_is_the_sum_of_medians() -> None:
    tuner = _tuner()
    own = list(tuner.configs)
    key_a, key_b, key_c = (1024,), (4096,), (8,)
    cj = realworld_child.config_json
    choices = {
        "kiln": {"k": [[repr(key_a), cj(own[1])], [repr(key_b), cj(own[2])]]},
        "triton": {"k": [[repr(key_a), cj(own[0])], [repr(key_b), cj(own[2])], [repr(key_c), cj(own[0])]]},
    }
    order: list[tuple[Any, int]] = []
    times = {0: iter([2.0, 2.0, 9.0, 2.0, 2.0]), 1: iter([1.0, 1.0, 1.0, 5.0, 1.0])}
    times[2] = iter([3.0, 3.1, 2.9, 3.0, 3.0])

    def bench(launch: Any, config: Any) -> float:
        index = own.index(config)
        order.append((launch.key, index))
        return next(times[index])

    launches = [_launch(tuner, key_a), _launch(tuner, key_b), _launch(tuner, key_c)]
    rows = choice_harness.time_kernel_choices(launches, choices, lambda t: own, cj, bench, rounds=3)
    a, b, c = rows
    # >= 5 rounds, A,B then B,A: drift hits both configs alike
    assert [i for k, i in order if k == key_a] == [1, 0, 0, 1, 1, 0, 0, 1, 1, 0]
    assert a["kiln_runs"] == [1.0, 1.0, 1.0, 5.0, 1.0]
    assert a["kiln_ms"] == 1.0
    assert a["triton_runs"] == [2.0, 2.0, 9.0, 2.0, 2.0]
    assert a["triton_ms"] == 2.0
    assert a["ratio"] == 0.5
    assert a["same_config"] is False
    assert a["kiln_config"] == cj(own[1])
    assert a["triton_config"] == cj(own[0])
    # the same config for both: timed once per round, one number for both (noise is no difference)
    assert [i for k, i in order if k == key_b] == [2] * 5
    assert b["same_config"] is True
    assert b["kiln_ms"] == b["triton_ms"] == 3.0
    assert b["ratio"] == 1.0
    assert "no chosen config" in c["error"]
    assert "kiln" in c["error"]
    total = choice_harness.sum_rows(rows)
    assert total["kiln_choice_ms_triton_harness"] == pytest.approx(1.0 + 3.0)
    assert total["triton_choice_ms_triton_harness"] == pytest.approx(2.0 + 3.0)
    assert total["kernel_launches_failed"] == 1
    assert total["kernels_same_config"] == 1


def test_a_config_is_timed_by_the_tuners_own_bench_as_tritons_autotuner_times_it() -> None:
    """``tuner_bench_ms`` (both benches' harness) goes through Triton's ``Autotuner._bench``: the
    tuner's ``do_bench`` with do_bench's quantiles (here a stand-in: no GPU), ``nargs`` set for
    its hooks, then cleared."""
    import torch

    tuner = _tuner()
    seen: list[Any] = []

    def do_bench(kernel_call: Any, quantiles: Any) -> list[float]:
        seen.append((quantiles, dict(tuner.nargs)))
        return [0.25, 0.2, 0.3]

    tuner.do_bench = do_bench  # the cached property's slot: Triton's own do_bench on a GPU
    x = torch.ones(8)
    launch = choice_harness.Launch(tuner, "k", (1024,), (x, x, x, 1024), {"grid": (1,), "warmup": False})
    assert choice_harness.tuner_bench_ms(launch, tuner.configs[3]) == 0.25
    assert seen[0][0] == (0.5, 0.2, 0.8)
    assert seen[0][1]["n"] == 1024
    assert tuner.nargs is None
    meta = {"grid": (1,), "warmup": False, "BLOCK": 64}  # a tuned meta-parameter given twice
    clash = choice_harness.Launch(tuner, "k", (1024,), (x, x, x, 1024), meta)
    with pytest.raises(ValueError, match="Conflicting meta-parameters"):
        choice_harness.tuner_bench_ms(clash, tuner.configs[0])


def test_the_markdown_lists_each_launch() -> None:
    row = {
        "op": "fla_chunk_gla_fwd",
        "choice_kernel_rows": [
            {
                "kernel": "fla.ops.x.chunk_fwd_kernel_h",
                "key": "(64,)",
                "kiln_config": {"kwargs": {"BK": 64}, "num_warps": 4, "num_stages": 4},
                "triton_config": {"kwargs": {"BK": 64}, "num_warps": 4, "num_stages": 4},
                "kiln_ms": 0.056,
                "triton_ms": 0.056,
                "ratio": 1.0,
                "same_config": True,
                "kiln_runs": [0.056] * 5,
                "triton_runs": [0.056] * 5,
            },
            {"kernel": "k2", "key": "(1,)", "kiln_config": None, "triton_config": None, "error": "no chosen"},
        ],
    }
    text = realworld.kernel_table([row])
    assert "| fla_chunk_gla_fwd | chunk_fwd_kernel_h | `(64,)` | BK=64, w4, s4 |" in text
    assert "same config: timed once" in text
    assert "| k2 |" in text
    assert "no chosen" in text


def test_capture_takes_the_key_the_tuners_own_run_looked_up() -> None:
    """A library's autotuner class may form its key its own way (the choices were stored under
    it): the key its run looked up in the choices' cache is the one recorded."""
    import torch

    tuner = _tuner()
    cj = realworld_child.config_json
    own = list(tuner.configs)
    custom = ("custom", 7)
    choice_harness.apply_choices(
        [tuner], {"k": [[repr(custom), cj(own[1])], ["(1,)", cj(own[2])]]}, lambda t: "k", cj, {}
    )

    def library_run(*args: Any, **kwargs: Any) -> None:
        assert custom in tuner.cache  # the library's own key, not Triton's form

    tuner.run = library_run
    x = torch.ones(8)
    with choice_harness.Capture(lambda t: "k").during([tuner]) as launches:
        tuner[(1,)](x, x, x, 1024)
    assert [launch.key for launch in launches] == [custom]
    assert choice_harness.chosen_config([[repr(custom), cj(own[1])]], custom, own, cj) is own[1]
    assert choice_harness.chosen_config([["(9,)", cj(own[3])]], custom, own, cj) is own[3]  # one key only
    assert choice_harness.chosen_config([["best_config", cj(own[4])]], custom, own, cj) is own[4]

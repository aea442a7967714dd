"""bench/realworld.py's baseline arm: the kiln arm on another checkout's ``src/`` in the same run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import realworld  # noqa: E402


def checkout(tmp_path: Path) -> Path:
    src = tmp_path / "base" / "src"
    (src / "triton_kiln").mkdir(parents=True)
    (src / "triton_kiln" / "__init__.py").write_text("")
    return src


def test_the_baseline_arm_runs_just_before_the_kiln_arm(tmp_path: Path) -> None:
    src = checkout(tmp_path)
    args = realworld.parse_args(
        ["--arms", "triton,kiln", "--baseline-src", str(src), "--baseline-commit", "abc"]
    )
    assert args.arms == ["triton", "kiln_baseline", "kiln"]
    assert args.baseline_src == src.resolve()
    assert realworld.meta(args)["baseline_commit"] == "abc"


def test_the_baseline_arm_imports_kiln_from_the_other_checkout_on_caches_of_its_own(tmp_path: Path) -> None:
    src = checkout(tmp_path)
    root = tmp_path / "op"
    baseline = realworld.arm_env(realworld.BASELINE, root, src=src)
    kiln = realworld.arm_env("kiln", root)
    assert baseline["PYTHONPATH"].split(os.pathsep)[0] == str(src)
    assert kiln["PYTHONPATH"].split(os.pathsep)[0] == str(realworld.SRC)
    for name in ("KILN_CACHE_DIR", "KILN_TUNING_DB", "TRITON_CACHE_DIR"):
        assert baseline[name] != kiln[name], name


def test_a_baseline_that_is_not_a_checkout_or_is_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        realworld.parse_args(["--baseline-src", str(tmp_path)])
    with pytest.raises(SystemExit):
        realworld.parse_args(["--arms", "kiln_baseline"])


def test_a_row_compares_the_kiln_arm_with_the_baseline(tmp_path: Path) -> None:
    arms = {"kiln_baseline": {"first_s": 4.0, "op_ms": 1.0}, "kiln": {"first_s": 3.0, "op_ms": 1.0}}
    row = realworld.summarize("liger_swiglu_fwd", arms, tmp_path)
    assert row["kiln_baseline_first_s"] == 4.0
    assert row["kiln_first_over_baseline"] == 0.75

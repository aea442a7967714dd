"""``kiln compile MODULE:KERNEL``: configs x targets into the kiln cache, a summary of failures by cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.cli import main

SCALE_SIGNATURE = "x_ptr=*fp32,out_ptr=*fp32,n=i32"


def _stored(cache: Path) -> int:
    root = cache / "artifacts-v2"
    return sum(1 for p in root.glob("*/*") if (p / "artifact.json").exists()) if root.exists() else 0


@pytest.mark.timeout(300)
def test_an_autotuned_kernels_own_configs_for_two_targets(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = CliRunner().invoke(
        main,
        ["compile", "farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--target", "cuda:90",
         "--target", "cuda:100", "--workers", "2", "--cache-dir", str(cache),
         "--json", str(tmp_path / "s.json")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "6 of 6 compiled on the local pool" in result.output
    assert _stored(cache) == 6  # 3 configs x 2 targets, each in the cache
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["compiled"] == 6
    assert summary["failed"] == {}
    ArtifactStore(cache)  # a valid kiln cache


@pytest.mark.timeout(300)
def test_failures_are_summarized_by_cause_and_fail_the_exit_only_with_strict(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # faults.faulty_scale with FAULT=4 makes Triton's compiler abort() (the crash matrix's hook).
    args = [
        "compile", "faults:faulty_scale", "--signature", SCALE_SIGNATURE, "--config", "BLOCK=64,FAULT=0",
        "--config", "BLOCK=64,FAULT=4,num_warps=2", "--config", "BLOCK=128,FAULT=0", "--preload", "faults",
        "--workers", "2", "--cache-dir", str(cache),
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "2 of 3 compiled" in result.output
    assert "1 failed: crashed: SIGABRT" in result.output
    assert "faulty_scale[BLOCK=64, FAULT=4, num_warps=2] cuda:90: compile of" in result.output
    strict = CliRunner().invoke(main, [*args, "--strict"])
    assert strict.exit_code == 1, strict.output
    assert "1 failed: crashed: SIGABRT" in strict.output


def test_bad_arguments_are_one_error_line(tmp_path: Path) -> None:
    runner = CliRunner()
    no_signature = runner.invoke(main, ["compile", "farm_kernels:tuned_scale"])
    assert no_signature.exit_code != 0
    assert "--signature is required" in no_signature.output
    bad_target = runner.invoke(
        main, ["compile", "farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--target", "sm90"]
    )
    assert bad_target.exit_code != 0
    assert "cuda:90" in bad_target.output
    missing = runner.invoke(main, ["compile", "no_such_module_here:k", "--signature", SCALE_SIGNATURE])
    assert missing.exit_code == 1
    assert "cannot import 'no_such_module_here'" in missing.output
    bundle = runner.invoke(
        main,
        [
            "compile",
            "farm_kernels:tuned_scale",
            "--signature",
            SCALE_SIGNATURE,
            "--bundle",
            str(tmp_path / "b"),
        ],
    )
    assert bundle.exit_code == 1
    assert "kiln bundle save" in bundle.output

"""``kiln tune`` on a real GPU: a ``triton.autotune``'d workload tuned through kiln, reported, bundled;
the bundle listed by ``kiln bundle show`` and run in a fresh process with Triton's compiler blocked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_bundle_gpu import _run_blocked

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]


def _kiln(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kiln ARGS`` in a fresh process, on this test's own kiln and Triton caches."""
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_TUNING_DB", "KILN_REMOTE_CACHE")}
    env.update(
        # kiln's and the tests' modules first; whatever the caller's path adds (a GPU machine's
        # extra site directory) after them
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH")])
        ),
        KILN_CACHE_DIR=str(tmp_path / "kiln-cache"),
        TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
    )
    return subprocess.run(
        [sys.executable, "-m", "triton_kiln", *args],
        capture_output=True, text=True, env=env, timeout=540, check=False, cwd=tmp_path,
    )  # fmt: skip


def test_tune_reports_and_bundles_and_the_bundle_runs_without_compiling(tmp_path: Path) -> None:
    bundle = tmp_path / "add.tgz"
    tuned = _kiln(tmp_path, "tune", "support.tune_gpu_workload:warm_up", "--bundle", str(bundle),
                  "--json", str(tmp_path / "s.json"), "--strict")  # fmt: skip
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert "tuned 2 key(s) of 1 kernel(s)" in tuned.stdout, tuned.stdout
    assert len(re.findall(r"^add_kernel  key .*: BLOCK=\d+, num_warps=\d", tuned.stdout, re.M)) == 2, (
        tuned.stdout
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert [run["kernel"] for run in summary["runs"]] == ["add_kernel", "add_kernel"]
    assert all(run["best_config"]["kwargs"]["BLOCK"] in (256, 1024) for run in summary["runs"])
    assert all(run["tried"] == 4 and run["failed"] == {} for run in summary["runs"])
    assert summary["compiles"]["compiled"] >= 1  # a fresh cache: compiled here
    assert summary["bundle"] == str(bundle)

    shown = _kiln(tmp_path, "bundle", "show", str(bundle))
    assert shown.returncode == 0, shown.stderr
    assert "add_kernel (" in shown.stdout
    assert shown.stdout.count("  key ") == 2, shown.stdout

    stdout = _run_blocked(bundle, 100_000)  # a fresh process, fresh cache, Triton's compiler blocked
    assert "OK" in stdout

    # Again on the same cache: the database's runs are reused, nothing tuned or compiled; --kernel
    # bundles what is recorded.
    again = _kiln(tmp_path, "tune", "support.tune_gpu_workload:warm_up", "--bundle", str(tmp_path / "again"),
                  "--kernel", "add_kernel", "--json", str(tmp_path / "again.json"))  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing was tuned" in again.stdout
    assert json.loads((tmp_path / "again.json").read_text())["compiles"]["compiled"] == 0
    _run_blocked(tmp_path / "again", 100_000)


def test_a_failing_workload_keeps_what_it_tuned(tmp_path: Path) -> None:
    bundle = tmp_path / "add"
    result = _kiln(tmp_path, "tune", "support.tune_gpu_workload:warm_up_then_fail", "--bundle", str(bundle))
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "Error: support.tune_gpu_workload:warm_up_then_fail raised RuntimeError: the workload failed"
        in result.stderr
    )
    assert "tuned 2 key(s) of 1 kernel(s)" in result.stdout
    assert f"written: {bundle}" in result.stdout
    _run_blocked(bundle, 4096)

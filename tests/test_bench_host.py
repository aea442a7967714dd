"""The benches record the host they ran on (``bench/machine_state.host``): two H200 hosts'
compile floors can differ by 28-51%, and a run that does not name its CPU cannot be compared."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import machine_state  # noqa: E402
import realworld  # noqa: E402


def test_the_host_names_its_cpu_and_its_load() -> None:
    host = machine_state.host()
    assert host["logical_cpus"] >= 1
    assert len(host["load_avg"]) == 3
    assert all(load >= 0 for load in host["load_avg"])
    cpuinfo = Path("/proc/cpuinfo").read_text()
    if "model name" in cpuinfo:  # x86 and most others; some arm64 kernels leave it out
        assert host["cpu_model"]
        assert host["cpu_model"] in cpuinfo


def test_the_host_says_whether_its_processes_find_torchs_bytecode(tmp_path: Path) -> None:
    """Without bytecode every new process compiles torch from source (the GPU machine's image):
    the record tells a run there from one with the session's cache, read where imports read it."""
    pytest.importorskip("torch")
    script = (
        f"import sys; sys.path.insert(0, {str(BENCH)!r}); import json, machine_state; "
        "print(json.dumps(machine_state.bytecode()))"
    )

    def state(**env: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        )
        return dict(json.loads(done.stdout))

    empty = state(PYTHONPYCACHEPREFIX=str(tmp_path / "empty"), PYTHONDONTWRITEBYTECODE="1")
    assert empty == {"dont_write": True, "cache_prefix": str(tmp_path / "empty"), "torch_cached": False}
    import torch

    prefix = tmp_path / "filled"
    subprocess.run(
        [sys.executable, "-m", "py_compile", torch.__file__],
        check=True,
        env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)},
    )
    filled = state(PYTHONPYCACHEPREFIX=str(prefix))
    assert filled["torch_cached"] is True
    assert filled["cache_prefix"] == str(prefix)
    assert machine_state.host()["bytecode"] == machine_state.bytecode()


def test_realworlds_meta_carries_the_host() -> None:
    meta = realworld.meta(argparse.Namespace(repeats=1, dry_run=True, baseline_src=None, commit=None))
    assert meta["host"]["logical_cpus"] == machine_state.host()["logical_cpus"]
    assert meta["cores"] >= 1


def test_the_commit_is_the_checkouts_head_or_none_in_a_copied_tree(tmp_path: Path) -> None:
    """A run names the commit it measured; a tree copied without ``.git`` (the GPU machine's)
    names none rather than a wrong one, and its runs pass ``--commit``."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCH.parent, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not head:
        pytest.skip("the checkout is not a git repository")
    assert machine_state.commit() == head
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", machine_state.commit(mark_dirty=True) or "")
    copy = tmp_path / "tree" / "bench"
    copy.parent.mkdir()
    shutil.copytree(BENCH, copy, ignore=shutil.ignore_patterns("results", "__pycache__"))
    script = (
        f"import sys; sys.path.insert(0, {str(copy)!r}); import machine_state; print(machine_state.commit())"
    )
    env = {"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "None"

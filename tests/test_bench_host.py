"""The benches record the host they ran on (``bench/machine_state.host``): two H200 hosts'
compile floors can differ by 28-51%, and a run that does not name its CPU cannot be compared."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def test_realworlds_meta_carries_the_host() -> None:
    meta = realworld.meta(argparse.Namespace(repeats=1, dry_run=True, baseline_src=None))
    assert meta["host"]["logical_cpus"] == machine_state.host()["logical_cpus"]
    assert meta["cores"] >= 1

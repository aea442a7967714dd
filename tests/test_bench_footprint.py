"""bench/footprint.py without a GPU: its plan, and the rows of a process that called nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import footprint  # noqa: E402


def _result(first_call_s: float | None, mib: float, processes: int) -> dict[str, Any]:
    measured = {"child_gpu_mib": mib, "child_processes": processes, "children": [], "caller_gpu_mib": 500.0}
    return {"first_call_s": first_call_s, "op_ms": None if first_call_s is None else 0.3, "after": measured}


def test_a_process_that_calls_nothing_has_no_times_and_its_row_prints() -> None:
    kiln = footprint.figures([_result(None, 520.0, 18)])
    stock = footprint.figures([_result(None, 0.0, 0)])
    assert (kiln["first_call_s"], kiln["op_ms"], kiln["first_call_s_max"]) == (None, None, None)
    row = footprint.row("fresh", kiln, stock, "measured")
    line = footprint.table([row]).splitlines()[-1]
    assert line.split()[:5] == ["fresh", "520", "18", "-", "-"]


def test_times_are_the_median_of_the_processes_that_called() -> None:
    both = footprint.figures([_result(1.0, 0.0, 0), _result(3.0, 0.0, 0), _result(None, 0.0, 0)])
    assert (both["first_call_s"], both["first_call_s_max"]) == (2.0, 3.0)


def test_the_plan_has_the_fresh_arms(capsys: Any) -> None:
    assert footprint.main(["--dry-run"]) == 0
    assert "kiln fresh (+ fresh_idle)" in capsys.readouterr().out


def test_a_fresh_row_taken_after_the_idle_close_stops_the_run() -> None:
    """What install() starts ahead closes KILN_IDLE_S after it: a row taken later shows nothing
    held whatever kiln started, so the run refuses it instead of recording 0 and 0."""
    late = _result(None, 0.0, 0)
    late["after"]["since_install_s"] = 8.4
    with pytest.raises(footprint.ArmFailed, match="raise --fresh-idle-s"):
        footprint.check_before_idle_close(late, 5.0)
    late["after"]["since_install_s"] = 4.2
    footprint.check_before_idle_close(late, 5.0)


def test_a_fresh_idle_time_of_zero_is_refused(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        footprint.parse_args(["--fresh-idle-s", "0"])
    assert "--fresh-idle-s must be more than 0" in capsys.readouterr().err

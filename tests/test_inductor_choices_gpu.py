"""kiln.inductor changes no max-autotune decision: given the same timings, stock Inductor and
Inductor with kiln's pool consider the same template choices, drop the same ones, choose the
same one and count the same autotunes and precompilation failures
(``support/inductor_choice_log.py`` runs each arm in a fresh process with fresh caches, stock
on the path it takes before its process pool has warmed up). Were kiln's pool to take the
choices' precompile, a choice that cannot load (on an H100, a 128x128x128, 4-stage mm config
of this fixture) would reach the benchmarks instead of being dropped, and this test fails.

Run: ``python -m pytest tests/test_inductor_choices_gpu.py -q -p no:cacheprovider`` (needs a CUDA GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

TESTS = Path(__file__).resolve().parent


def _arm(arm: str, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{arm}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp / f"{arm}-inductor"),
        "TRITON_CACHE_DIR": str(tmp / f"{arm}-triton"),
        "KILN_CACHE_DIR": str(tmp / f"{arm}-kiln"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "support.inductor_choice_log", arm, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{arm}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_kiln_considers_drops_and_chooses_the_template_choices_stock_does(tmp_path: Path) -> None:
    stock = _arm("stock", tmp_path)
    kiln = _arm("kiln", tmp_path)
    assert stock["autotunes"], "stock autotuned nothing: the fixture no longer exercises max-autotune"
    assert len(kiln["autotunes"]) == len(stock["autotunes"]), (kiln["counters"], stock["counters"])
    for i, (theirs, ours) in enumerate(zip(stock["autotunes"], kiln["autotunes"], strict=True)):
        for name in ("considered", "failed"):
            only_kiln = sorted(set(ours[name]) - set(theirs[name]))
            only_stock = sorted(set(theirs[name]) - set(ours[name]))
            assert (only_kiln, only_stock) == ([], []), f"autotune {i}, {name}: (kiln only, stock only)"
        assert ours["chosen"] == theirs["chosen"], f"autotune {i}"
    assert kiln["counters"] == stock["counters"]
    assert kiln["max_abs_error"] <= max(2 * stock["max_abs_error"], 0.05)

"""A library's own search on kiln, on a GPU: FlagGems' ``flag_gems.mm`` on an N = 50257 bf16 LM
head (``triton.set_allocator`` + device-side descriptors) runs its own ``LibTuner`` search with
kiln installed (a process of its own: tests/support/flaggems_libtuner_drive.py --gpu). The
LibTuner pattern itself (``OwnSearch``, timed in the GPU sandbox, where an illegal memory access
ends that config only) is tests/test_library_search.py's, on both backends.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def test_flaggems_mm_lm_head_is_searched_through_kiln() -> None:
    if importlib.util.find_spec("flag_gems") is None:
        pytest.skip("flag_gems is not installed")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "flaggems_libtuner_drive.py"), "--gpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=560,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-4000:]
    (run,) = lines
    print(json.dumps(run, indent=1))
    assert run["kiln_class"]
    assert run["close_to_torch"], run["max_abs_diff_vs_fp32"]
    assert run["second_call_equal"]
    statuses = {v[0] for v in run["searched"].values()}
    assert len(run["searched"]) == 22, run["searched"]
    assert "ok" in statuses
    assert run["pool_submitted"] >= 22  # kiln's pool compiled the search's configs
    assert run["pool_compiled"] + run["pool_disk_hits"] >= 22
    assert "LibTuner drives its own search" in proc.stderr
    # FlagGems' launch (Triton's JIT) loaded the winner kiln wrote into Triton's cache
    assert run["jit_kernels_asm"] == [["cubin"]], run["jit_kernels_asm"]

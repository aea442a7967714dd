"""A library's own search on kiln, on a GPU: the LibTuner pattern and FlagGems' real ``mm``.

``OwnSearch`` (tests/test_library_search.py) drives its own search through ``self._bench``;
kiln compiles every config in its pool and times each in the GPU sandbox, where an illegal
memory access ends that config only; a compiler abort ends its compile only. FlagGems'
``flag_gems.mm`` on an N = 50257 bf16 LM head (``triton.set_allocator`` + device-side
descriptors) runs its own ``LibTuner`` search with kiln installed (a process of its own:
tests/support/flaggems_libtuner_drive.py --gpu).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def test_the_library_pattern_is_timed_in_the_sandbox(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    from support import faults
    from test_library_search import OwnSearch

    monkeypatch.setenv("KILN_BENCH_TIMEOUT_S", "15")
    pool = make_pool(workers=4, preload=["support.faults"])
    configs = [triton.Config({"BLOCK": b, "FAULT": 0}, num_warps=4) for b in (128, 256, 1024)]
    configs += [triton.Config({"BLOCK": 256, "FAULT": f}, num_warps=4) for f in (1, 4)]  # IMA, abort
    tuner = OwnSearch(faults.faulty_scale, faults.faulty_scale.arg_names, configs, ["n"], None, None)
    tuner._pool = pool
    n = 1 << 22
    x = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * 3.0)  # the library launched a healthy winner
    assert tuner.best_config.kwargs["FAULT"] == 0
    assert pool.stats.submitted == 5
    (results,) = tuner.searched.values()
    status = {(r.config["kwargs"]["BLOCK"], r.config["kwargs"]["FAULT"]): r for r in results.values()}
    ima, abort = status[(256, 1)], status[(256, 4)]
    assert ima.status == "bench_crashed", ima
    assert "illegal" in (ima.reason or "").lower()
    assert abort.status == "crashed", abort
    assert "SIGABRT" in (abort.reason or "")
    assert tuner.configs_timings[configs[3]] == [math.inf] * 3
    assert tuner.configs_timings[configs[4]] == [math.inf] * 3
    for config in configs[:3]:
        p50, p20, p80 = tuner.configs_timings[config]
        assert 0 < p20 <= p50 <= p80 < 50.0  # ms, for 16 MiB in and out
    # the caller's CUDA context survived the illegal access (it happened in the sandbox)
    y = torch.ones(4, device="cuda") * 2
    assert float(y.sum()) == 8.0


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

"""bench/record_tuning.sh without a GPU: its recording machinery (tmux, or script(1)) around a
stand-in that draws kiln's real tuning progress bar over a few seconds.

On the GPU machine the script runs bench/record_tuning.py (a real tuning run) instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "record_tuning.sh"

pytestmark = pytest.mark.timeout(120)

STAND_IN = textwrap.dedent(
    """
    import logging, sys, time
    sys.path.insert(0, {src!r})
    from triton_kiln.autotuner.tuning_progress import TuningProgress
    from triton_kiln.tuning import ConfigResult

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with TuningProgress("fake_kernel", 8, enabled=None) as progress:  # shown: stderr is a terminal
        for i in range(8):
            time.sleep(0.4)
            progress.compiled_one(True)
            progress.record(ConfigResult(
                label=f"BLOCK={{64 << i}}, num_warps=4", config={{}}, status="ok", reason=None,
                compile_s=0.1, runtime_ms=1.0 + abs(i - 5), runtime_ms_p20=None, runtime_ms_p80=None,
                max_abs_diff=None, artifact_key=None))
        progress.finish(3.2)
    logging.getLogger("kiln.autotune").info("kiln: fake_kernel (4096,): tuned 8 configs on this call")
    """
)


def record(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN.format(src=str(REPO / "src")))
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "RECORD_CMD": f"{sys.executable} {stand_in}",
        "RECORD_WITH": how,
        "RECORD_LIMIT_S": "60",
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=100, check=False
    )
    return done, out


def leftovers(tmp_path: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if "kiln-record" in line or str(tmp_path) in line:
            found.append(proc)
    return found


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_tmux_recording_captures_the_bar_mid_run_and_at_the_end(tmp_path: Path) -> None:
    done, out = record(tmp_path, "tmux")
    assert done.returncode == 0, done.stdout + done.stderr
    mid = (out / "tuning-mid.txt").read_text()
    end = (out / "tuning-end.txt").read_text()
    assert "tuning fake_kernel: " in mid
    assert "tuning fake_kernel: 8/8" not in mid  # mid-run, not the end
    assert "tuned fake_kernel: 8 configs in 3.2 s: 8 timed, 0 failed" in end
    assert "  best 1 ms: BLOCK=2048, num_warps=4" in end
    assert "kiln: fake_kernel (4096,): tuned 8 configs on this call" in end
    assert "$ " + sys.executable in end  # the prompt line of the run
    frames = (out / "tuning-frames.txt").read_text()
    assert frames.count("=== ") >= 4
    assert all(len(line) <= 100 for line in frames.splitlines())  # a 100-column terminal
    assert (out / "tuning-raw.log").stat().st_size > 0
    assert "exit status of the runs: 0" in (out / "record.txt").read_text()
    assert not leftovers(tmp_path)


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1)")
def test_without_tmux_script_records_the_raw_stream(tmp_path: Path) -> None:
    done, out = record(tmp_path, "script")
    assert done.returncode == 0, done.stdout + done.stderr
    raw = (out / "tuning-raw.log").read_text(errors="replace")
    assert "tuning fake_kernel: 3/8" in raw  # the bar as it was drawn mid-run
    end = (out / "tuning-end.txt").read_text()
    assert "tuned fake_kernel: 8 configs in 3.2 s: 8 timed, 0 failed\n  best 1 ms: BLOCK=2048" in end
    assert "tuning fake_kernel:" not in end  # rendered as a terminal shows it: the bar was cleared
    mid = (out / "tuning-mid.txt").read_text()
    assert "tuning fake_kernel: " in mid
    assert "tuned fake_kernel" not in mid
    assert "script(1)" in (out / "record.txt").read_text()
    assert not leftovers(tmp_path)

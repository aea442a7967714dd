"""The HTML report (``kiln report --html``) on real tuning runs, and its screenshot for docs/.

No GPU needed: the runs are the H100 runs committed under bench/results/ (``kiln-tuning-run``
JSON, written by bench/autotune.py and bench/realworld.py), replayed into a fresh tuning
database through its API (``begin_run``, ``record``, ``finish_run``: the runs' start times become
the replay's; everything else is as measured). Then ``kiln report --html`` writes the page and
a headless Chromium (tests/support/browser.py) loads it, checks that it logged nothing, and captures the
top of the page::

    python bench/report_example.py                       # docs/report-screenshot.png
    python bench/report_example.py --html /tmp/report.html --height 6000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# (results file, kernel): oldest first, so the last is the page's first section
RUNS = (
    ("realworld-h100.json", "chunk_dplr_fwd_kernel_o"),
    ("autotune-h100.json", "softmax_kernel"),
    ("realworld-h100.json", "_dyt_bwd_kernel"),
    ("autotune-h100.json", "matmul_kernel"),
    ("realworld-h100.json", "gemm_INT_kernel"),
)


def _tuning_runs(data: Any, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(data, dict):
        if data.get("format") == "kiln-tuning-run":
            found.append(data["run"])
            return found
        for value in data.values():
            _tuning_runs(value, found)
    elif isinstance(data, list):
        for value in data:
            _tuning_runs(value, found)
    return found


def replay(database_path: Path) -> None:
    from triton_kiln.tuning import TuningDatabase, TuningRun

    with TuningDatabase(database_path) as database:
        for name, kernel in RUNS:
            runs = _tuning_runs(json.loads((ROOT / "bench" / "results" / name).read_text()), [])
            run = TuningRun.from_json(next(r for r in runs if r["kernel"] == kernel))
            run_id = database.begin_run(
                run.kernel, run.kernel_key, run.key_repr, run.device_name, run.capability,
                run.triton_version, run.default_label,
            )  # fmt: skip
            for result in run.results:
                database.record(run_id, result)
            database.finish_run(run_id, run.best_label, run.wall_s, run.first_result_s, split=run.split)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=None, help="keep the page here")
    parser.add_argument("--screenshot", type=Path, default=ROOT / "docs" / "report-screenshot.png")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=1800, help="pixels of the page's top to capture")
    args = parser.parse_args()
    from support import browser

    with tempfile.TemporaryDirectory(prefix="kiln-report-") as scratch:
        database = Path(scratch) / "tuning.sqlite3"
        replay(database)
        page = args.html or Path(scratch) / "report.html"
        command = [sys.executable, "-m", "triton_kiln", "report", "--db", str(database)]
        command += ["--html", str(page), "--limit", "3"]
        print(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())
        loaded = browser.load(
            page, ("document.body.scrollHeight",), width=args.width, screenshot=True,
            clip=(0, 0, args.width, args.height),
        )  # fmt: skip
    if loaded.errors():
        print(f"the page logged errors: {loaded.errors()}", file=sys.stderr)
        return 1
    assert loaded.screenshot is not None
    args.screenshot.write_bytes(loaded.screenshot)
    print(
        f"written: {args.screenshot} (top {args.height} of {loaded.values['document.body.scrollHeight']} px)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

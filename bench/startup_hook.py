"""What kiln's startup hook (``triton_kiln.pth``) costs every interpreter start.

Two fresh venvs with no packages: ``plain``, and ``hook``, whose site-packages holds what kiln's
wheel puts at its top (``triton_kiln.pth`` and ``_triton_kiln_startup.py``, copied from this
checkout, byte-compiled as pip does). ``python -c pass`` runs in each, in turn (plain, hook, plain,
hook...), and each pair gives a difference: with ``KILN_AUTOTUNE`` unset (the ``.pth`` line reads
one variable), then set to 1 (the line imports the hook, which puts its finder on
``sys.meta_path``). Wall time of the whole process, from outside; medians over the pairs.

    python bench/startup_hook.py --runs 300 --out /tmp/startup_hook.json
    python bench/make_benchmarks_page.py --add /tmp/startup_hook.json cpu2   # file it
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_state import commit, host

ROOT = Path(__file__).resolve().parents[1]
HOOK_FILES = ("triton_kiln.pth", "_triton_kiln_startup.py")


def make_venv(path: Path, hook: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
    site = Path(out.strip())
    if hook:
        for name in HOOK_FILES:
            shutil.copy2(ROOT / "src" / name, site / name)
        compileall.compile_file(str(site / "_triton_kiln_startup.py"), quiet=1)
    return python


def start(python: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - began


def arm(plain: Path, hook: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    """``runs`` pairs (the order alternates within pairs), after one unmeasured pair."""
    start(plain, env), start(hook, env)
    pairs = []
    for i in range(runs):
        if i % 2:
            b = start(hook, env)
            a = start(plain, env)
        else:
            a = start(plain, env)
            b = start(hook, env)
        pairs.append((a, b))
    plain_s = [a for a, _ in pairs]
    hook_s = [b for _, b in pairs]
    diffs_ms = [(b - a) * 1000 for a, b in pairs]
    return {
        "plain_median_ms": round(statistics.median(plain_s) * 1000, 3),
        "hook_median_ms": round(statistics.median(hook_s) * 1000, 3),
        "added_median_ms": round(statistics.median(diffs_ms), 3),
        "added_quartiles_ms": [round(q, 3) for q in statistics.quantiles(diffs_ms, n=4)],
        "ratio_median": round(statistics.median(b / a for a, b in pairs), 4),
        "pairs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="pairs of interpreter starts per arm")
    parser.add_argument("--out", type=Path, help="write the JSON result here too")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "KILN_AUTOTUNE")}
    with tempfile.TemporaryDirectory(prefix="kiln-startup-") as tmp:
        plain = make_venv(Path(tmp, "plain"), hook=False)
        hook = make_venv(Path(tmp, "hook"), hook=True)
        arms = {
            "KILN_AUTOTUNE unset": arm(plain, hook, base, args.runs),
            "KILN_AUTOTUNE=1": arm(plain, hook, {**base, "KILN_AUTOTUNE": "1"}, args.runs),
        }
    result = {
        "benchmark": "startup_hook",
        "what": "python -c pass with kiln's startup hook installed, against the same without it (paired)",
        "device": "cpu",
        "machine": host(),
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": commit(),
        "command": " ".join(["python", "bench/startup_hook.py", *sys.argv[1:]]),
        "arms": arms,
    }
    text = json.dumps(result, indent=2)
    print(text)
    print(f"\n{'arm':<22} {'plain ms':>9} {'hook ms':>9} {'added ms':>9} {'ratio':>7}")
    for name, row in arms.items():
        print(
            f"{name:<22} {row['plain_median_ms']:>9.2f} {row['hook_median_ms']:>9.2f} "
            f"{row['added_median_ms']:>9.2f} {row['ratio_median']:>7.3f}"
        )
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

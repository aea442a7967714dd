"""One process standing for a machine of its own, for the tests of what kiln's remote cache shares
between machines: its caches (Inductor's, Triton's, kiln's) under ``tmp_path/name``, the remote
cache ``remote``; it runs ``python -m MODULE ARGS`` from ``tests/`` and prints its report as the
last line of JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]


def run_machine(tmp_path: Path, name: str, remote: str, module: str, *args: str) -> dict[str, Any]:
    """The report of ``module`` run as machine ``name``; fails the test where it exits non-zero."""
    root = tmp_path / name
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "KILN_CACHE_DIR": str(root / "kiln"),
        "KILN_REMOTE_CACHE": remote,
        "PYTHONPATH": os.pathsep.join(
            [str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")]
        ),
    }
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report

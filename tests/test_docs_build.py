"""The docs site builds with ``mkdocs build --strict``: a broken link, a page left out of the nav
or an API-reference symbol that cannot be found fails (.ci/run builds it too, with
docs/requirements.txt). Skipped where mkdocs and mkdocstrings are not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -r docs/requirements.txt)")
    pytest.importorskip(
        "mkdocstrings", reason="mkdocstrings is not installed (pip install -r docs/requirements.txt)"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]

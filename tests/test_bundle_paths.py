"""``kiln bundle save`` as a new user meets it, through the real command in a fresh HOME:
``x.zip`` is refused in one line (no directory named x.zip), and an empty or missing cache is one
``Error: no tuned variants recorded in ...`` line that creates no cache directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _kiln(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_") and k != "XDG_CACHE_HOME"}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "triton_kiln", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path / "home"


def test_save_to_a_zip_is_refused_in_one_line(home: Path) -> None:
    work = home.parent / "work"
    line = _one_error_line(_kiln("bundle", "save", "x.zip", home=home, cwd=work))
    assert "x.zip: kiln writes a bundle as a directory or a .tar, .tar.gz or .tgz archive" in line
    assert "name it x.tar.gz" in line
    assert list(work.iterdir()) == []
    assert list(home.iterdir()) == []  # no ~/.cache/kiln either


@pytest.mark.parametrize("cache", ["missing", "empty"])
def test_save_from_an_empty_cache_creates_nothing(home: Path, cache: str) -> None:
    work = home.parent / "work"
    if cache == "empty":
        (home / ".cache" / "kiln").mkdir(parents=True)
    line = _one_error_line(_kiln("bundle", "save", "out.tgz", home=home, cwd=work))
    assert line.startswith(f"Error: no tuned variants recorded in {home / '.cache' / 'kiln'} (")
    assert list(work.iterdir()) == []
    made = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert made == ([] if cache == "missing" else [".cache", ".cache/kiln"])  # no artifacts-v2/

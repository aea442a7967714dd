"""CI runs the README's set-up-and-demo command in a fresh venv (.ci/run); ``.ci/readme_command.py``
finds it. The README must keep a ```bash block with a ``kiln demo`` command that installs kiln."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "readme_command.py"


def _command(readme: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "README.md"
    path.write_text(readme)
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_readme_has_an_install_and_demo_command() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    command = out.stdout.strip()
    assert "pip install" in command, command
    assert command.endswith("kiln demo"), command


def test_the_first_bash_block_with_the_demo_is_taken_up_to_the_demo(tmp_path: Path) -> None:
    readme = (
        "# x\n\n```python\nkiln demo\n```\n\n```bash\n# set up\npython -m pip install \\\n    -e .\n"
        "kiln demo --quick\n\n# tests\npython -m pytest\n```\n\n```bash\nkiln demo\n```\n"
    )
    out = _command(readme, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python -m pip install -e . && kiln demo --quick"


def test_no_demo_command_is_an_error(tmp_path: Path) -> None:
    out = _command("# x\n\n```bash\npython -m pytest\n```\n", tmp_path)
    assert out.returncode == 1
    assert "kiln demo" in out.stderr


def test_the_readmes_first_code_block_is_the_demo_and_the_test_command() -> None:
    # the first screen a user reads: set-up and demo, then the tests (.ci/run runs both)
    readme = (ROOT / "README.md").read_text()
    first = readme.split("```", 2)[1]
    lines = [line for line in first.splitlines()[1:] if line.strip()]
    assert first.splitlines()[0] == "bash", first
    assert lines == [
        "python -m pip install -e . && kiln demo",
        "python -m pip install -e . -r requirements-dev.txt && python -m pytest",
    ], lines

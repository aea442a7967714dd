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


def test_the_api_reference_covers_the_public_api() -> None:
    # docs/api.md documents each name of triton_kiln.__all__: a ``::: module.Name`` block, a
    # heading of its own, or (for the errors) the triton_kiln.errors block
    import re

    import triton_kiln
    from triton_kiln import errors

    page = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: [\w.]*?(\w+)$", page, re.MULTILINE))
    documented |= {
        word
        for heading in re.findall(r"^### (.+)$", page, re.MULTILINE)
        for word in re.findall(r"\w+", heading)
    }
    if "errors" in documented:
        documented |= {name for name in vars(errors) if isinstance(getattr(errors, name), type)}
    missing = sorted(set(triton_kiln.__all__) - documented - {"__version__"})
    assert not missing, f"add these to docs/api.md: {missing}"

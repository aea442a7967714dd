"""``KILN_AUTOTUNE=1 python -c "import triton, mykern"`` routes with no ``import triton_kiln``.

kiln's wheel (and an editable install) puts ``triton_kiln.pth`` in site-packages; with the variable
set, its line imports ``_triton_kiln_startup``, whose finder routes ``triton.autotune`` through kiln
once Triton is imported. Real installs in fresh venvs (a built wheel, ``pip install -e``), real
interpreter starts; the finder's own cases run from the checkout's ``src``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support.wheel_build import ROOT, build_wheel, clean_env, copy_project, install_in_venv

MYKERN = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def add(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n), mask=i < n)
"""

PROBE = """
import json, sys, warnings
warnings.simplefilter("always")
import triton, mykern
print("FOUND", json.dumps({
    "kernel": type(mykern.add).__module__,
    "autotune": triton.autotune.__module__,
    "hook": "_triton_kiln_startup" in sys.modules,
    "kiln": getattr(sys.modules.get("triton_kiln"), "__file__", None),
    "triton_loader": type(triton.__loader__).__name__,
    "spec_loader": type(triton.__spec__.loader).__name__,
    "meta_path": [getattr(f, "__name__", type(f).__name__) for f in sys.meta_path],
}))
"""


def probe(python: str, tmp_path: Path, code: str = PROBE, **env: str) -> tuple[dict[str, Any], str]:
    """Run ``code`` (beside ``mykern.py``) in a fresh ``python``; what it found, and its stderr."""
    (tmp_path / "mykern.py").write_text(MYKERN)
    full = clean_env(KILN_CACHE_DIR=str(tmp_path / "cache"), **env)
    if "PYTHONPATH" in env:
        full["PYTHONPATH"] = env["PYTHONPATH"]
    result = subprocess.run(
        [python, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("FOUND "))
    return json.loads(line.removeprefix("FOUND ")), result.stderr


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=clean_env(), check=True
    )
    return Path(out.stdout.strip())


def assert_routed(found: dict[str, Any]) -> None:
    assert found["kernel"].startswith("triton_kiln."), found  # mykern's kernel is kiln's Autotuner
    assert found["autotune"].startswith("triton_kiln."), found
    assert found["triton_loader"] == found["spec_loader"] == "SourceFileLoader", found  # Triton's own
    assert "RouteOnTritonImport" not in found["meta_path"], found  # the finder took itself off


def assert_not_routed(found: dict[str, Any]) -> None:
    assert found["kernel"].startswith("triton."), found
    assert found["autotune"].startswith("triton."), found
    assert not found["hook"], found  # the .pth line imported nothing
    assert found["kiln"] is None, found


@pytest.mark.slow  # a wheel build and a venv: about 15 s on 2 cores
@pytest.mark.skipif(shutil.which("cc") is None, reason="building the wheel needs a C compiler")
def test_the_installed_wheel_routes_triton_autotune_with_no_import_of_kiln(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    wheel, _ = build_wheel(tmp_path_factory.mktemp("wheel"))
    python = install_in_venv(wheel, tmp_path / "venv")
    site = site_packages(python)
    assert (site / "triton_kiln.pth").read_text() == (ROOT / "src" / "triton_kiln.pth").read_text()
    found, stderr = probe(str(python), tmp_path, KILN_AUTOTUNE="1")
    assert_routed(found)
    assert Path(found["kiln"]).is_relative_to(site), found  # the venv's kiln, imported by the hook
    assert "Warning" not in stderr, stderr
    for off in ({}, {"KILN_AUTOTUNE": "0"}, {"KILN_AUTOTUNE": ""}):
        assert_not_routed(probe(str(python), tmp_path, **off)[0])


@pytest.mark.slow  # an editable install in a venv: about 10 s on 2 cores
def test_an_editable_install_routes_triton_autotune_with_no_import_of_kiln(tmp_path: Path) -> None:
    """``pip install -e``: setuptools' editable wheel gets the ``.pth`` too (setup.py's build_py)."""
    project = copy_project(tmp_path / "project")
    python = install_in_venv(project, tmp_path / "venv", editable=True)
    site = site_packages(python)
    assert (site / "triton_kiln.pth").is_file(), sorted(p.name for p in site.iterdir())
    found, _ = probe(str(python), tmp_path / "project", KILN_AUTOTUNE="1")
    assert_routed(found)
    assert Path(found["kiln"]).is_relative_to(project / "src"), found  # the editable source
    assert_not_routed(probe(str(python), tmp_path / "project")[0])


# The finder's own cases, from the checkout's src: the .pth line's effect is an import of the module.
SRC = str(ROOT / "src")
ARMED = "import _triton_kiln_startup\n"


def test_the_pth_line_imports_the_hook_only_when_kiln_autotune_is_set(tmp_path: Path) -> None:
    line = (ROOT / "src" / "triton_kiln.pth").read_text()
    assert line.count("\n") == 1, line  # one line,
    assert line.startswith("import os;"), line  # which site exec()s
    code = f"import sys; exec({line!r}); print('FOUND', int('_triton_kiln_startup' in sys.modules))"
    for value, armed in (("1", 1), ("abc", 1), ("0", 0), ("", 0), (None, 0)):
        env = {"PYTHONPATH": SRC} if value is None else {"PYTHONPATH": SRC, "KILN_AUTOTUNE": value}
        full = clean_env(**env)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=tmp_path, check=True
        ).stdout
        assert f"FOUND {armed}" in out, (value, out)


def test_the_hook_routes_on_the_first_import_of_triton(tmp_path: Path) -> None:
    found, stderr = probe(sys.executable, tmp_path, ARMED + PROBE, KILN_AUTOTUNE="1", PYTHONPATH=SRC)
    assert_routed(found)
    assert "Warning" not in stderr, stderr


def test_with_kiln_imported_first_the_hook_only_steps_aside(tmp_path: Path) -> None:
    """``import triton_kiln`` routes by itself (and imports Triton to do so): no second routing."""
    code = ARMED + "import triton_kiln\n" + PROBE
    found, stderr = probe(sys.executable, tmp_path, code, KILN_AUTOTUNE="1", PYTHONPATH=SRC)
    assert_routed(found)
    assert "Warning" not in stderr, stderr


def test_a_kiln_that_cannot_be_imported_warns_and_leaves_triton_working(tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "triton_kiln"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('kiln is broken here')\n")
    code = ARMED + PROBE
    path = os.pathsep.join([str(broken.parent), SRC])
    found, stderr = probe(sys.executable, tmp_path, code, KILN_AUTOTUNE="1", PYTHONPATH=path)
    assert found["autotune"].startswith("triton."), found  # Triton's autotuner, and import triton worked
    assert "RuntimeWarning: kiln: KILN_AUTOTUNE is set, but importing triton_kiln" in stderr, stderr
    assert "kiln is broken here" in stderr, stderr

"""kiln's C launcher ships prebuilt in the wheel; the build at first use is only the fallback.

A real ``pip wheel`` of the project (offline, this Python) is unpacked the way an install puts
it in site-packages, and fresh processes import kiln from there: with the prebuilt launcher and
no C compiler reachable (nothing is built); without it, or with one that is unusable (built for
another Python, built from another ``_kiln_launch.c``), kiln builds its own as before and says
why; with neither, the launcher is unavailable and the error gives both reasons.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support.wheel_build import (
    LAUNCHER,
    build_wheel,
    clean_env,
    install_in_venv,
    launcher_files,
    no_compiler_env,
    unpack,
)

pytestmark = [
    pytest.mark.slow,  # about 20 s on 2 cores: two wheel builds, a venv, nine fresh processes
    pytest.mark.skipif(shutil.which("cc") is None, reason="building the wheel needs a C compiler"),
]

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

PROBE = """
import json, logging, shutil
logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(levelname)s %(message)s")
import triton_kiln
from triton_kiln.launch import native
found = {"package": triton_kiln.__file__, "compilers": [c for c in ("cc", "gcc", "clang") if shutil.which(c)]}
try:
    module = native.native()
    found.update(loaded=native.loaded_path(), key=repr(module.call_key((3, 2.5), b"ss")))
except native.NativeBuildError as exc:
    found["error"] = str(exc)
found["fallback"] = native.fallback_reason()
print("FOUND", json.dumps(found))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))[0]


@pytest.fixture
def site(wheel: Path, tmp_path: Path) -> Path:
    return unpack(wheel, tmp_path / "site")


def _probe(
    site: Path, tmp_path: Path, env: dict[str, str] | None = None, python: str = sys.executable
) -> tuple[dict[str, Any], str]:
    """Run PROBE in a fresh process importing kiln from ``site``; what it found, and its log."""
    env = dict(os.environ if env is None else env)
    if python == sys.executable:
        env["PYTHONPATH"] = str(site)  # not the checkout's src
    else:
        env.pop("PYTHONPATH", None)  # a venv: kiln is installed there
    env["KILN_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run(
        [python, "-c", textwrap.dedent(PROBE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("FOUND "))
    found = json.loads(line.removeprefix("FOUND "))
    assert Path(found["package"]).is_relative_to(site), found  # kiln came from the unpacked wheel
    return found, result.stderr


def test_the_wheel_holds_the_launcher_built_for_this_python(wheel: Path) -> None:
    assert launcher_files(wheel) == [LAUNCHER + SUFFIX]
    assert "-none-any" not in wheel.name  # a platform wheel: it holds compiled code
    assert f"cp{sys.version_info.major}{sys.version_info.minor}" in wheel.name


def test_the_prebuilt_launcher_loads_with_no_compiler_reachable(site: Path, tmp_path: Path) -> None:
    env = no_compiler_env(tmp_path / "bin", cc="/nonexistent")
    found, log = _probe(site, tmp_path, env)
    assert found["compilers"] == []
    assert "error" not in found, found["error"]
    assert found["loaded"] == str(site / (LAUNCHER + SUFFIX))
    assert found["fallback"] is None
    assert found["key"].startswith("(")
    assert not (tmp_path / "cache" / "native").exists()  # nothing was built
    assert "kiln.launch" not in log


def test_the_wheel_installed_in_a_venv_loads_its_prebuilt_launcher_with_no_compiler(
    wheel: Path, tmp_path: Path
) -> None:
    """What a user gets: ``pip install`` of the wheel into a fresh venv, then kiln with no C compiler."""
    python = install_in_venv(wheel, tmp_path / "venv")
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
            capture_output=True,
            text=True,
            env=clean_env(),
            check=True,
        ).stdout.strip()
    )
    env = no_compiler_env(tmp_path / "bin", cc="/bin/false")
    found, log = _probe(site, tmp_path, env, python=str(python))
    assert found["compilers"] == []
    assert "error" not in found, found["error"]
    assert found["loaded"] == str(site / (LAUNCHER + SUFFIX))
    assert found["fallback"] is None
    assert not (tmp_path / "cache" / "native").exists()
    assert "kiln.launch" not in log


def test_a_sandbox_process_loads_the_prebuilt_launcher_by_its_import_name(site: Path, tmp_path: Path) -> None:
    """The native sandbox is handed ``loaded_path()`` and loads that file (``load_path``)."""
    code = f"""
    import sys
    from triton_kiln.launch import native
    module = native.load_path({str(site / (LAUNCHER + SUFFIX))!r})
    assert module is sys.modules[native.PREBUILT_MODULE], module
    assert native.native() is module
    print("SAME")
    """
    env = {**os.environ, "PYTHONPATH": str(site), "KILN_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, check=False
    )
    assert "SAME" in result.stdout, result.stdout + result.stderr


def test_without_the_prebuilt_launcher_kiln_builds_its_own(site: Path, tmp_path: Path) -> None:
    (site / (LAUNCHER + SUFFIX)).unlink()
    found, log = _probe(site, tmp_path)
    assert "error" not in found, found["error"]
    assert Path(found["loaded"]).parent == tmp_path / "cache" / "native"
    assert "has no prebuilt launcher" in found["fallback"]
    assert "LOG kiln.launch INFO kiln: this install of kiln has no prebuilt launcher" in log


def test_with_neither_the_launcher_is_unavailable_and_says_why(site: Path, tmp_path: Path) -> None:
    (site / (LAUNCHER + SUFFIX)).unlink()
    found, _ = _probe(site, tmp_path, no_compiler_env(tmp_path / "bin", cc="/nonexistent"))
    assert "no C compiler found" in found["error"]
    assert "has no prebuilt launcher" in found["error"]


def test_a_prebuilt_launcher_built_from_another_source_is_not_used(site: Path, tmp_path: Path) -> None:
    """An editable install whose C source was edited after the launcher was built in place."""
    source = site / "triton_kiln" / "launch" / "_kiln_launch.c"
    source.write_text(source.read_text() + "/* edited after the build */\n")
    found, log = _probe(site, tmp_path)
    assert "built from another _kiln_launch.c" in found["fallback"]
    assert Path(found["loaded"]).parent == tmp_path / "cache" / "native"
    assert "LOG kiln.launch INFO kiln: the prebuilt launcher" in log


def test_a_prebuilt_launcher_for_another_python_is_not_used(site: Path, tmp_path: Path) -> None:
    built = site / (LAUNCHER + SUFFIX)
    built.rename(built.with_name("_kiln_launch.cpython-39-x86_64-linux-gnu.so"))
    found, log = _probe(site, tmp_path)
    assert "_kiln_launch.cpython-39-x86_64-linux-gnu.so) is not for this Python" in found["fallback"]
    assert Path(found["loaded"]).parent == tmp_path / "cache" / "native"
    assert "LOG kiln.launch INFO kiln: the prebuilt launcher" in log


def test_a_prebuilt_launcher_that_does_not_import_is_warned_of(site: Path, tmp_path: Path) -> None:
    (site / (LAUNCHER + SUFFIX)).write_bytes(b"not a shared object")
    found, log = _probe(site, tmp_path)
    assert "could not be imported" in found["fallback"]
    assert Path(found["loaded"]).parent == tmp_path / "cache" / "native"
    assert "LOG kiln.launch WARNING kiln: the prebuilt launcher" in log


def test_a_source_install_without_a_compiler_still_installs(tmp_path: Path) -> None:
    """The extension is optional: no compiler at install time gives a wheel without it."""
    env = no_compiler_env(tmp_path / "bin", cc="/bin/false")
    wheel, _ = build_wheel(tmp_path, env)
    assert launcher_files(wheel) == []

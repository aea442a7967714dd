"""kiln's wheel for the tests: built offline from a copy of the project, and a PATH with no C compiler."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = "triton_kiln/launch/_kiln_launch"

# cc, gcc-12, x86_64-linux-gnu-gcc-12, clang, clang++-17, c99, tcc, ...
_COMPILER = re.compile(r"^(?:.*-)?(?:cc|c\+\+|c89|c99|gcc|g\+\+|clang|clang\+\+|tcc|icx|icc)(?:-[\d.]+)?$")


def copy_project(dest: Path) -> Path:
    """What a source distribution holds: the build files and ``src`` (no caches, no in-place build)."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    )
    return dest


def build_wheel(work: Path, env: dict[str, str] | None = None) -> tuple[Path, str]:
    """``pip wheel`` kiln offline (``--no-build-isolation --no-index --no-deps``) with this Python.

    Builds from a copy of the project in ``work/project`` so the checkout gets no ``build/``
    directory (whose stale files would go into later wheels); returns the wheel and pip's output.
    """
    project = copy_project(work / "project")
    out = work / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps"]
    result = subprocess.run(
        [*command, "-w", str(out), str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout}\n{result.stderr}"
    wheels = sorted(out.glob("triton_kiln-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], result.stdout + result.stderr


def launcher_files(wheel: Path) -> list[str]:
    """The wheel's compiled launchers (``triton_kiln/launch/_kiln_launch*.so``)."""
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if n.startswith(LAUNCHER) and n.endswith(".so")]


def unpack(wheel: Path, dest: Path) -> Path:
    """The wheel's files, as an install puts them in site-packages."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest


def path_without_compilers(bin_dir: Path) -> str:
    """A PATH of one directory linking every command on this PATH except C compilers."""
    bin_dir.mkdir(parents=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if _COMPILER.match(entry.name) or link.exists() or link.is_symlink():
                continue  # a compiler, or shadowed by an earlier directory (as on PATH)
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(bin_dir)


def no_compiler_env(bin_dir: Path, cc: str) -> dict[str, str]:
    """This environment with no C compiler reachable: ``PATH`` without one, ``CC=cc``."""
    env = dict(os.environ)
    env["PATH"] = path_without_compilers(bin_dir)
    env["CC"] = cc
    for name in ("CXX", "LDSHARED", "CFLAGS", "CPPFLAGS", "LDFLAGS"):
        env.pop(name, None)
    return env


def _parent_paths() -> list[str]:
    """This interpreter's import directories (torch, triton, what PYTHONPATH carries) but the
    checkout's own (``src``, ``tests``)."""
    found = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and not Path(real).is_relative_to(ROOT) and real not in found:
            found.append(real)
    return found


def clean_env(**changes: str) -> dict[str, str]:
    """This environment without ``PYTHONPATH`` (no checkout's ``src``), with ``changes``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(changes)
    return env


def install_in_venv(wheel: Path, venv: Path, editable: bool = False) -> Path:
    """A fresh venv with ``wheel`` installed (``editable``: ``pip install -e`` of the project
    directory ``wheel``, built with this interpreter's setuptools); returns its python.

    ``python -m venv --system-site-packages --without-pip``, plus a ``.pth`` (and the module it
    imports) that appends this interpreter's package directories after the venv's own
    site-packages: torch and triton come along even where this interpreter is itself a venv
    (whose packages ``--system-site-packages`` does not reach), and the venv's ``triton_kiln``
    comes first. The wheel is installed by this
    interpreter's pip run as the venv's python, offline: ``--no-index --no-deps``.
    """
    env = clean_env()
    command = [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)]
    subprocess.run(command, check=True, capture_output=True, env=env, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    # A .pth line runs in a function's exec(), whose names a comprehension cannot see before
    # Python 3.12 (NameError: site): the loop lives in a module the .pth line imports.
    Path(purelib, "_kiln_test_parent_packages.py").write_text(
        f"import site, sys\n\nfor path in {_parent_paths()!r}:\n"
        "    if path not in sys.path:\n        site.addsitedir(path)\n"
    )
    Path(purelib, "_kiln_test_parent_packages.pth").write_text("import _kiln_test_parent_packages\n")
    # site.py reports a failing .pth line on stderr and starts anyway: a silent half-made venv
    started = subprocess.run(
        [str(python), "-c", "import triton"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, f"the test venv's python cannot import triton:\n{started.stderr}"
    assert "Error processing line" not in started.stderr, started.stderr
    install = [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--ignore-installed"]
    target = ["--no-build-isolation", "-e", str(wheel)] if editable else [str(wheel)]
    result = subprocess.run(
        [*install, "--no-cache-dir", *target],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    return python

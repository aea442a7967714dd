"""Every package kiln's code imports is declared in pyproject.toml: a core dependency, or (for
the optional integrations only) an extra. Read from the source (``ast``), lazy imports inside
functions included (imports under ``if TYPE_CHECKING:`` never run and are left out), so an
import that only a GPU code path reaches is caught on a machine without one."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KILN = ROOT / "src" / "triton_kiln"
OPTIONAL = {"torch": "torch", "helion": "helion", "redis": "redis", "ray": "ray"}
"""Imports allowed to be missing at run time (kiln checks for them), and the extra that installs each."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(path: Path) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _third_party_imports() -> dict[str, list[str]]:
    """Each imported top-level module outside the standard library and kiln -> the files importing it."""
    users: dict[str, list[str]] = {}
    for path in sorted(KILN.rglob("*.py")):
        for name in _top_level_imports(path):
            if name in sys.stdlib_module_names or name in ("triton_kiln", "__future__"):
                continue
            users.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return users


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-") for req in requirements}


def _project() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_every_import_of_kilns_code_is_declared() -> None:
    project = _project()
    core = _names(list(project["dependencies"]))  # type: ignore[call-overload]
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    undeclared = {}
    for module, files in _third_party_imports().items():
        dist = module.lower().replace("_", "-")
        if module in OPTIONAL:
            if dist not in _names(extras.get(OPTIONAL[module], [])):
                undeclared[module] = f"extra {OPTIONAL[module]!r} does not list it (imported by {files})"
        elif dist not in core:
            undeclared[module] = f"not a core dependency (imported by {files})"
    assert not undeclared, undeclared


def _dev_requirements() -> list[str]:
    """requirements-dev.txt's requirements, comments left out."""
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def test_requirements_dev_installs_what_the_tests_use() -> None:
    extras: dict[str, list[str]] = _project()["optional-dependencies"]  # type: ignore[assignment]
    assert "dev" not in extras, "what the tests need is requirements-dev.txt, not an extra users see"
    dev = _names(_dev_requirements())
    for extra in ("helion", "libraries", "redis", "ray"):
        assert _names(extras[extra]) - {"torch"} <= dev, (extra, extras[extra])
    assert {"pytest", "pytest-timeout", "torch"} <= dev
    assert "torch==2.13.0" in _dev_requirements()

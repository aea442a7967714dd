"""Each ``KILN_*`` variable is written once in kiln's source: a setting's in its declaration in
triton_kiln/settings.py, a name kiln sets in its own child processes as a constant of
triton_kiln/child_env.py; every other module gets the name from there."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

from triton_kiln import child_env, settings

SRC = Path(__file__).resolve().parents[1] / "src"
NAME_PATTERN = re.compile(r"KILN_[A-Z0-9_]+")


def kiln_names(root: Path) -> dict[str, list[str]]:
    """``{KILN_* name: every place a str literal of exactly it is written}`` under ``root``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and NAME_PATTERN.fullmatch(node.value)
            ):
                found[node.value].append(f"{path.relative_to(root)}:{node.lineno}")
    return dict(found)


@functools.cache
def _in_src() -> dict[str, list[str]]:
    return kiln_names(SRC)


def test_each_kiln_name_is_written_once_in_src() -> None:
    found = _in_src()
    assert len(found) >= 30, f"the scan found only {sorted(found)}: is it looking at src/?"
    twice = {name: places for name, places in found.items() if len(places) > 1}
    assert twice == {}, "import the name from its declaration (settings.py, child_env.py) instead"


def test_settings_and_child_names_are_written_where_they_are_declared() -> None:
    found = _in_src()
    for var in settings.variables().values():
        assert [place.partition(":")[0] for place in found[var]] == ["triton_kiln/settings.py"], var
    for var in child_env.INTERNAL_VARIABLES:
        assert [place.partition(":")[0] for place in found[var]] == ["triton_kiln/child_env.py"], var


def test_the_scan_sees_literals_and_leaves_prose(tmp_path: Path) -> None:
    # KILN_TEST_*: names of kiln's tests, never taken for a misspelt setting
    (tmp_path / "a.py").write_text(
        '"""KILN_TEST_DOC in a docstring is prose."""\n'
        'X = "KILN_TEST_ONE"\n'
        'Y = {"KILN_TEST_ONE": 1, "k": f"KILN_TEST_TWO={X}"}\n'
        'Z = "set KILN_TEST_THREE"\n'
    )
    assert kiln_names(tmp_path) == {"KILN_TEST_ONE": ["a.py:2", "a.py:3"]}

"""Boundaries by role: no module reads a private attribute that another module defines, and a
module longer than its role usually needs says why in docs/ARCHITECTURE.md.

Both checks read the source with ``ast``; each also runs on a sample it must flag, and each fails
on a tree where it finds nothing to read, so a rename cannot turn it into a check of nothing.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KILN = ROOT / "src" / "triton_kiln"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"

# Where a host's private names belong: each is read there against the versions its docstring names.
HOST_COMPAT = ("triton_compat/", "helion/compat.py")
# Underscored names that are public API of the standard library (os._exit, namedtuple's methods).
PUBLIC_UNDERSCORED = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_make"}
LONG_MODULE_LINES = 450


def _defined(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes, arguments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def private_reads(source: str) -> list[str]:
    """``owner._name`` where ``_name`` is not defined in this module and the owner is not
    ``self``, ``cls`` or ``super()``: a read of another module's private attribute."""
    tree = ast.parse(source)
    own = _defined(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in PUBLIC_UNDERSCORED or name in own:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def kiln_modules(*suffixes: str) -> list[Path]:
    modules = sorted(p for suffix in suffixes for p in KILN.rglob(f"*{suffix}"))
    assert len(modules) > 100 or suffixes != (".py",), f"only {len(modules)} modules under {KILN}"
    assert modules, f"no {suffixes} files under {KILN}: the check would read nothing"
    return modules


def test_no_module_reads_a_private_attribute_another_module_defines() -> None:
    hits = {
        rel: reads
        for path in kiln_modules(".py")
        if not (rel := str(path.relative_to(KILN))).startswith(HOST_COMPAT)
        and (reads := private_reads(path.read_text()))
    }
    assert not hits, hits


def test_the_private_read_check_flags_a_read_and_spares_a_modules_own() -> None:
    sample = (
        "class Pool:\n"
        "    def _get(self): ...\n"
        "def f(tuner, pool):\n"
        "    return tuner._margin, self._x, cls._y, super()._z(), os._exit, pool._get()\n"
    )
    assert private_reads(sample) == ["4: tuner._margin"]


# Basenames more than one package has, each for the same role in parallel packages.
SAME_ROLE = {
    "__init__.py": "a package",
    "errors.py": "a package's own error classes",
    "pool.py": "a pool's caller API (pool/, farm/)",
    "jobs.py": "a pool's jobs in flight and counters (pool/, farm/)",
    "schema.py": "the schema of the format a package stores (tuning/, bundle/)",
    "versions.py": "the host versions a compat module was read against (triton_compat/, helion/)",
}


def test_two_modules_share_a_name_only_for_the_same_role() -> None:
    names = Counter(path.name for path in kiln_modules(".py"))
    shared = {name for name, n in names.items() if n > 1}
    assert "__init__.py" in shared, "the scan found no package"
    assert not shared - set(SAME_ROLE), (
        f"modules of one name and different roles: {sorted(shared - set(SAME_ROLE))}"
    )


def long_modules() -> dict[str, int]:
    sizes = {str(p.relative_to(KILN)): len(p.read_text().splitlines()) for p in kiln_modules(".py", ".c")}
    assert max(sizes.values()) > 100, sizes
    return {name: n for name, n in sizes.items() if n > LONG_MODULE_LINES}


def reasons() -> dict[str, str]:
    """docs/ARCHITECTURE.md's "Long modules" list: ``- `path`: why``."""
    section = ARCHITECTURE.read_text().split("\n## Long modules\n", 1)
    assert len(section) == 2, f"{ARCHITECTURE.name} has no '## Long modules' section"
    body = section[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^- `([\w/]+\.(?:py|c))`: (.+)$", body, re.M))


def test_a_module_over_the_usual_length_says_why_in_the_architecture_page() -> None:
    given, long = reasons(), long_modules()
    missing = {name: n for name, n in long.items() if name not in given}
    assert not missing, f"over {LONG_MODULE_LINES} lines with no reason in {ARCHITECTURE.name}: {missing}"
    stale = sorted(set(given) - set(long))
    assert not stale, f"{ARCHITECTURE.name} gives reasons for modules that are no longer long: {stale}"


TESTS = ROOT / "tests"


def test_the_tests_folder_holds_tests_and_the_helpers_are_in_support() -> None:
    # Everything the tests share lives in tests/support/ and is imported as support.NAME: a kernel's
    # module name is part of what kiln records, so a helper imported under two names is two kernels.
    helpers = sorted(p.name for p in (TESTS / "support").glob("*.py") if p.name != "__init__.py")
    assert len(helpers) > 10, f"tests/support/ holds only {helpers}: the check would read nothing"
    assert (TESTS / "support" / "__init__.py").is_file()
    tests = sorted(TESTS.glob("test_*.py"))
    assert len(tests) > 50, f"only {len(tests)} test files in {TESTS}"
    loose = sorted(p.name for p in TESTS.glob("*.py") if not p.name.startswith(("test_", "conftest.")))
    assert not loose, f"helpers loose in tests/ (they belong in tests/support/): {loose}"
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))
    assert folders == ["support"], f"folders in tests/ besides support/: {folders}"

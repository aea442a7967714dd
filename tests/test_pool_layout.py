"""The compile side's layout: no import cycle between triton_kiln.compile, triton_kiln.artifacts,
triton_kiln.pool and triton_compat (lazy and type-only imports included), and Triton's internals
only in triton_compat. Each graph check also fails on an empty graph, so a rename of the package
cannot turn it into a check of nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import triton_kiln as kiln

SRC = Path(kiln.__file__).parent
COMPILE_SIDE = ("compile", "artifacts", "pool", "triton_compat", "framing", "procs", "files", "errors")


def _unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _is_module(name: str) -> bool:
    path = SRC.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _kiln_imports(path: Path) -> set[str]:
    """Every kiln module ``path`` imports, at any place in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("triton_kiln"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("triton_kiln"):
            subs = [f"{node.module}.{a.name}" for a in node.names]
            found.update(s for s in subs if _is_module(s))
            if not all(_is_module(s) for s in subs):
                found.add(node.module)
    return found


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name in COMPILE_SIDE:
        paths = sorted((SRC / name).rglob("*.py")) if (SRC / name).is_dir() else [SRC / f"{name}.py"]
        unit = f"triton_kiln.{name}"
        for path in paths:
            for target in _kiln_imports(path):
                if _unit(target) != unit:
                    edges.setdefault(unit, set()).add(_unit(target))
    return edges


def test_no_cycle_between_the_compile_side_packages() -> None:
    edges = _graph()
    side = {f"triton_kiln.{n}" for n in COMPILE_SIDE}
    assert {"triton_kiln.pool", "triton_kiln.compile", "triton_kiln.artifacts"} <= set(edges), edges

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), set()) & side:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    cycles = sorted(u for u in side if reaches(u, u))
    assert not cycles, f"import cycles through {cycles}: {edges}"
    assert "triton_kiln" not in set().union(*edges.values())  # nothing leans on the package's lazy API


def test_triton_compat_imports_only_errors_and_files() -> None:
    imported = set().union(*(_kiln_imports(path) for path in (SRC / "triton_compat").glob("*.py")))
    outside = {name for name in imported if not name.startswith("triton_kiln.triton_compat")}
    assert outside, "no import of triton_kiln found in triton_compat: the check reads nothing"
    assert outside <= {"triton_kiln.errors", "triton_kiln.files"}


def test_the_import_reader_sees_the_package(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import triton_kiln.errors\nfrom triton_kiln.pool import pool\nimport kilnx\n")
    assert _kiln_imports(source) == {"triton_kiln.errors", "triton_kiln.pool.pool"}


PRIVATE = re.compile(
    r"triton\.(?:[\w.]*\._\w+|_\w+)|runtime\.jit|create_function_from_signature|_init_handles|torch\._\w+"
    r"|CompiledKernel\(|metadata_group|\._pack_args|import knobs|get_cache_manager"
)

PACKAGES = [
    "compile",
    "artifacts",
    "pool",
    "demo",
    "autotuner",
    "sandbox",
    "tuning",
    "launch",
    "bundle",
    "helion",
    "inductor",
    "node",
]


@pytest.mark.parametrize("name", [*PACKAGES, "top-level modules"])
def test_triton_internals_stay_in_triton_compat(name: str) -> None:
    paths = (
        sorted(SRC.glob("*.py"))  # the package kiln.triton_compat is where they belong
        if name == "top-level modules"
        else sorted((SRC / name).rglob("*.py"))
    )
    hits = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in paths
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line) and not line.lstrip().startswith(("#", '"', "'"))
    ]
    assert not hits

"""kiln's packages import each other in one direction only, and the GPU sandbox stays small.

The graph is read from the source (``ast``), not from ``sys.modules``: every ``import`` and
``from ... import`` of every module under ``src/triton_kiln``, at module level and inside functions
(imports under ``if TYPE_CHECKING:`` are left out: they never run). Modules are collapsed to
kiln's packages (``kiln.pool``, ``kiln.autotuner``...) and top-level modules (``kiln.errors``...).

Inside a package the graph is one of modules, and there the imports under ``if TYPE_CHECKING:``
count too: a module that names another's type only for mypy still leans on it, so the modules of a
package read bottom-up.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
KILN = SRC / "triton_kiln"
PACKAGES = {p.name for p in KILN.iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    """The node a module collapses to: ``kiln.<package>``, ``kiln.<module>``, or ``kiln``."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, *, type_checking: bool = False) -> set[str]:
    """Every kiln module ``path`` imports (resolved; ``from triton_kiln import x`` -> ``kiln.x``);
    those under ``if TYPE_CHECKING:`` only with ``type_checking``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    own = _module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (SRC / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    SRC / Path(*candidate.split("."))
                ).is_dir()
                found.add(candidate if is_module else base)
    return {m for m in found if m == "triton_kiln" or m.startswith("triton_kiln.")}


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(KILN.rglob("*.py")):
        source = _unit(_module_name(path))
        targets = graph.setdefault(source, set())
        for module in _imports(path):
            target = _unit(module)
            if target != source:
                targets.add(target)
    return graph


def module_graph() -> dict[str, set[str]]:
    """Each module of each kiln package -> the modules of the same package it imports (at module
    level, inside functions and under ``if TYPE_CHECKING:``); a package's ``__init__`` is a node
    (``kiln.pool``) like any other."""
    graph: dict[str, set[str]] = {}
    for package in sorted(PACKAGES):
        own = f"triton_kiln.{package}"
        for path in sorted((KILN / package).glob("*.py")):
            source = _module_name(path)
            graph[source] = {
                m for m in _imports(path, type_checking=True) if m == own or m.startswith(f"{own}.")
            } - {source}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_every_package_and_function_level_imports() -> None:
    graph = package_graph()
    assert {f"triton_kiln.{p}" for p in PACKAGES} <= set(graph)
    assert "triton_kiln.bundle" in graph["triton_kiln.autotuner"]
    # An import inside a function counts (collect_recorded opens the artifact store)...
    assert "triton_kiln.artifacts.store" in _imports(KILN / "bundle" / "index.py")
    # ...one under `if TYPE_CHECKING:` does not (bench.py names a Candidate for mypy only).
    assert "triton_kiln.autotuner.compile_requests" not in _imports(KILN / "autotuner" / "bench.py")
    # `from triton_kiln import settings` is triton_kiln.settings; `from triton_kiln.version import ...` too.
    assert _imports(KILN / "bundle" / "format.py") >= {"triton_kiln.version", "triton_kiln.launch.spec"}


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_sandbox_imports_neither_the_pool_nor_the_autotuner() -> None:
    graph = package_graph()
    assert not {"triton_kiln.pool", "triton_kiln.autotuner"} & graph["triton_kiln.sandbox"]
    # ...not even through another package: the GPU sandbox process loads none of them.
    assert not {"triton_kiln.pool", "triton_kiln.autotuner"} & _reachable(graph, "triton_kiln.sandbox")


def test_no_cycle_between_packages() -> None:
    assert cycles(package_graph()) == []


def test_the_module_graph_sees_every_module_and_every_kind_of_import() -> None:
    graph = module_graph()
    assert {_module_name(p) for p in KILN.glob("*/*.py")} == set(graph)
    # A module-level import, one inside a function (rebuild imports gluon when it rebuilds), one
    # under `if TYPE_CHECKING:` (bench.py names a Candidate for mypy only)...
    assert "triton_kiln.pool.jobs" in graph["triton_kiln.pool.manager"]
    assert "triton_kiln.compile.gluon" in graph["triton_kiln.compile.rebuild"]
    assert "triton_kiln.autotuner.compile_requests" in graph["triton_kiln.autotuner.bench"]
    # ...and only the modules of the module's own package.
    assert "triton_kiln.artifacts.store" not in graph["triton_kiln.bundle.index"]


def test_the_modules_of_a_package_import_in_one_direction() -> None:
    """Inside every package: what a module names (even for mypy only) sits below it, so a package
    reads bottom-up; the autotuner's plan.py, say, at the bottom, its autotuner.py at the top."""
    graph = module_graph()
    assert graph  # an empty graph has no cycle, and proves nothing
    assert cycles(graph) == []


def test_the_autotuners_plan_sits_at_the_bottom() -> None:
    """plan.py (a run's plan and services) names a Candidate in its types, nothing else."""
    assert module_graph()["triton_kiln.autotuner.plan"] <= {"triton_kiln.autotuner.compile_requests"}


def test_no_part_of_the_autotuner_reads_the_autotuners_private_attributes() -> None:
    """The parts take the run's plan and services (autotuner/plan.py), not the autotuner."""
    private = re.compile(r"(?<![\w.])(?!self\.|cls\.)[a-z_]\w*\._[a-z]\w*")
    hits = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted((KILN / "autotuner").glob("*.py"))
        if path.name != "autotuner.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not hits

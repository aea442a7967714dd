"""A Python file imported as a module by its path: a ``bench/`` script (bench/ is no package),
for the tests of its parts, or a file a test writes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_file(path: Path, name: str) -> ModuleType:
    """``path`` executed as module ``name``, registered in ``sys.modules`` under it (dataclasses
    and pickling look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_bench(script: str, name: str | None = None) -> ModuleType:
    """``bench/<script>.py`` as module ``name`` (default: the script's name), with ``bench/`` on
    ``sys.path`` as when Python runs the script, so its imports of the other benches' modules
    resolve."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    return load_file(BENCH / f"{script}.py", name or script)

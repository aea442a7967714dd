"""A ``bench/`` script imported as a module, for the tests of its parts (bench/ is no package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(script: str, name: str | None = None) -> ModuleType:
    """``bench/<script>.py`` executed as module ``name`` (default: the script's), registered in
    ``sys.modules`` under it (dataclasses look their module up there)."""
    name = name or script
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{script}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""Run at the start of every Python process of a ``bench/inductor_faults.py`` run (this directory
is first on its ``PYTHONPATH``): installs the fault hook of :mod:`bench_fault` when
``BENCH_FAULT`` is set, then runs the ``sitecustomize`` this one shadows, if any."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("BENCH_FAULT"):
    import bench_fault

    bench_fault.install_from_env()
_chain()

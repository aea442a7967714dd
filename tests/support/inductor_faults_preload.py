"""Preload this module into a kiln pool (``CompilePool(preload=["support.inductor_faults_preload"])``) to
give its workers a compiler that faults for real on marked Inductor kernels.

A kernel whose name holds ``kilnfault_<mode>`` (``abort``, ``segv``, ``hang``: see
:func:`faults.detonate`) faults in its cubin stage (after LLVM, before ptxas) when compiled
with ``num_warps=8``; its other configs compile normally. With ``KILN_TEST_INDUCTOR_ABORT_PREFIX``
set (comma-separated prefixes of names Inductor makes: ``triton_tem_`` on torch 2.13, ``triton_mm``
on 2.11), every 8-warp compile of a kernel whose name starts with one of them aborts. With
``BENCH_FAULT`` set, ``bench/inductor_fault_hook/bench_fault.py``'s hook is installed too (its
``ima``: a store to address 0 added to the chosen kernels' PTX, so their binary compiles and its
launch is an illegal memory access). Only the pool's workers import this module: the test process
never installs a hook.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from support import faults
from triton_kiln.triton_compat import install_stages_hook

FAULT_WARPS = 8
PREFIX_VARIABLE = "KILN_TEST_INDUCTOR_ABORT_PREFIX"


def _hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        name = str(metadata.get("name", ""))
        if options.num_warps == FAULT_WARPS:
            prefixes = tuple(p for p in os.environ.get(PREFIX_VARIABLE, "").split(",") if p)
            if prefixes and name.startswith(prefixes):
                faults.detonate("abort")
            if "kilnfault_" in name:
                faults.detonate(name.split("kilnfault_", 1)[1].split("_", 1)[0])
        return make_cubin(src, metadata)

    stages["cubin"] = cubin_stage


install_stages_hook(_hook, "kiln-tests-inductor-faults")

if os.environ.get("BENCH_FAULT"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "inductor_fault_hook"))
    import bench_fault

    bench_fault.install_from_env()

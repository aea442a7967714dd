"""Preload this module into a kiln pool (``CompilePool(preload=["inductor_faults_preload"])``) to
give its workers a compiler that faults for real on marked Inductor kernels.

A kernel whose name holds ``kilnfault_<mode>`` (``abort``, ``segv``, ``hang``: see
:func:`faults.detonate`) faults in its cubin stage (after LLVM, before ptxas) when compiled
with ``num_warps=8``; its other configs compile normally. With ``KILN_TEST_INDUCTOR_ABORT_PREFIX``
set (comma-separated prefixes of names Inductor makes: ``triton_tem_`` on torch 2.13, ``triton_mm``
on 2.11), every 8-warp compile of a kernel whose name starts with one of them aborts. Only the
pool's workers import this module: the test process never installs the hook.
"""

from __future__ import annotations

import os
from typing import Any

import faults
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

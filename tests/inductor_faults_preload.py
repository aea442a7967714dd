"""Preload this module into a kiln pool (``CompilePool(preload=["inductor_faults_preload"])``) to
give its workers a compiler that faults for real on marked Inductor kernels.

A kernel whose name holds ``kilnfault_<mode>`` (``abort``, ``segv``, ``hang``: see
:func:`faults.detonate`) faults in its cubin stage (after LLVM, before ptxas) when compiled
with ``num_warps=8``; its other configs compile normally. Only the pool's workers import this
module: the test process never installs the hook.
"""

from __future__ import annotations

from typing import Any

import faults
from triton_kiln.triton_compat import install_stages_hook

FAULT_WARPS = 8


def _hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        name = str(metadata.get("name", ""))
        if "kilnfault_" in name and options.num_warps == FAULT_WARPS:
            detonate_mode = name.split("kilnfault_", 1)[1].split("_", 1)[0]
            faults.detonate(detonate_mode)
        return make_cubin(src, metadata)

    stages["cubin"] = cubin_stage


install_stages_hook(_hook, "kiln-tests-inductor-faults")

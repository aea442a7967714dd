"""Real compiler aborts for Helion kernels, chained onto kiln's fault hook (``faults.py``).

Importing this module installs, in that process, a Triton stage hook on top of the one
``faults`` installs: the compile of a Helion kernel named ``crashy_*`` aborts (libc
``abort()`` after printing a C++-style assertion, as ``faults.detonate`` does) when its config
has ``num_warps == ABORT_NUM_WARPS``; the compile of a ``crashall_*`` kernel always aborts.
kiln's zygote imports it through ``CompilePool(preload=[...])``, so its workers carry the hook;
a process that forks (Helion's fork precompile) passes it to its children.

It imports only Triton and ``faults`` (no torch), so preloading it keeps the zygote light.
"""

from __future__ import annotations

import os
from typing import Any

import triton

import faults

ABORT_NUM_WARPS = int(os.environ.get("KILN_TEST_HELION_ABORT_WARPS", "2"))
_previous_hook = triton.knobs.runtime.add_stages_inspection_hook


def should_abort(kernel_name: str, num_warps: int) -> bool:
    if kernel_name.startswith("_helion_crashall"):
        return True
    return kernel_name.startswith("_helion_crashy") and num_warps == ABORT_NUM_WARPS


def _helion_hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    if _previous_hook is not None:
        _previous_hook(backend, stages, options, language, capability)
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        # after LLVM codegen (which names the kernel), before ptxas: as faults.py's hook
        if should_abort(str(metadata.get("name", "")), int(options.num_warps)):
            faults.detonate("abort")
        return make_cubin(src, metadata)

    stages["cubin"] = cubin_stage


triton.knobs.runtime.add_stages_inspection_hook = _helion_hook


def test_hook_aborts_only_marked_configs() -> None:
    assert should_abort("_helion_crashall_add", 4)
    assert should_abort("_helion_crashy_add", ABORT_NUM_WARPS)
    assert not should_abort("_helion_crashy_add", ABORT_NUM_WARPS * 2)
    assert not should_abort("_helion_add", ABORT_NUM_WARPS)

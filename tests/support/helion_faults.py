"""Real compiler aborts for Helion kernels, chained onto kiln's fault hook (``faults.py``).

:func:`install` adds, in the calling process, a Triton stage hook (through
``triton_kiln.triton_compat.install_stages_hook``, so it speaks every supported Triton's hook
protocol) on top of the one ``faults`` installs: the compile of a Helion kernel named
``crashy_*`` aborts (libc ``abort()`` after printing a C++-style assertion, as
``faults.detonate`` does) when its config has ``num_warps == ABORT_NUM_WARPS``; the compile of a
``crashall_*`` kernel always aborts. Importing this module changes nothing; kiln's zygote gets
the hook by preloading :mod:`helion_faults_preload` (``CompilePool(preload=[PRELOAD])``), so
its workers carry it; a process that calls :func:`install` and then forks (Helion's fork
precompile) passes it to its children.

It imports only Triton and ``faults`` (no torch), so preloading it keeps the zygote light.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from support import faults
from triton_kiln.triton_compat import install_stages_hook

ABORT_NUM_WARPS = int(os.environ.get("KILN_TEST_HELION_ABORT_WARPS", "2"))
PRELOAD = "support.helion_faults_preload"
"""The module to name in ``CompilePool(preload=[...])``: importing it calls :func:`install`."""

_remove: Callable[[], None] | None = None


def should_abort(kernel_name: str, num_warps: int) -> bool:
    if kernel_name.startswith("_helion_crashall"):
        return True
    return kernel_name.startswith("_helion_crashy") and num_warps == ABORT_NUM_WARPS


def _edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        # after LLVM codegen (which names the kernel), before ptxas: as faults.py's hook
        if should_abort(str(metadata.get("name", "")), int(options.num_warps)):
            faults.detonate("abort")
        return make_cubin(src, metadata)

    stages["cubin"] = cubin_stage


def install() -> None:
    """Chain the abort hook onto Triton's stage hook in this process (once; later calls do nothing)."""
    global _remove
    if _remove is None:
        _remove = install_stages_hook(_edit, "kiln-tests-helion-faults")


def uninstall() -> None:
    """Put back the stage hook that was there before :func:`install` (for tests)."""
    global _remove
    if _remove is not None:
        _remove()
        _remove = None

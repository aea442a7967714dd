"""Real faults for Helion kernels (compiler aborts, launches that fault or hang), on kiln's hook.

:func:`install` adds, in the calling process, a Triton stage hook (through
``triton_kiln.triton_compat.install_stages_hook``, so it speaks every supported Triton's hook
protocol) on top of the one ``faults`` installs: the compile of a Helion kernel named
``crashy_*`` aborts (libc ``abort()`` after printing a C++-style assertion, as
``faults.detonate`` does) when its config has ``num_warps == ABORT_NUM_WARPS``; the compile of a
``crashall_*`` kernel always aborts; a ``faulty_*`` kernel's config whose ``(num_warps,
num_stages)`` is in :data:`FAULTY_CONFIGS` gets that fault: ``abort`` in the compiler, ``ima`` (a
store to address 0 added to its PTX: the binary compiles, its launch is an illegal memory access)
or ``hang`` (a branch to itself added to its PTX: its launch never finishes), or ``slow`` (its
compile sleeps :data:`SLOW_COMPILE_S` before ptxas: a batch's barrier held by one config). Importing this
module changes nothing; kiln's zygote gets the hook by preloading :mod:`helion_faults_preload`
(``CompilePool(preload=[PRELOAD])``), so its workers carry it; a process that calls
:func:`install` and then forks (Helion's fork precompile) passes it to its children. The ``ima``
and ``hang`` binaries land in Triton's cache under the config's usual key, so a process without
the hook that loads them from there (kiln's benchmark sandbox) runs the faulty kernel.

It imports only Triton, ``faults`` and the PTX edits of ``bench/inductor_fault_hook/bench_fault.py``
(no torch), so preloading it keeps the zygote light.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import faults
from triton_kiln.triton_compat import install_stages_hook

# the benchmarks' fault hook holds the PTX edits (appended, so its sitecustomize shadows no other)
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench" / "inductor_fault_hook"))
from bench_fault import BAD_STORE, at_entry

ABORT_NUM_WARPS = int(os.environ.get("KILN_TEST_HELION_ABORT_WARPS", "2"))
FAULTY_CONFIGS = {(1, 7): "abort", (2, 7): "ima", (4, 7): "hang"}
"""``(num_warps, num_stages)`` -> fault, for ``faulty_*`` kernels (7 stages: rare in a search)."""
SLOW_CONFIG = (8, 7)
"""``(num_warps, num_stages)`` of a ``faulty_*`` kernel's config that compiles slowly (``slow``)."""
SLOW_COMPILE_S = 4.0
PRELOAD = "support.helion_faults_preload"
"""The module to name in ``CompilePool(preload=[...])``: importing it calls :func:`install`."""

_remove: Callable[[], None] | None = None


SPIN = """
$kiln_spin:
	bra.uni 	$kiln_spin;
"""


def should_abort(kernel_name: str, num_warps: int) -> bool:
    if kernel_name.startswith("_helion_crashall"):
        return True
    return kernel_name.startswith("_helion_crashy") and num_warps == ABORT_NUM_WARPS


def fault_of(kernel_name: str, num_warps: int, num_stages: int) -> str | None:
    """The fault a compile gets: ``abort``, ``ima``, ``hang``, ``slow``, or ``None``."""
    if should_abort(kernel_name, num_warps):
        return "abort"
    if kernel_name.startswith("_helion_faulty"):
        if (num_warps, num_stages) == SLOW_CONFIG:
            return "slow"
        return FAULTY_CONFIGS.get((num_warps, num_stages))
    return None


def _edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    make_cubin = stages["cubin"]

    def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
        # after LLVM codegen (which names the kernel), before ptxas: as faults.py's hook
        fault = fault_of(str(metadata.get("name", "")), int(options.num_warps), int(options.num_stages))
        if fault == "abort":
            faults.detonate("abort")
        elif fault == "ima":
            src = at_entry(src, BAD_STORE)
        elif fault == "hang":
            src = at_entry(src, SPIN)
        elif fault == "slow":
            time.sleep(SLOW_COMPILE_S)
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

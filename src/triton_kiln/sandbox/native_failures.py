"""How a benchmark in the native sandbox failed: the one classifier, and its two own exceptions.

:func:`classify` turns what a benchmark raised into ``(kind, sticky)``: ``sticky`` when the CUDA
context is unusable after it (the sandbox replies, then exits; the client starts a fresh one),
``out_of_resources`` when the config does not fit the device (skipped), ``error`` otherwise.
"""

from __future__ import annotations

import re

# CUDA errors after which the context is unusable (cudaError_enum): illegal address, launch
# timeout, device assert, hardware stack error, illegal instruction, misaligned address,
# invalid address space, invalid PC, launch failure, unknown.
STICKY_CODES = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 999})
OUT_OF_RESOURCES_CODE = 701  # too many resources requested for launch
_CODE = re.compile(r"CUDA driver error (\d+)")


class Unsupported(Exception):
    """The binary needs Triton's launcher; the client sends it to the torch sandbox."""


class OutOfResources(Exception):
    """The binary does not fit the device (shared memory, threads): the config is skipped."""


def classify(exc: BaseException) -> tuple[str, bool]:
    """``(kind, sticky)`` for a failed benchmark: the one place that decides it."""
    if isinstance(exc, OutOfResources):
        return "out_of_resources", False
    match = _CODE.search(str(exc))
    if match is not None:
        code = int(match.group(1))
        if code in STICKY_CODES:
            return "sticky", True
        if code == OUT_OF_RESOURCES_CODE:
            return "out_of_resources", False
    return "error", False

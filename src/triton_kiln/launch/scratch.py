"""Triton's scratch buffers: what a binary asks for, and what one launch allocates.

Triton (3.5 and later) gives every CUDA kernel two trailing pointer parameters after its own
arguments: *global scratch* (device-side tensor descriptors made by
``tl.make_tensor_descriptor`` live there, among others) and *profile scratch* (instrumented
builds, e.g. Proton's). The binary's metadata says how many bytes each program needs
(``global_scratch_size``, ``profile_scratch_size``; 0: the parameter is a null pointer) and
their alignment (``*_scratch_align``). At every launch Triton's launcher
(``triton/backends/nvidia/driver.py``, ``CudaLauncher.__call__``; the same in 3.5.1, 3.6.0 and
3.7.1) asks an allocator for them::

    size  = grid_x * grid_y * grid_z * num_ctas * per-program size
    buffer = allocator(size, align, stream)      # global: the one triton.set_allocator set
                                                 # (a ContextVar: the calling thread's);
                                                 # profile: triton.set_profile_allocator's
    pointer = buffer.data_ptr()  (an int is taken as it is, None as a null pointer)

The buffer is dropped once the launch is queued (a stream-ordered allocator, torch's, reuses it
only after the kernel). kiln's C launcher (``_kiln_launch.c``) does the same at every launch,
with the allocators :func:`~triton_kiln.triton_compat.scratch_allocator_sources` names; the native
sandbox, which has no torch, gives it its own (:class:`~triton_kiln.sandbox.device_inputs.ScratchMemory`).
This module is the rule in Python (for the C launcher's arguments, and for tests to check the C
launcher and Triton against).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GLOBAL, PROFILE = 0, 1  # the order of Triton's trailing scratch parameters
N_SCRATCH = 2


@dataclass(frozen=True)
class ScratchNeed:
    """One scratch parameter of a binary: bytes per program and the alignment it asks for."""

    size: int
    align: int

    def request(self, grid: Sequence[int], num_ctas: int = 1) -> tuple[int, int] | None:
        """``(size, align)`` Triton's launcher asks its allocator for on a launch over ``grid``
        (``None``: it asks for nothing and passes a null pointer)."""
        if self.size <= 0:
            return None
        programs = 1
        for extent in tuple(grid) + (1,) * (3 - len(grid)):
            programs *= int(extent)
        return programs * int(num_ctas) * self.size, self.align


@dataclass(frozen=True)
class ScratchNeeds:
    """A binary's global and profile scratch, from its metadata."""

    global_: ScratchNeed
    profile: ScratchNeed

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> ScratchNeeds:
        """From Triton's metadata record; the four fields are launch fields (required)."""
        return cls(
            ScratchNeed(int(metadata["global_scratch_size"]), int(metadata["global_scratch_align"])),
            ScratchNeed(int(metadata["profile_scratch_size"]), int(metadata["profile_scratch_align"])),
        )

    @property
    def any(self) -> bool:
        return self.global_.size > 0 or self.profile.size > 0

    def pairs(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """``((size, align), (size, align))`` per program, global then profile: the C launcher's
        ``scratch`` argument."""
        return (self.global_.size, self.global_.align), (self.profile.size, self.profile.align)

    def describe(self) -> str:
        parts = []
        if self.global_.size > 0:
            parts.append(f"{self.global_.size} bytes of global scratch per program")
        if self.profile.size > 0:
            parts.append(f"{self.profile.size} bytes of profile scratch per program")
        return " and ".join(parts) or "no scratch"

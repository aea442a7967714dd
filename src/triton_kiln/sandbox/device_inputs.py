"""The native sandbox's own copies of the inputs: device buffers, a pristine copy, read-back.

Used only inside the native sandbox (:mod:`triton_kiln.sandbox.native_worker`), through kiln's C
module (no torch)::

    load(inputs)   for each TensorDesc: cuMemAlloc a working and a pristine buffer (span + the
                   caller's alignment); IPC handles are opened once per allocation, copied
                   device-to-device, synchronized and CLOSED before this returns, so no kernel
                   the sandbox runs later can reach the caller's memory; host copies: cuMemcpyHtoD
    restore_all()  pristine -> working (before each checked run and after each benchmark)
    read(name)     working buffer -> host -> numpy (raw words in the caller's layout)

:class:`ScratchMemory` is the sandbox's allocator for Triton's scratch buffers (binaries with
device-side tensor descriptors...), which kiln's launcher calls as Triton's launcher calls the
one ``triton.set_allocator`` set: one cuMemAlloc buffer, grown when a launch asks for more.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triton_kiln.sandbox.ipc import TensorDesc


@dataclass
class DeviceTensor:
    desc: TensorDesc
    allocations: tuple[int, int]  # (working, pristine) cuMemAlloc pointers, 0 when empty
    ptr: int  # the working copy's first element (what the kernel gets)
    pristine: int


class DeviceInputs:
    """Every argument for the kernels: device copies of the tensors, other values as sent."""

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda  # kiln's C module (_kiln_launch)
        self.tensors: dict[str, DeviceTensor] = {}
        self.values: dict[str, Any] = {}
        self.transfer_s = 0.0
        self.via_ipc = 0
        self.via_host = 0
        self._pristine_host: dict[str, Any] = {}

    def load(self, inputs: Mapping[str, Any]) -> None:
        """Take new inputs (freeing the previous ones). On failure nothing stays allocated."""
        self.free()
        started = time.monotonic()
        try:
            by_allocation: dict[int | bytes, tuple[bytes, list[str]]] = {}
            for name, value in inputs.items():
                if not isinstance(value, TensorDesc):
                    self.values[name] = value
                    continue
                self.tensors[name] = self._allocate(value)
                if value.handle is not None and value.nbytes:
                    group = value.allocation or value.handle  # open each caller allocation once
                    by_allocation.setdefault(group, (value.handle, []))[1].append(name)
                elif value.host is not None and value.nbytes:
                    self.cuda.memcpy_htod(self.tensors[name].pristine, value.host)
                    self.via_host += 1
            for handle, names in by_allocation.values():
                self._copy_from_caller(handle, names)
            for tensor in self.tensors.values():  # pristine -> working
                if tensor.desc.nbytes:
                    self.cuda.memcpy_dtod(tensor.ptr, tensor.pristine, tensor.desc.nbytes)
            self.cuda.ctx_synchronize()
        except BaseException:
            self.free()
            raise
        self.transfer_s = time.monotonic() - started

    def _allocate(self, desc: TensorDesc) -> DeviceTensor:
        if desc.nbytes == 0:
            return DeviceTensor(desc, (0, 0), 0, 0)
        size = desc.nbytes + desc.align
        working = self.cuda.mem_alloc(size)
        try:
            pristine = self.cuda.mem_alloc(size)
        except BaseException:
            self.cuda.mem_free(working)
            raise
        return DeviceTensor(desc, (working, pristine), working + desc.align, pristine + desc.align)

    def _copy_from_caller(self, handle: bytes, names: list[str]) -> None:
        """Open the caller's allocation, copy each tensor's span, synchronize, close it."""
        mapped = self.cuda.ipc_open(handle)
        try:
            for name in names:
                tensor = self.tensors[name]
                self.cuda.memcpy_dtod(tensor.pristine, mapped + tensor.desc.offset, tensor.desc.nbytes)
                self.via_ipc += 1
            self.cuda.ctx_synchronize()
        finally:
            self.cuda.ipc_close(mapped)

    @property
    def held_bytes(self) -> int:
        """Device bytes these inputs hold (each tensor's working and pristine copies)."""
        return sum(2 * (t.desc.nbytes + t.desc.align) for t in self.tensors.values() if t.desc.nbytes)

    def free(self) -> None:
        for tensor in self.tensors.values():
            for ptr in tensor.allocations:
                if ptr:
                    self.cuda.mem_free(ptr)
        self.tensors = {}
        self.values = {}
        self._pristine_host = {}
        self.via_ipc = self.via_host = 0

    # -- use ----------------------------------------------------------------------------------

    def argument(self, name: str) -> Any:
        """What the kernel gets for ``name``: a device pointer (int) or the value as sent."""
        tensor = self.tensors.get(name)
        return tensor.ptr if tensor is not None else self.values.get(name)

    def restore_all(self) -> None:
        for tensor in self.tensors.values():
            if tensor.desc.nbytes:
                self.cuda.memcpy_dtod(tensor.ptr, tensor.pristine, tensor.desc.nbytes)

    def zero_spans(self, names: list[str]) -> list[tuple[int, int]]:
        return [
            (t.ptr, t.desc.nbytes) for n in names if (t := self.tensors.get(n)) is not None and t.desc.nbytes
        ]

    def restore_spans(self, names: list[str]) -> list[tuple[int, int, int]]:
        return [
            (t.ptr, t.pristine, t.desc.nbytes)
            for n in names
            if (t := self.tensors.get(n)) is not None and t.desc.nbytes
        ]

    def read(self, name: str, pristine: bool = False, bitwise: bool = False, into: Any = None) -> Any:
        """The tensor's elements as stored (numpy, in the caller's shape and strides), read into
        ``into`` (a uint8 array of the tensor's size, reused: no page faults) or a new buffer."""
        import numpy as np

        from triton_kiln.sandbox.compare_np import raw_view

        tensor = self.tensors[name]
        desc = tensor.desc
        buffer = into if into is not None else np.empty(desc.nbytes, dtype=np.uint8)
        if desc.nbytes:
            self.cuda.memcpy_dtoh(buffer, tensor.pristine if pristine else tensor.ptr)
        return raw_view(buffer, desc.dtype, desc.itemsize, desc.shape, desc.strides, bitwise)

    def read_pristine(self, name: str) -> Any:
        cached = self._pristine_host.get(name)
        if cached is None:
            cached = self._pristine_host[name] = self.read(name, pristine=True, bitwise=True)
        return cached

    def changed(self) -> list[str]:
        """Tensors whose working copy differs (bitwise) from the pristine one."""
        import numpy as np

        return [
            name
            for name in self.tensors
            if not np.array_equal(self.read(name, bitwise=True), self.read_pristine(name))
        ]


class ScratchMemory:
    """``allocator(size, align, stream) -> device pointer``: Triton's scratch, without torch.

    kiln's C launcher calls it at each launch (and once per timing loop) with Triton's size and
    alignment (:mod:`triton_kiln.launch.scratch`). Every launch of the sandbox is queued on one stream,
    so one buffer serves them all; a larger request waits for the device, frees it and
    allocates a larger one. Give each scratch kind (global, profile) its own: both can be asked
    for by one launch.
    """

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda  # kiln's C module (_kiln_launch)
        self._base = 0
        self._capacity = 0

    def __call__(self, size: int, align: int, stream: int | None) -> int | None:
        if size <= 0:
            return None
        needed = size + align - 1
        if needed > self._capacity:
            self.free()
            self._base = self.cuda.mem_alloc(needed)
            self._capacity = needed
        return -(-self._base // align) * align

    @property
    def capacity(self) -> int:
        """Device bytes held now."""
        return self._capacity

    def free(self) -> None:
        if self._base:
            self.cuda.ctx_synchronize()  # no queued launch may still use it
            self.cuda.mem_free(self._base)
        self._base = self._capacity = 0

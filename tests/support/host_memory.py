"""A stand-in for device memory on CI (no GPU): kiln's C module's memory functions on host bytearrays."""

from __future__ import annotations

from typing import Any


class HostMemoryDriver:
    """Host memory behind the C module's memory functions (what the native sandbox's inputs and
    output check call), recording the order of IPC calls; ``caller`` is the memory an IPC handle
    opens."""

    def __init__(self, caller: bytearray | None = None) -> None:
        self.memory: dict[int, bytearray] = {}
        self.caller = caller if caller is not None else bytearray()
        self.next = 1 << 20
        self.log: list[str] = []

    def _find(self, ptr: int) -> tuple[bytearray, int]:
        for base, block in self.memory.items():
            if base <= ptr < base + len(block):
                return block, ptr - base
        raise RuntimeError(f"CUDA driver error 700 (illegal address {ptr:#x}) in a copy")

    def mem_alloc(self, n: int) -> int:
        ptr, self.next = self.next, self.next + n + 4096
        self.memory[ptr] = bytearray(n)
        return ptr

    def mem_free(self, ptr: int) -> None:
        del self.memory[ptr]

    def memcpy_htod(self, dst: int, data: bytes) -> None:
        block, at = self._find(dst)
        block[at : at + len(data)] = data

    def memcpy_dtod(self, dst: int, src: int, n: int) -> None:
        source, at = self._find(src)
        self.memcpy_htod(dst, bytes(source[at : at + n]))

    def memcpy_dtoh(self, buffer: Any, src: int) -> None:
        source, at = self._find(src)
        view = memoryview(buffer).cast("B")
        view[:] = source[at : at + len(view)]

    def ctx_synchronize(self) -> None:
        self.log.append("sync")

    def ipc_open(self, handle: bytes) -> int:
        self.log.append("open")
        ptr = self.next
        self.next += len(self.caller) + 4096
        self.memory[ptr] = self.caller
        return ptr

    def ipc_close(self, ptr: int) -> None:
        self.log.append("close")
        del self.memory[ptr]

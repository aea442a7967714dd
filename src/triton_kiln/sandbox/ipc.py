"""How the caller's tensors reach the native sandbox: CUDA IPC handles, or host copies.

::

    caller (has torch)                                  native sandbox (no torch)
      describe_inputs(args, device)
        tensor on the sandbox's device:
          ipc_get_handle(data_ptr) -> (handle, base)  ->  ipc_open(handle) once per allocation,
          TensorDesc(handle, offset=ptr-base, ...)        cuMemcpyDtoD into its own buffer,
                                                          synchronize, ipc_close(handle): closed
                                                          before any untrusted kernel runs
        otherwise (CPU tensor, another device, torch's expandable segments, a failed handle call):
          TensorDesc(host=bytes of the tensor's span) ->  cuMemcpyHtoD into its own buffer

A :class:`TensorDesc` describes the *span* of a tensor: the bytes from its first element to one
past its last, laid out with the caller's strides, so the kernel sees the same strides (they are
usually scalar arguments too) and the same pointer alignment (``data_ptr % 256``). Non-tensor
arguments travel as they are. This module imports torch only inside the caller-side functions.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kiln.sandbox")

ALIGN = 256  # the sandbox reproduces data_ptr % ALIGN (cuMemAlloc returns 256-byte aligned memory)


@dataclass(frozen=True)
class TensorDesc:
    """One tensor argument: its layout and where its bytes come from (IPC handle or host copy)."""

    dtype: str  # torch's name: "torch.float16"
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    itemsize: int
    nbytes: int  # the span: bytes from the first element to one past the last
    align: int = 0  # the caller's data_ptr % ALIGN
    device: int = -1  # the caller's CUDA device (-1: a CPU tensor)
    handle: bytes | None = None  # CUDA IPC handle of the allocation holding the tensor
    offset: int = 0  # the tensor's first byte within that allocation
    allocation: int = 0  # the caller's address of that allocation (tensors sharing one share it)
    host: bytes | None = None  # the span's bytes, when no handle is sent

    @property
    def via_ipc(self) -> bool:
        return self.handle is not None

    def without_handle(self, host: bytes) -> TensorDesc:
        return dataclasses.replace(self, handle=None, offset=0, allocation=0, host=host)


def span_bytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from a strided tensor's first element to one past its last (0 when it is empty)."""
    if any(size == 0 for size in shape):
        return 0
    last = sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))
    return (last + 1) * itemsize


def expandable_segments() -> bool:
    """torch's allocator maps memory with cuMemMap (no legacy IPC handles) when this is set."""
    for variable in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(variable, "").replace(" ", "").lower()
        if "expandable_segments:true" in conf:
            return True
    return False


def describe_tensor(tensor: Any, device: int, use_ipc: bool = True) -> tuple[TensorDesc, str | None]:
    """The :class:`TensorDesc` of a torch tensor, and why it is a host copy (``None``: IPC)."""
    shape = tuple(int(s) for s in tensor.shape)
    strides = tuple(int(s) for s in tensor.stride())
    itemsize = int(tensor.element_size())
    nbytes = span_bytes(shape, strides, itemsize)
    on = int(tensor.device.index if tensor.device.index is not None else 0) if tensor.is_cuda else -1
    ptr = int(tensor.data_ptr())
    base = TensorDesc(str(tensor.dtype), shape, strides, itemsize, nbytes, ptr % ALIGN, on)
    reason: str | None
    if not use_ipc:
        reason = "IPC is switched off for this sandbox"
    elif not tensor.is_cuda:
        reason = "it is not a CUDA tensor"
    elif on != device:
        reason = f"it is on cuda:{on}, the sandbox on cuda:{device}"
    elif nbytes == 0:
        return base, None  # nothing to copy
    elif expandable_segments():
        reason = (
            "torch's allocator uses expandable segments (PYTORCH_CUDA_ALLOC_CONF), which have no IPC handles"
        )
    else:
        try:
            handle, alloc_base, size = ipc_handle(ptr, on)
        except Exception as exc:  # no C helper, or the driver refused: copy through the host
            reason = f"the CUDA IPC handle could not be made: {exc}"
        else:
            offset = ptr - int(alloc_base)
            if offset < 0 or offset + nbytes > int(size):
                reason = f"the tensor's span does not lie in its allocation ({offset}+{nbytes} > {size})"
            else:
                return dataclasses.replace(base, handle=handle, offset=offset, allocation=alloc_base), None
    return base.without_handle(host_bytes(tensor, nbytes)), reason


def ipc_handle(ptr: int, device: int) -> tuple[bytes, int, int]:
    """``(handle, base, size)`` of the allocation holding ``ptr`` (kiln's C module; raises on failure)."""
    from triton_kiln.launch.native import native

    handle, base, size = native().ipc_get_handle(ptr, device)
    return bytes(handle), int(base), int(size)


def host_bytes(tensor: Any, nbytes: int) -> bytes:
    """The bytes of a tensor's span, in its own layout, copied to the host."""
    import torch

    if nbytes == 0:
        return b""
    elements = nbytes // int(tensor.element_size())
    flat = torch.as_strided(tensor.detach(), (elements,), (1,), tensor.storage_offset())
    return bytes(flat.contiguous().view(torch.uint8).cpu().numpy().tobytes())


def describe_inputs(
    args: Mapping[str, Any], device: int, use_ipc: bool = True
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every argument for the sandbox (tensors as :class:`TensorDesc`), and why each host copy is one.

    Call it after the caller's pending work on the tensors is finished (the sandbox reads them
    on its own stream): :meth:`triton_kiln.sandbox.native_client.NativeSandbox.set_inputs` synchronizes.
    """
    import torch

    out: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    handles: dict[int, bytes] = {}  # one handle per caller allocation: the sandbox opens each once
    for name, value in args.items():
        if isinstance(value, torch.Tensor):
            desc, reason = describe_tensor(value, device, use_ipc)
            if desc.handle is not None:
                desc = dataclasses.replace(desc, handle=handles.setdefault(desc.allocation, desc.handle))
            out[name] = desc
            if reason is not None:
                reasons[name] = reason
        else:
            out[name] = value
    return out, reasons


def host_only(inputs: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` with every IPC descriptor replaced by a host copy of the same tensor."""
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        if isinstance(value, TensorDesc) and value.via_ipc:
            out[name] = value.without_handle(host_bytes(args[name], value.nbytes))
        else:
            out[name] = value
    return out


def reference_descs(outputs: Mapping[str, Any]) -> dict[str, TensorDesc]:
    """The user's expected outputs (torch tensors) as contiguous host copies."""
    out: dict[str, TensorDesc] = {}
    for name, tensor in outputs.items():
        flat = tensor.detach().contiguous()
        desc, _ = describe_tensor(flat, -2, use_ipc=False)
        out[name] = desc
    return out


def log_host_copies(reasons: Mapping[str, str]) -> None:
    if reasons:
        detail = "; ".join(f"{name}: {why}" for name, why in reasons.items())
        log.info(
            "kiln: the sandbox gets host copies of %d tensor(s) instead of CUDA IPC handles (%s)",
            len(reasons),
            detail,
        )


def host_desc(desc: TensorDesc, words: Any) -> TensorDesc:
    """A contiguous host copy of a tensor's elements (``words``: numpy, as stored)."""
    import numpy as np

    contiguous = np.ascontiguousarray(words)
    strides = (
        tuple(s // desc.itemsize for s in contiguous.strides) if contiguous.size else (0,) * len(desc.shape)
    )
    return TensorDesc(
        desc.dtype, desc.shape, strides, desc.itemsize, contiguous.nbytes, host=contiguous.tobytes()
    )

"""What kiln's autotuner, sandbox and launcher need of Triton's (and torch's) private API:
Triton's ``Autotuner`` and ``Heuristics``, binding and packing a call, config hooks, loading a
compiled kernel, launch hooks, torch's stream functions."""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

from triton_kiln.triton_compat.core import make_backend

# --- autotuner / launch side ---------------------------------------------------------------
# What kiln's autotuner, sandbox and launcher need of Triton's (and torch's) private API. None of
# these imports Triton when this module is imported; the torch ones never import Triton at all.


@functools.cache
def triton_autotuner_class() -> type:
    """Triton's own ``Autotuner``, which ``triton_kiln.autotune``'s class extends (the contract's
    attributes); read once, so it stays Triton's while :func:`triton_kiln.install` routes the name."""
    from triton.runtime.autotuner import Autotuner

    cls: type = Autotuner
    return cls


def autotune_names() -> list[tuple[Any, str]]:
    """Where Triton exposes ``autotune`` and ``Autotuner``: ``(module, attribute)`` pairs that
    :func:`triton_kiln.install` rebinds (code that reads them afterwards gets kiln's)."""
    import triton
    import triton.runtime
    import triton.runtime.autotuner

    return [
        (triton, "autotune"),
        (triton.runtime, "autotune"),
        (triton.runtime.autotuner, "autotune"),
        (triton.runtime, "Autotuner"),
        (triton.runtime.autotuner, "Autotuner"),
    ]


def heuristics_layers(obj: Any) -> dict[str, Any] | None:
    """``@triton.heuristics``' values (name -> function of the arguments) when ``obj`` is Triton's
    ``Heuristics`` wrapper, else ``None``."""
    from triton.runtime.autotuner import Heuristics

    return dict(obj.values) if isinstance(obj, Heuristics) else None


def after_config_hook(
    config: Any, arg_names: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call as a config's ``pre_hook`` leaves it, for specializing that config: Triton runs
    the hook before binding, and a hook may set a host ``TensorDescriptor``'s block shape, which
    is part of the signature. The hook runs on copies of the descriptors (tensors are shared, as
    Triton shares them), so the caller's objects are changed only when the config runs."""
    named = {**dict(zip(arg_names, args, strict=False)), **kwargs}
    copies = {name: _copy_descriptor(value) for name, value in named.items()}
    config.pre_hook({**copies, **config.all_kwargs()})
    new_args = tuple(copies[name] for name in list(arg_names)[: len(args)])
    return new_args, {name: copies[name] for name in kwargs}


def has_host_descriptor(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` is a host ``TensorDescriptor`` (``triton.tools``)."""
    if "triton.tools.tensor_descriptor" not in sys.modules:
        return False  # nobody made one
    from triton.tools.tensor_descriptor import TensorDescriptor

    return any(isinstance(v, TensorDescriptor) for v in values)


def _copy_descriptor(value: Any) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    if not isinstance(value, TensorDescriptor):
        return value
    copied = copy.copy(value)
    copied.block_shape = list(value.block_shape)
    return copied


def jit_params(fn: Any) -> list[Any]:
    """A ``@triton.jit`` function's parameters (``KernelParam``: ``.name``, ``.default``...)."""
    return list(fn.params)


def argument_binder(fn: Any, target: GPUTarget) -> tuple[Any, Any]:
    """``(backend, binder)``: Triton's own argument binder of ``fn`` for ``target``.

    ``binder(*args, **kwargs)`` returns ``(bound args by name, specialization, options)``,
    exactly as Triton's JIT specializes a call (no GPU driver needed).
    """
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    return backend, create_function_from_signature(fn.signature, fn.params, _torch_free(backend))


_MAX_INT_32 = 2**31 - 1


def _torch_free(backend: Any) -> Any:
    """``backend``, or for HIP a copy whose tensor specialization needs no torch for stand-ins.

    Triton 3.6.0's and 3.7.1's ``HIPBackend.get_tensor_specialization`` adds ``"S"`` (a buffer
    under 2 GiB: AMD's buffer ops) when ``knobs.amd.use_buffer_ops`` and ``is_within_2gb(arg)``,
    and ``is_within_2gb`` imports torch before it reads ``arg.ptr_range()``. For an argument with
    ``ptr_range`` (:class:`StandInTensor`, Triton's ``MockTensor``: what ``kiln compile`` and
    ``precompile`` bind) the copy gives Triton's answer without the import, so a HIP target
    compiles where torch is not installed; every other argument (a torch tensor) gets Triton's own.
    """
    cls = type(backend)
    if not hasattr(cls, "is_within_2gb"):
        return backend
    own = cls.get_tensor_specialization

    def get_tensor_specialization(arg: Any, **kwargs: Any) -> Any:
        if not hasattr(arg, "ptr_range"):
            return own(arg, **kwargs)
        from triton import knobs
        from triton.backends.compiler import BaseBackend

        ret = BaseBackend.get_tensor_specialization(arg, **kwargs)
        return ret + "S" if knobs.amd.use_buffer_ops and arg.ptr_range() <= _MAX_INT_32 else ret

    clone = copy.copy(backend)
    attrs = {"get_tensor_specialization": staticmethod(get_tensor_specialization)}
    clone.__class__ = type(f"TorchFree{cls.__name__}", (cls,), attrs)
    return clone


def pack_args(
    fn: Any,
    backend: Any,
    kwargs: dict[str, Any],
    bound: dict[str, Any],
    specialization: Any,
    options: dict[str, Any],
) -> tuple[Any, dict[str, str], dict[tuple[int, ...], Any], dict[tuple[int, ...], Any]]:
    """Triton's ``(options, signature, constexprs by path, attrs by path)`` for a bound call."""
    packed = fn._pack_args(backend, kwargs, bound, specialization, options)
    return packed[0], packed[1], packed[2], packed[3]


_ELEMENT_TYPES: dict[str, str] = {}  # every element type name handed out, kept alive (see below)


class StandInTensor:
    """What Triton's argument specializer reads of a tensor, and nothing else: ``dtype``,
    ``data_ptr()`` and ``ptr_range()`` (checked on Triton 3.6.0 and 3.7.1).

    ``dtype`` is the element type's name (``"fp16"``, ``"i32"``...), which Triton canonicalises
    as it does ``str(torch.float16)``. Triton 3.7's native specializer caches a dtype's type
    string by the dtype object's identity, so each name is one string object kept alive for
    the process (a freed object's identity, reused, would read another type). ``data_ptr()`` is
    0 (16-byte aligned, as every torch allocation) or 8 (not aligned: a view at an odd offset);
    ``ptr_range()`` is 0, a buffer under 2 GiB (AMD's buffer-op specialization), as
    Triton's own ``MockTensor`` assumes.
    """

    def __init__(self, element_type: str, aligned: bool) -> None:
        self.dtype = _ELEMENT_TYPES.setdefault(element_type, element_type)
        self._address = 0 if aligned else 8

    def data_ptr(self) -> int:
        return self._address

    def ptr_range(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"StandInTensor({self.dtype!r}, aligned={self._address == 0})"


def wrap_dtypes(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Arguments where a ``torch.dtype`` stands for a tensor of it (as ``JITFunction.warmup``)."""
    from triton.runtime.jit import MockTensor

    return tuple(MockTensor.wrap_dtype(a) for a in args)


def load_compiled_kernel(
    arg_names: list[str],
    signature: dict[str, str],
    constexprs: dict[str, Any],
    group: dict[str, str],
    kernel_hash: str,
) -> Any:
    """Triton's ``CompiledKernel`` from files in Triton's cache layout, loaded onto the GPU now
    (so that resource errors, e.g. too much shared memory, surface here), without compiling."""
    from types import SimpleNamespace

    from triton.compiler.compiler import CompiledKernel

    src = SimpleNamespace(
        signature=dict(signature),
        constants={(arg_names.index(k),): v for k, v in constexprs.items()},
        fn=SimpleNamespace(arg_names=arg_names, launch_metadata=None),
    )
    kernel = CompiledKernel(src, group, kernel_hash)
    kernel._init_handles()
    return kernel


def triton_launch_hooks_set() -> bool:
    """Whether Triton's launch hooks (``knobs.runtime.launch_enter_hook``...) are set."""
    if "triton" not in sys.modules:  # nobody could have set them
        return False
    try:
        from triton import knobs

        hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    except Exception:  # an older Triton without knobs: no hooks kiln knows of
        return False
    # Triton 3.6 keeps them as HookChain objects (always truthy; empty .calls = no hooks).
    return any(bool(getattr(hook, "calls", hook)) for hook in hooks if hook is not None)


def print_autotuning() -> bool:
    """Triton's ``knobs.autotuning.print`` (``TRITON_PRINT_AUTOTUNING=1``, or set in code):
    whether ``triton.autotune`` prints its per-config and end-of-tuning lines. Read on each tuning,
    as Triton reads it; the knob has the same name and lines from 3.5.1 to 3.7.1."""
    from triton import knobs

    return bool(knobs.autotuning.print)


def torch_stream_functions() -> tuple[Any, Any]:
    """torch's ``(get_raw_stream(device), get_device())`` (C functions; no Triton imported)."""
    import torch

    return torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice

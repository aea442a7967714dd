"""From a call's real arguments to one :class:`~kiln.compile.request.CompileRequest` per config.

kiln specializes exactly as Triton's JIT does (same types, same ``tt.divisibility`` hints for
16-byte-aligned pointers and multiples of 16, integers equal to 1 turned into constexprs), by
running Triton's own argument binder for an explicit target: the binaries kiln tunes are the
ones Triton would have compiled for this call, and no GPU driver is needed to build them.

:func:`tuning_key` reproduces ``triton.autotune``'s cache key (the values of the ``key``
arguments, then the dtype of every argument that has one).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.compile.request import CompileRequest
from kiln.errors import RequestError
from kiln.triton_compat import GPUTarget, make_backend

_OPTION_NAMES = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")


@functools.cache
def _binder(fn: Any, target: GPUTarget) -> tuple[Any, Any]:
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    return backend, create_function_from_signature(fn.signature, fn.params, backend)


@dataclass(frozen=True)
class BoundCall:
    """A call's arguments bound to the kernel's parameters (in parameter order)."""

    args: dict[str, Any]  # every parameter, constexprs included (Triton's launcher takes them all)


def config_options(config: Any) -> dict[str, Any]:
    """Compile options of a ``triton.Config`` (``None`` values left out, as Triton does)."""
    return {name: getattr(config, name) for name in _OPTION_NAMES if getattr(config, name, None) is not None}


def bind(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], target: GPUTarget) -> tuple[BoundCall, Any]:
    """Bind a call; returns the bound arguments and Triton's specialization list."""
    backend, binder = _binder(fn, target)
    bound, specialization, _options = binder(*args, **kwargs)
    return BoundCall(dict(bound)), (backend, specialization)


def request_for(
    fn: Any,
    config: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    target: GPUTarget,
) -> tuple[CompileRequest, BoundCall]:
    """The compile request for running ``fn`` with ``config`` on these arguments."""
    meta = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    conflicts = meta.keys() & config.kwargs.keys()
    if conflicts:
        raise ValueError(
            f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
            f"re-define auto-tuned symbols."
        )
    call_kwargs = {**meta, **config.all_kwargs()}
    bound, (backend, specialization) = bind(fn, args, call_kwargs, target)
    _options, signature, constexpr_paths, attr_paths = fn._pack_args(
        backend, call_kwargs, bound.args, specialization, _options_only(call_kwargs)
    )
    names = list(fn.arg_names)
    constexprs: dict[str, Any] = {}
    for path, value in constexpr_paths.items():
        if len(path) != 1:
            raise NotImplementedError(
                f"{fn.__name__}: tuple arguments with constexpr members are not supported by kiln's "
                f"autotuner yet (argument path {path})."
            )
        constexprs[names[path[0]]] = value
    attrs: dict[str, Any] = {}
    for path, value in attr_paths.items():
        if len(path) != 1:
            raise NotImplementedError(
                f"{fn.__name__}: tuple arguments are not supported by kiln's autotuner yet (path {path})."
            )
        attrs[names[path[0]]] = value
    try:
        request = CompileRequest(
            fn, signature, constexprs, options=config_options(config), target=target, attrs=attrs
        )
    except RequestError:
        raise
    return request, bound


def _options_only(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k in _OPTION_NAMES}


def tuning_key(
    arg_names: Sequence[str], keys: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[Any, ...]:
    """``triton.autotune``'s key: the ``key`` arguments' values, then every argument's dtype."""
    named = {**dict(zip(arg_names, args, strict=False)), **kwargs}
    named = {k: v for k, v in named.items() if k in arg_names}
    key: list[Any] = [named[k] for k in keys if k in named]
    for value in named.values():
        if hasattr(value, "dtype"):
            key.append(str(value.dtype))
    return tuple(key)


def config_label(config: Any) -> str:
    """A stable, readable name for a ``triton.Config`` (its kwargs, then its options)."""
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    parts += [f"{k}={v}" for k, v in config_options(config).items()]
    return ", ".join(parts)

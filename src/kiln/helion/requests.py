"""An extracted Triton launch -> a kiln compile request, and its place in Triton's cache.

Helion's generated host code launches its ``@triton.jit`` kernel through a launcher; kiln's
adapter swaps in one that captures the kernel and its call arguments instead of running it
(as Helion's own fork precompile does). This module turns that capture into:

* a :class:`~kiln.CompileRequest` for kiln's pool, bound exactly as Triton's JIT binds the
  call (Triton's own binder for an explicit target, so no GPU driver is needed: CPU tests
  compile for ``GPUTarget("cuda", 90, 32)``);
* the Triton cache entry the parent's JIT will look up when Helion benchmarks the config
  (the hash ``triton.compile`` computes for the same source, options and environment, under
  the ``TRITON_CACHE_DIR`` in force: Helion points it at a per-autotune directory).

:func:`place_in_triton_cache` writes kiln's artifact there in Triton's layout (binary,
metadata JSON, ``__grp__`` group file), so the benchmark's ``kernel(...)`` is a cache hit and
nothing is compiled twice, whether kiln compiled the config now or found it in its own cache.

Triton internals used here (Triton 3.6, the version kiln pins): ``create_function_from_signature``
and ``JITFunction._pack_args`` (what ``JITFunction.run`` binds with), ``get_cache_key`` and
``get_cache_manager`` (what ``triton.compile`` keys and stores with).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln import CompileRequest, GPUTarget
from kiln.triton_compat import ASTSource, make_backend

# Options the backend derives from the target; a request may not set them.
_DERIVED_OPTIONS = frozenset({"arch", "backend_name", "warp_size"})
# Always named in a request (and so in its label), even at their default values.
_LABEL_OPTIONS = ("num_warps", "num_stages")


@dataclass(frozen=True)
class LaunchCompile:
    """One extracted launch, ready for kiln: the request, and where Triton's JIT will look."""

    request: CompileRequest
    triton_hash: str  # the directory name ``triton.compile`` uses for this kernel variant
    file_name: str  # ``<kernel name>`` as Triton truncates it for its cache files


@functools.cache
def _binder(kernel: Any, target: GPUTarget) -> tuple[Any, Any]:
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    return backend, create_function_from_signature(kernel.signature, kernel.params, backend)


def launch_compile(
    kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], target: GPUTarget
) -> LaunchCompile:
    """The kiln request (and Triton cache slot) for ``kernel.run(*args, **kwargs)`` on ``target``.

    ``args``/``kwargs`` are the launch's arguments as ``JITFunction.run`` receives them
    (tensors, scalars, constexprs, ``num_warps``...). Binding follows ``JITFunction.run``:
    ``debug`` and ``instrumentation_mode`` are added from Triton's knobs, then Triton's binder
    and ``_pack_args`` give the signature, constexprs, specialization attributes and options.
    """
    from triton import knobs

    call_kwargs = dict(kwargs)
    call_kwargs["debug"] = call_kwargs.get("debug", kernel.debug) or knobs.runtime.debug
    call_kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    backend, binder = _binder(kernel, target)
    bound_args, specialization, options = binder(*args, **call_kwargs)
    parsed, signature, constexpr_paths, attr_paths = kernel._pack_args(
        backend, call_kwargs, bound_args, specialization, options
    )
    names = list(kernel.arg_names)
    constexprs: dict[str, Any] = {}
    for path, value in constexpr_paths.items():
        if len(path) != 1:
            raise NotImplementedError(
                f"{kernel.__name__}: tuple arguments with constexpr members (path {path}) are not "
                f"supported by kiln's Helion adapter; set autotune_precompile=None for this kernel."
            )
        constexprs[names[path[0]]] = value
    attrs: dict[str, Any] = {}
    for path, value in attr_paths.items():
        if len(path) != 1:
            raise NotImplementedError(
                f"{kernel.__name__}: tuple arguments (path {path}) are not supported by kiln's Helion "
                f"adapter; set autotune_precompile=None for this kernel."
            )
        attrs[names[path[0]]] = value
    full_options = dict(parsed.__dict__)
    defaults = backend.parse_options({}).__dict__
    request_options = {
        k: v
        for k, v in full_options.items()
        if k not in _DERIVED_OPTIONS and (k in _LABEL_OPTIONS or defaults.get(k) != v)
    }
    request = CompileRequest(
        kernel,
        {k: v for k, v in signature.items() if k not in constexprs},
        constexprs,
        options=request_options,
        target=target,
        attrs=attrs,
    )
    src = ASTSource(kernel, signature, constexpr_paths, attr_paths)
    return LaunchCompile(
        request=request,
        triton_hash=_triton_hash(src, backend, full_options),
        file_name=src.name[:150],
    )


def _triton_hash(src: Any, backend: Any, options: dict[str, Any]) -> str:
    """The cache directory name ``triton.compile(src, target, options)`` uses, computed as it does."""
    from triton.compiler.compiler import get_cache_invalidating_env_vars
    from triton.runtime.cache import get_cache_key

    parsed = backend.parse_options(dict(options, **src.parse_options()))
    key = get_cache_key(src, backend, parsed, env_vars=get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def in_triton_cache(launch: LaunchCompile) -> bool:
    """Whether Triton's cache (under the current ``TRITON_CACHE_DIR``) holds this variant."""
    from triton.runtime.cache import get_cache_manager

    group = get_cache_manager(launch.triton_hash).get_group(f"{launch.file_name}.json")
    return bool(group) and f"{launch.file_name}.json" in group


def place_in_triton_cache(launch: LaunchCompile, artifact: Any) -> bool:
    """Write ``artifact`` (a :class:`~kiln.CompiledArtifact`) where Triton's JIT will look for it.

    Returns ``False`` when the entry was already there (kiln's worker compiled into the same
    directory under the same hash), ``True`` when it was written now. The metadata's
    ``hash`` field is set to the slot's hash, as ``triton.compile`` records it.
    """
    from triton.runtime.cache import get_cache_manager

    if in_triton_cache(launch):
        return False
    manager = get_cache_manager(launch.triton_hash)
    metadata = dict(artifact.metadata)
    metadata["hash"] = launch.triton_hash
    base = launch.file_name
    binary_name = f"{base}.{artifact.binary_ext}"
    metadata_name = f"{base}.json"
    group = {
        binary_name: manager.put(artifact.binary, binary_name, binary=True),
        metadata_name: manager.put(json.dumps(metadata), metadata_name, binary=False),
    }
    manager.put_group(metadata_name, group)
    return True

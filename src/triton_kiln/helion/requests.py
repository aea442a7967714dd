"""An extracted Triton launch -> a kiln compile request, and its place in Triton's cache.

Helion's generated host code launches its ``@triton.jit`` kernel through a launcher; kiln's
adapter swaps in one that captures the kernel and its call arguments instead of running it
(as Helion's own fork precompile does). This module turns that capture into:

* a :class:`~triton_kiln.CompileRequest` for kiln's pool, bound exactly as Triton's JIT binds the
  call (Triton's own binder for an explicit target, so no GPU driver is needed: CPU tests
  compile for ``GPUTarget("cuda", 90, 32)``);
* the Triton cache entry the parent's JIT will look up when Helion benchmarks the config
  (the hash ``triton.compile`` computes for the same source, options and environment, under
  the ``TRITON_CACHE_DIR`` in force: Helion points it at a per-autotune directory).

:func:`place_in_triton_cache` writes kiln's artifact there in Triton's layout (binary,
metadata JSON, ``__grp__`` group file), so the benchmark's ``kernel(...)`` is a cache hit and
nothing is compiled twice, whether kiln compiled the config now or found it in its own cache.

The Triton internals this needs (what ``JITFunction.run`` binds with, what ``triton.compile``
keys and stores with) are in :mod:`triton_kiln.triton_compat`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from triton_kiln import CompileRequest, GPUTarget, triton_compat
from triton_kiln.triton_compat import ASTSource

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
    return triton_compat.argument_binder(kernel, target)


def launch_compile(
    kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], target: GPUTarget
) -> LaunchCompile:
    """The kiln request (and Triton cache slot) for ``kernel.run(*args, **kwargs)`` on ``target``.

    ``args``/``kwargs`` are the launch's arguments as ``JITFunction.run`` receives them
    (tensors, scalars, constexprs, ``num_warps``...). Binding follows ``JITFunction.run``:
    ``debug`` and ``instrumentation_mode`` are added from Triton's knobs, then Triton's binder
    and ``_pack_args`` give the signature, constexprs, specialization attributes and options.
    """
    call_kwargs = triton_compat.jit_run_kwargs(kernel, kwargs)
    backend, binder = _binder(kernel, target)
    bound_args, specialization, options = binder(*args, **call_kwargs)
    parsed, signature, constexpr_paths, attr_paths = triton_compat.pack_args(
        kernel, backend, call_kwargs, bound_args, specialization, options
    )
    names = triton_compat.jit_arg_names(kernel)
    hint = "by kiln's Helion adapter; set autotune_precompile=None for this kernel."
    constexprs = triton_compat.by_argument(kernel.__name__, names, constexpr_paths, hint)
    attrs = triton_compat.by_argument(kernel.__name__, names, attr_paths, hint)
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
        triton_hash=triton_compat.compile_hash(src, backend, full_options),
        file_name=src.name[:150],
    )


def in_triton_cache(launch: LaunchCompile) -> bool:
    """Whether Triton's cache (under the current ``TRITON_CACHE_DIR``) holds this variant."""
    group = triton_compat.triton_cache_group(launch.triton_hash, f"{launch.file_name}.json")
    return group is not None and f"{launch.file_name}.json" in group


def place_in_triton_cache(launch: LaunchCompile, artifact: Any) -> bool:
    """Write ``artifact`` (a :class:`~triton_kiln.CompiledArtifact`) where Triton's JIT will look for it.

    Returns ``False`` when the entry was already there (kiln's worker compiled into the same
    directory under the same hash), ``True`` when it was written now. The metadata's
    ``hash`` field is set to the slot's hash, as ``triton.compile`` records it.
    """
    if in_triton_cache(launch):
        return False
    metadata = dict(artifact.metadata)
    metadata["hash"] = launch.triton_hash
    base = launch.file_name
    metadata_name = f"{base}.json"
    files: dict[str, bytes | str] = {
        f"{base}.{artifact.binary_ext}": artifact.binary,
        metadata_name: json.dumps(metadata),
    }
    triton_compat.put_in_triton_cache(launch.triton_hash, files, metadata_name)
    return True

"""Every place kiln touches Triton's internals, in one package (one module per side).

kiln supports Triton >=3.5.1,<3.8 (tested: 3.5.1, 3.6.0, 3.7.1; docs/TRITON_VERSIONS.md). What
differs between versions is isolated here (the stage hook, in :mod:`.versions`); so are the
internals that could move: where ``GPUTarget`` lives, the cache-invalidating environment
variables, Triton's key (``triton_key``), the backend options class and the metadata a launcher
reads.

Importing this module does not import Triton (``GPUTarget`` and ``ASTSource`` load it on first
use), so a process that only runs bundles can use the torch-side helpers without it.

Modules: :mod:`.core` (targets, backends, environment, Triton's key), :mod:`.compiling` (the
compile pool's and Helion adapter's needs, Gluon), :mod:`.autotuning` (the autotuner's,
sandbox's and launcher's), :mod:`.versions` (version differences, validation); imported by
module, not re-exported: :mod:`.inductor` (torch Inductor's names), :mod:`.jit_hook` (where
:mod:`triton_kiln.routing.jit` hooks Triton's JIT), :mod:`.triton_launcher` (Triton 3.5/3.6's
per-signature C launcher: its source and build, for :mod:`triton_kiln.launch.prebuild`). Every name is
re-exported here: callers write ``triton_compat.name``.

Imports: Triton and torch, and of kiln's only :mod:`triton_kiln.files`; every part of kiln may
import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from triton_kiln.triton_compat.autotuning import (
    StandInTensor as StandInTensor,
)
from triton_kiln.triton_compat.autotuning import (
    after_config_hook as after_config_hook,
)
from triton_kiln.triton_compat.autotuning import (
    argument_binder as argument_binder,
)
from triton_kiln.triton_compat.autotuning import (
    autotune_names as autotune_names,
)
from triton_kiln.triton_compat.autotuning import (
    has_host_descriptor as has_host_descriptor,
)
from triton_kiln.triton_compat.autotuning import (
    heuristics_layers as heuristics_layers,
)
from triton_kiln.triton_compat.autotuning import (
    jit_params as jit_params,
)
from triton_kiln.triton_compat.autotuning import (
    load_compiled_kernel as load_compiled_kernel,
)
from triton_kiln.triton_compat.autotuning import (
    pack_args as pack_args,
)
from triton_kiln.triton_compat.autotuning import (
    print_autotuning as print_autotuning,
)
from triton_kiln.triton_compat.autotuning import (
    torch_stream_functions as torch_stream_functions,
)
from triton_kiln.triton_compat.autotuning import (
    triton_autotuner_class as triton_autotuner_class,
)
from triton_kiln.triton_compat.autotuning import (
    triton_launch_hooks_set as triton_launch_hooks_set,
)
from triton_kiln.triton_compat.autotuning import (
    wrap_dtypes as wrap_dtypes,
)
from triton_kiln.triton_compat.compiling import (
    CompiledParts as CompiledParts,
)
from triton_kiln.triton_compat.compiling import (
    JitParts as JitParts,
)
from triton_kiln.triton_compat.compiling import (
    by_argument as by_argument,
)
from triton_kiln.triton_compat.compiling import (
    compile_hash as compile_hash,
)
from triton_kiln.triton_compat.compiling import (
    compile_kernel as compile_kernel,
)
from triton_kiln.triton_compat.compiling import (
    compile_key_parts as compile_key_parts,
)
from triton_kiln.triton_compat.compiling import (
    compiled_kernel_from_files as compiled_kernel_from_files,
)
from triton_kiln.triton_compat.compiling import (
    compiled_kernel_parts as compiled_kernel_parts,
)
from triton_kiln.triton_compat.compiling import (
    constants_label as constants_label,
)
from triton_kiln.triton_compat.compiling import (
    constexpr_function as constexpr_function,
)
from triton_kiln.triton_compat.compiling import (
    gluon_ast_source as gluon_ast_source,
)
from triton_kiln.triton_compat.compiling import (
    is_constexpr_function as is_constexpr_function,
)
from triton_kiln.triton_compat.compiling import (
    is_jit_function as is_jit_function,
)
from triton_kiln.triton_compat.compiling import (
    jit_arg_names as jit_arg_names,
)
from triton_kiln.triton_compat.compiling import (
    jit_parts as jit_parts,
)
from triton_kiln.triton_compat.compiling import (
    jit_run_kwargs as jit_run_kwargs,
)
from triton_kiln.triton_compat.compiling import (
    key_parts_differ as key_parts_differ,
)
from triton_kiln.triton_compat.compiling import (
    launch_fields as launch_fields,
)
from triton_kiln.triton_compat.compiling import (
    put_in_triton_cache as put_in_triton_cache,
)
from triton_kiln.triton_compat.compiling import (
    triton_cache_group as triton_cache_group,
)
from triton_kiln.triton_compat.core import (
    any_backend_option_names as any_backend_option_names,
)
from triton_kiln.triton_compat.core import (
    backend_option_names as backend_option_names,
)
from triton_kiln.triton_compat.core import (
    cache_invalidating_env as cache_invalidating_env,
)
from triton_kiln.triton_compat.core import (
    local_target as local_target,
)
from triton_kiln.triton_compat.core import (
    make_backend as make_backend,
)
from triton_kiln.triton_compat.core import (
    seed_caller_triton_key as seed_caller_triton_key,
)
from triton_kiln.triton_compat.core import (
    seed_triton_key as seed_triton_key,
)
from triton_kiln.triton_compat.core import (
    stored_triton_key as stored_triton_key,
)
from triton_kiln.triton_compat.core import (
    triton_env as triton_env,
)
from triton_kiln.triton_compat.core import (
    triton_key as triton_key,
)
from triton_kiln.triton_compat.core import (
    triton_version as triton_version,
)
from triton_kiln.triton_compat.versions import (
    CUDA_ARCHS as CUDA_ARCHS,
)
from triton_kiln.triton_compat.versions import (
    SCALAR_TYPES as SCALAR_TYPES,
)
from triton_kiln.triton_compat.versions import (
    SUPPORTED_TRITON as SUPPORTED_TRITON,
)
from triton_kiln.triton_compat.versions import (
    StagesEditor as StagesEditor,
)
from triton_kiln.triton_compat.versions import (
    install_stages_hook as install_stages_hook,
)
from triton_kiln.triton_compat.versions import (
    scratch_allocator_sources as scratch_allocator_sources,
)
from triton_kiln.triton_compat.versions import (
    set_scratch_allocators as set_scratch_allocators,
)
from triton_kiln.triton_compat.versions import (
    signature_type_problem as signature_type_problem,
)
from triton_kiln.triton_compat.versions import (
    stages_hook_is_keyed as stages_hook_is_keyed,
)
from triton_kiln.triton_compat.versions import (
    target_problem as target_problem,
)
from triton_kiln.triton_compat.versions import (
    triton_version_tuple as triton_version_tuple,
)

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget as GPUTarget
    from triton.compiler import ASTSource as ASTSource


def __getattr__(name: str) -> Any:
    """``GPUTarget`` and ``ASTSource``: Triton's classes, imported on first use."""
    if name == "GPUTarget":
        from triton.backends.compiler import GPUTarget

        return GPUTarget
    if name == "ASTSource":
        from triton.compiler import ASTSource

        return ASTSource
    raise AttributeError(f"module 'triton_kiln.triton_compat' has no attribute {name!r}")

"""What the compile pool (and the Helion adapter) need of Triton's private API: ``@jit``
functions' parts, compiling, compiled kernels' parts, binding a call as ``JITFunction.run``
does, Triton's own cache, and Gluon's AST source."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

from triton_kiln.triton_compat.core import make_backend

# --- compile pool side ---------------------------------------------------------------------
# What the compile side (kernel_spec, request, artifact, triton_files, the zygote and its
# workers) needs from Triton beyond its public API: the layout of ``@triton.jit`` functions and
# of ``CompiledKernel``.


def is_jit_function(obj: Any) -> bool:
    """Whether ``obj`` is a ``@triton.jit`` function (Triton's ``JITCallable``/``JITFunction``)."""
    try:
        from triton.runtime.jit import JITCallable
    except ImportError:  # Triton < 3.5 has no JITCallable
        from triton.runtime.jit import JITFunction as JITCallable
    return isinstance(obj, JITCallable)


@dataclasses.dataclass(frozen=True)
class JitParts:
    """What kiln reads from a ``@triton.jit`` function."""

    src: str  # the function's source, as Triton holds it
    python_fn: Any  # the undecorated Python function
    globals: dict[str, Any]  # the globals its source resolves names in
    arg_names: list[str]
    first_line: int  # line of the source in its file (the binary embeds line info)
    options: tuple[tuple[str, Any], ...]  # the jit() options that change the binary


def jit_parts(fn: Any) -> JitParts:
    """The parts of the ``@triton.jit`` function ``fn`` kiln hashes and ships."""
    return JitParts(
        src=fn.src,
        python_fn=fn.fn,
        globals=fn.__globals__,
        arg_names=list(getattr(fn, "arg_names", ())),  # a @constexpr_function has none
        first_line=_def_line(fn),
        options=(
            ("debug", getattr(fn, "debug", None)),
            ("do_not_specialize", tuple(getattr(fn, "do_not_specialize", ()) or ())),
            ("noinline", getattr(fn, "noinline", None)),
        ),
    )


def _def_line(fn: Any) -> int:
    """The line of the ``def`` (below any decorators): where ``fn.src`` and Triton's line info start."""
    start = int(getattr(fn, "starting_line_number", 1))
    for offset, line in enumerate(getattr(fn, "raw_src", None) or ()):
        if line.strip().startswith("def "):
            return start + offset
    return start


def jit_arg_names(fn: Any) -> list[str]:
    """The argument names of the ``@triton.jit`` function ``fn``, in order."""
    return list(fn.arg_names)


def compile_kernel(src: Any, target: GPUTarget, options: dict[str, Any]) -> Any:
    """``triton.compile`` of an ``ASTSource`` for ``target`` (in a worker or the zygote)."""
    import triton

    return triton.compile(src, target=target, options=options)


@dataclasses.dataclass(frozen=True)
class CompiledParts:
    """What kiln keeps of Triton's ``CompiledKernel`` (``metadata`` is ``None`` if Triton
    wrote no metadata file, and then nothing else is read)."""

    name: str
    metadata: dict[str, Any] | None
    binary_ext: str = ""
    binary: bytes = b""
    asm: dict[str, str] = dataclasses.field(default_factory=dict)


# Fields a backend's launcher and loader read from a kernel's metadata (Triton 3.6.0 and 3.7.1:
# CudaLauncher/HIPLauncher in backends/*/driver.py). HIP kernels have no global scratch and no
# PDL launch: their metadata lacks those fields, and their launcher reads the warp size instead.
_LAUNCH_FIELDS: dict[str, tuple[str, ...]] = {
    "cuda": (
        "name",
        "num_warps",
        "num_ctas",
        "shared",
        "target",
        "global_scratch_size",
        "global_scratch_align",
        "profile_scratch_size",
        "profile_scratch_align",
        "launch_cooperative_grid",
        "launch_pdl",
    ),
    "hip": (
        "name",
        "num_warps",
        "num_ctas",
        "shared",
        "target",
        "warp_size",
        "profile_scratch_size",
        "profile_scratch_align",
        "launch_cooperative_grid",
    ),
}


def launch_fields(backend: str) -> tuple[str, ...]:
    """The metadata fields a kernel compiled for ``backend`` needs to be launched (CUDA's for a
    backend kiln has no list for: the strictest)."""
    return _LAUNCH_FIELDS.get(backend, _LAUNCH_FIELDS["cuda"])


def compiled_kernel_parts(compiled: Any) -> CompiledParts:
    """Metadata (from Triton's metadata file), binary and text IRs of a ``CompiledKernel``."""
    metadata_path = next(
        (Path(p) for name, p in compiled.metadata_group.items() if name.endswith(".json")), None
    )
    if metadata_path is None:
        return CompiledParts(str(compiled.name), None)
    metadata = json.loads(metadata_path.read_text())
    binary_ext = str(make_backend(compiled.metadata.target).binary_ext)
    asm = {
        ext: text
        for ext, text in compiled.asm.items()
        if ext not in (binary_ext, "source") and isinstance(text, str)
    }
    return CompiledParts(str(compiled.name), metadata, binary_ext, bytes(compiled.asm[binary_ext]), asm)


def compiled_kernel_from_files(src: Any, group: dict[str, str], hash_: str) -> Any:
    """Triton's ``CompiledKernel`` loaded from a metadata group (no compile)."""
    from triton.compiler.compiler import CompiledKernel

    return CompiledKernel(src, group, hash_)


# --- binding a call as JITFunction.run does (autotuner, Helion adapter) ---


def jit_run_kwargs(kernel: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus the ``debug`` and ``instrumentation_mode`` that ``JITFunction.run`` adds
    from Triton's knobs before binding."""
    from triton import knobs

    out = dict(kwargs)
    out["debug"] = out.get("debug", kernel.debug) or knobs.runtime.debug
    out["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    return out


def by_argument(
    kernel_name: str, arg_names: Sequence[str], paths: Mapping[Any, Any], hint: str
) -> dict[str, Any]:
    """Triton's ``{(argument index,): value}`` (constexprs or attributes by path) by argument
    name; a path into a tuple argument raises ``NotImplementedError`` ending with ``hint``."""
    out: dict[str, Any] = {}
    for path, value in paths.items():
        if len(path) != 1:
            raise NotImplementedError(
                f"{kernel_name}: tuple arguments (argument path {path}) are not supported {hint}"
            )
        out[arg_names[path[0]]] = value
    return out


def compile_hash(src: Any, backend: Any, options: dict[str, Any]) -> str:
    """The cache directory name ``triton.compile(src, target, options)`` uses, computed as it does
    (in this process: from Triton 3.7 the installed stage hook's key is part of it)."""
    from triton.compiler.compiler import get_cache_invalidating_env_vars
    from triton.runtime.cache import get_cache_key

    from triton_kiln.triton_compat.versions import stages_hook_cache_key

    parsed = backend.parse_options(dict(options, **src.parse_options()))
    key = get_cache_key(src, backend, parsed, env_vars=get_cache_invalidating_env_vars())
    key += stages_hook_cache_key()
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


KEY_PARTS = ("triton", "source", "backend", "options", "env", "stages_hook")
"""What a Triton cache key is made of (``runtime.cache.get_cache_key``, then the stage hook's key),
in Triton 3.6 and 3.7 alike: Triton's own key, the source's hash, the backend's (for CUDA: the
ptxas version and the arch), the parsed options' hash, the cache-invalidating variables, and the
stage hook's key (3.7)."""


def compile_key_parts(src: Any, backend: Any, options: dict[str, Any]) -> dict[str, str]:
    """The parts of the key ``triton.compile(src, options=options)`` computes in this process,
    one per :data:`KEY_PARTS` name: which one differs tells why two processes key one compile
    differently (a diagnostic; :func:`compile_hash` is the key itself, from Triton's function)."""
    from triton.compiler.compiler import get_cache_invalidating_env_vars
    from triton.runtime.cache import triton_key

    from triton_kiln.triton_compat.versions import stages_hook_cache_key

    parsed = backend.parse_options(dict(options, **src.parse_options()))
    return parts_of_key(
        src, backend, parsed, get_cache_invalidating_env_vars(), triton_key(), stages_hook_cache_key()
    )


def parts_of_key(
    src: Any, backend: Any, parsed: Any, env_vars: Mapping[str, Any], triton: str, stages_hook: str
) -> dict[str, str]:
    """:data:`KEY_PARTS` of one key from the values ``get_cache_key`` receives."""
    return {
        "triton": str(triton),
        "source": str(src.hash()),
        "backend": str(backend.hash()),
        "options": str(parsed.hash()),
        "env": str(sorted(env_vars.items())),
        "stages_hook": stages_hook,
    }


def constants_label(constants: Mapping[Any, Any]) -> str:
    """A compile's constexpr values as one comparable string (which config of a kernel it is)."""
    return repr(sorted((str(k), repr(v)) for k, v in constants.items()))


def key_parts_differ(one: Mapping[str, str], other: Mapping[str, str]) -> list[str]:
    """The :data:`KEY_PARTS` names whose values differ between two :func:`compile_key_parts`."""
    return [name for name in KEY_PARTS if one.get(name) != other.get(name)]


def triton_cache_group(compile_hash_: str, metadata_name: str) -> dict[str, str] | None:
    """The group of files Triton's cache (under ``TRITON_CACHE_DIR``) holds for a compile hash."""
    from triton.runtime.cache import get_cache_manager

    group: dict[str, str] | None = get_cache_manager(compile_hash_).get_group(metadata_name)
    return group


def put_in_triton_cache(compile_hash_: str, files: Mapping[str, bytes | str], metadata_name: str) -> None:
    """Store ``files`` (name -> content) in Triton's cache under ``compile_hash_`` as one group."""
    from triton.runtime.cache import get_cache_manager

    manager = get_cache_manager(compile_hash_)
    group = {
        name: manager.put(content, name, binary=isinstance(content, bytes)) for name, content in files.items()
    }
    manager.put_group(metadata_name, group)


# --- Gluon (triton_kiln.compile.gluon) ---


def is_constexpr_function(fn: Any) -> bool:
    """Whether ``fn`` is a ``@constexpr_function`` helper (plain Python run at compile time)."""
    from triton.runtime.jit import ConstexprFunction

    return isinstance(fn, ConstexprFunction)


def constexpr_function(raw: Any) -> Any:
    """``triton.runtime.jit.constexpr_function(raw)``."""
    from triton.runtime.jit import constexpr_function as decorate

    return decorate(raw)


def gluon_ast_source(kernel: Any, source: Any) -> Any:
    """Gluon's own AST source for ``kernel`` with ``source``'s signature, constants and attrs."""
    from triton.experimental.gluon._runtime import GluonASTSource

    return GluonASTSource(kernel, source.signature, source.constants, source.attrs or None)


def forget_ptxas_version() -> None:
    """Drop what this process's Triton remembered about its ptxas (its version, and the features
    it derived from it), so the next compile key names the ptxas ``TRITON_PTXAS_PATH`` names now.

    Triton caches ``get_ptxas_version()`` for the process (3.6 and 3.7 alike), and a CUDA
    backend's ``hash()``, which every cache key includes, is that version. A process that
    compiled or loaded a kernel before ``TRITON_PTXAS_PATH`` was set keeps the old version in its
    keys, and every other process (a fresh one reads the variable at its first compile) computes
    other keys for the same compiles: their cache lookups miss what this process put there.
    """
    try:
        from triton.backends.nvidia import compiler as nvidia
    except ImportError:  # a Triton without the NVIDIA backend: nothing remembered
        return
    for name in ("get_ptxas_version", "get_features"):
        cached = getattr(nvidia, name, None)
        clear = getattr(cached, "cache_clear", None)
        if clear is not None:
            clear()

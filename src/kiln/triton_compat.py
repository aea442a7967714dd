"""Every place kiln touches Triton's internals, in one module.

kiln supports Triton >=3.5.1,<3.8 (tested: 3.5.1, 3.6.0, 3.7.1; docs/TRITON_VERSIONS.md). What
differs between versions is isolated here (the stage hook: section "Triton version differences"
at the end); so are the internals that could move: where ``GPUTarget`` lives, the cache-invalidating
environment variables, Triton's key (``triton_key``), the backend options class and the
metadata a launcher reads. Known limits are documented in the README's compatibility table.

Importing this module does not import Triton (``GPUTarget`` and ``ASTSource`` load it on first
use), so a process that only runs bundles can use the torch-side helpers below without it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

__all__ = [
    "ASTSource",
    "GPUTarget",
    "backend_option_names",
    "cache_invalidating_env",
    "install_stages_hook",
    "local_target",
    "make_backend",
    "seed_triton_key",
    "triton_key",
    "triton_version",
]


def __getattr__(name: str) -> Any:
    """``GPUTarget`` and ``ASTSource``: Triton's classes, imported on first use."""
    if name == "GPUTarget":
        from triton.backends.compiler import GPUTarget

        return GPUTarget
    if name == "ASTSource":
        from triton.compiler import ASTSource

        return ASTSource
    raise AttributeError(f"module 'kiln.triton_compat' has no attribute {name!r}")


def triton_version() -> str:
    import triton

    return str(triton.__version__)


def make_backend(target: GPUTarget) -> Any:
    from triton.compiler.compiler import make_backend as _make_backend

    return _make_backend(target)


@functools.cache
def backend_option_names(target: GPUTarget) -> frozenset[str]:
    """Names of the compile options Triton's backend for ``target`` accepts (``num_warps``...)."""
    backend = make_backend(target)
    options = backend.parse_options({})
    names = {f.name for f in dataclasses.fields(options)}
    # Derived from the target, not chosen by callers.
    return frozenset(names - {"arch", "backend_name", "warp_size"})


def cache_invalidating_env() -> dict[str, str]:
    """The environment variables Triton folds into its own cache key, with current values."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        values = get_cache_invalidating_env_vars()
        return {str(k): str(v) for k, v in dict(values).items()}
    except ImportError:  # pragma: no cover - older Triton computes this in Python
        from triton.knobs import compilation

        return {k: str(v) for k, v in compilation.cache_invalidating_env_vars().items()}  # pragma: no cover


def triton_env() -> dict[str, str]:
    """Every ``TRITON_*`` variable of this process (sent with each job to the worker)."""
    return {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}


def local_target() -> GPUTarget | None:
    """The local GPU's target, or ``None`` when this machine has no usable GPU."""
    from triton.backends.compiler import GPUTarget

    try:
        from triton.runtime import driver

        target = driver.active.get_current_target()
    except Exception:  # no driver, no device, no CUDA library: all mean "no GPU here"
        return None
    return target if isinstance(target, GPUTarget) else None


# ----------------------------------------------------------------------------- Triton's key

_KEY_FILE_VERSION = 1


def _triton_dir() -> Path:
    import triton

    return Path(triton.__file__).resolve().parent


def _fingerprint() -> str:
    """A cheap stand-in for Triton's key: path, size and mtime of every file the key hashes."""
    root = _triton_dir()
    entries: list[str] = [triton_version()]
    for sub in ("compiler", "backends", "language", "_C", "runtime"):
        base = root / sub
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix in (".py", ".so", ".bc") and path.is_file():
                stat = path.stat()
                entries.append(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


_TRITON_KEY: str | None = None


def triton_key(cache_dir: Path | None = None) -> str:
    """Triton's own key (a hash of its compiler, including the 500 MB ``libtriton.so``).

    Computing it costs about 2 s of CPU in a fresh process, so kiln keeps it on disk next to
    its artifacts, validated by the size and mtime of every file it covers.
    """
    global _TRITON_KEY
    if _TRITON_KEY is not None:
        return _TRITON_KEY
    fingerprint = _fingerprint()
    path = None
    if cache_dir is not None:
        path = cache_dir / f"triton-key-v{_KEY_FILE_VERSION}.json"
        try:
            record = json.loads(path.read_text())
            if record.get("fingerprint") == fingerprint and isinstance(record.get("key"), str):
                _TRITON_KEY = record["key"]
                return _TRITON_KEY
        except (OSError, ValueError):
            pass
    from triton.runtime.cache import triton_key as _compute

    key = str(_compute())
    _TRITON_KEY = key
    if path is not None:
        from kiln.files import atomic_write

        with contextlib.suppress(OSError):
            atomic_write(path, json.dumps({"fingerprint": fingerprint, "key": key}).encode())
    return key


def seed_triton_key(key: str) -> bool:
    """Make Triton's own ``triton_key()`` return ``key`` in this process, without hashing.

    Triton computes its key on a process's first compile by hashing its sources and the
    500 MB ``libtriton.so`` (0.3-0.5 s of CPU). The zygote already holds that key, read from
    kiln's fingerprint-checked file, so it installs it in place of Triton's cached function
    before its warm-up compile. Every module of Triton that imported ``triton_key`` by name
    gets the replacement. Returns ``False`` (and changes nothing) when this Triton has no
    ``triton.runtime.cache.triton_key`` of the expected cached kind, or when Triton already
    computed its key here.
    """
    try:
        import triton.runtime.cache as cache_mod
    except ImportError:  # pragma: no cover - layout of another Triton version
        return False
    original = getattr(cache_mod, "triton_key", None)
    cache_info = getattr(original, "cache_info", None)
    if original is None or cache_info is None:
        return False
    if cache_info().currsize:
        return False  # already computed in this process: nothing to save

    @functools.lru_cache
    def seeded() -> str:
        return key

    for name, module in list(sys.modules.items()):
        is_triton = name == "triton" or name.startswith("triton.")
        if is_triton and getattr(module, "triton_key", None) is original:
            setattr(module, "triton_key", seeded)  # noqa: B010 - typed as ModuleType
    return True


# --- autotuner / launch side ---------------------------------------------------------------
# What kiln's autotuner, sandbox and launcher need of Triton's (and torch's) private API. None of
# these imports Triton when this module is imported; the torch ones never import Triton at all.


@functools.cache
def triton_autotuner_class() -> type:
    """Triton's own ``Autotuner``, which ``kiln.autotune``'s class extends (the contract's
    attributes); read once, so it stays Triton's while :func:`kiln.install` routes the name."""
    from triton.runtime.autotuner import Autotuner

    cls: type = Autotuner
    return cls


def autotune_names() -> list[tuple[Any, str]]:
    """Where Triton exposes ``autotune`` and ``Autotuner``: ``(module, attribute)`` pairs that
    :func:`kiln.install` rebinds (code that reads them afterwards gets kiln's)."""
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
    return backend, create_function_from_signature(fn.signature, fn.params, backend)


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


def torch_stream_functions() -> tuple[Any, Any]:
    """torch's ``(get_raw_stream(device), get_device())`` (C functions; no Triton imported)."""
    import torch

    return torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice


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
    """The cache directory name ``triton.compile(src, target, options)`` uses, computed as it does."""
    from triton.compiler.compiler import get_cache_invalidating_env_vars
    from triton.runtime.cache import get_cache_key

    parsed = backend.parse_options(dict(options, **src.parse_options()))
    key = get_cache_key(src, backend, parsed, env_vars=get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


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


# --- Gluon (kiln.compile.gluon) ---


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


# --- Triton version differences ---
# Everything below names a difference between the Triton versions kiln supports (see
# docs/TRITON_VERSIONS.md). Code elsewhere calls these helpers instead of testing versions.

SUPPORTED_TRITON = ("3.5.1", "3.6.0", "3.7.1")
"""Versions CI runs the compile-pool and key tests on (.ci/run; pyproject's range covers them)."""

StagesEditor = Callable[[Any, dict[str, Any], Any, Any, Any], None]
"""``edit(backend, stages, options, language, capability)``: rewrites Triton's stage table."""


def triton_version_tuple() -> tuple[int, int, int]:
    """``triton.__version__`` as numbers (``"3.7.1+git..."`` -> ``(3, 7, 1)``)."""
    parts: list[int] = []
    for piece in triton_version().split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def stages_hook_is_keyed() -> bool:
    """Whether this Triton asks the stage hook for a cache key (``hook()``; Triton >= 3.7)."""
    return triton_version_tuple() >= (3, 7, 0)


def install_stages_hook(edit: StagesEditor, key: str) -> Callable[[], None]:
    """Chain ``edit`` onto Triton's ``knobs.runtime.add_stages_inspection_hook``.

    The hook is called in two forms, depending on the version:

    * every version: ``hook(backend, stages, options, language, capability)`` from the
      backend's ``add_stages``, to rewrite the compile pipeline (what ``edit`` does);
    * Triton >= 3.7: also ``hook()``, which must return ``(cache_key, hash)``; Triton adds the
      key to its compile cache key and the hash to the JIT's specialization key, so binaries
      built with a rewritten pipeline never mix with plain ones. ``key`` names ``edit``.

    A hook already installed (by kiln or anyone) keeps running first, and its key is kept.
    Triton 3.5 has no such knob: there ``edit`` wraps each backend's ``add_stages`` instead
    (same arguments, same effect; 3.5 has no hook key either). Returns a function that puts
    back what was there before (for tests).
    """
    import triton

    if not hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):
        return _wrap_backend_add_stages(edit)
    previous = triton.knobs.runtime.add_stages_inspection_hook

    def hook(*args: Any) -> Any:
        if not args:  # Triton >= 3.7 asks for the hook's cache key
            prev_key, prev_hash = previous() if previous is not None else ("", "")
            full_key = f"{prev_key}{key}"
            return full_key, hashlib.sha256(f"{prev_hash}:{full_key}".encode()).hexdigest()
        if previous is not None:
            previous(*args)
        edit(*args)
        return None

    triton.knobs.runtime.add_stages_inspection_hook = hook

    def remove() -> None:
        triton.knobs.runtime.add_stages_inspection_hook = previous

    return remove


def _wrap_backend_add_stages(edit: StagesEditor) -> Callable[[], None]:
    """Triton 3.5: run ``edit`` after every backend's ``add_stages`` (it has no stage hook)."""
    from triton.backends import backends

    originals: list[tuple[Any, Any]] = []
    for backend in backends.values():
        cls = backend.compiler
        original = cls.add_stages
        originals.append((cls, original))

        def add_stages(
            self: Any, stages: dict[str, Any], options: Any, language: Any, _original: Any = original
        ) -> None:
            _original(self, stages, options, language)
            parse_arch = getattr(self, "_parse_arch", None)
            capability = parse_arch(options.arch) if parse_arch is not None else None
            edit(self, stages, options, language, capability)

        cls.add_stages = add_stages

    def remove() -> None:
        for cls, original in originals:
            cls.add_stages = original

    return remove


# --- validation ---
# Targets and signature types checked in the caller, before Triton sees them: Triton's own
# errors for these come late (in a worker) or name the wrong cause (a string arch is reported
# as a bad TRITON_OVERRIDE_ARCH).

CUDA_ARCHS: tuple[int, ...] = (70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)
"""CUDA compute capabilities Triton 3.6's NVIDIA backend compiles for (its ptxas accepts them)."""

SCALAR_TYPES: tuple[str, ...] = (
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
    "fp16", "bf16", "fp32", "fp64", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp8e4b15",
)  # fmt: skip
"""Triton's scalar type names in signatures (``*`` before one makes a pointer: ``*fp16``)."""


def target_problem(target: GPUTarget) -> str | None:
    """Why ``target`` cannot be compiled for (``None``: it can), saying how to write it."""
    backend, arch, warp_size = target.backend, target.arch, target.warp_size
    if not isinstance(backend, str) or not backend:
        return f"GPUTarget backend must be a string such as 'cuda', got {backend!r}"
    if isinstance(warp_size, bool) or not isinstance(warp_size, int) or warp_size <= 0:
        return f"GPUTarget warp_size must be a positive int (32 on NVIDIA GPUs), got {warp_size!r}"
    if backend != "cuda":
        return None
    if isinstance(arch, bool) or not isinstance(arch, int):
        digits = "".join(c for c in str(arch) if c.isdigit())
        example = digits if digits else "90"
        return (
            f"GPUTarget arch must be an int compute capability such as 90 (for sm_90), got {arch!r}; "
            f"write GPUTarget('cuda', {example}, {warp_size})"
        )
    if arch not in CUDA_ARCHS:
        return (
            f"GPUTarget arch {arch} is not a CUDA compute capability Triton {triton_version()} compiles "
            f"for; supported: {', '.join(map(str, CUDA_ARCHS))} (90 is an H100/H200, 80 an A100)"
        )
    return None


def signature_type_problem(kind: str) -> str | None:
    """Why ``kind`` is not a type Triton accepts in a signature (``None``: it is)."""
    base = kind.lstrip("*")
    if kind.startswith("*") and base.startswith("k"):
        base = base[1:]  # "*kfp16": a pointer to constant data
    if kind == "constexpr" or kind.startswith(("tensordesc<", "(")):
        return None  # Triton's own parser checks these (tensor descriptors, tuples)
    if base in SCALAR_TYPES and (kind.startswith("*") or base == kind):
        return None
    try:  # never stricter than Triton: accept whatever its own parser accepts
        from triton.language import str_to_ty

        str_to_ty(kind, None)
        return None
    except Exception:  # any failure of Triton's parser means "not a type"
        pass
    return (
        f"{kind!r} is not a Triton type; use one of {', '.join(SCALAR_TYPES)}, a pointer to one "
        f"('*fp16', '*i32'), or 'constexpr'"
    )

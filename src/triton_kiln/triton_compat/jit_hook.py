"""Where :mod:`triton_kiln.routing.jit` hooks into Triton's JIT: ``JITFunction._do_compile``.

``JITFunction.run`` looks a call's specialization up in the function's in-memory cache; on a
miss it packs the call (``_pack_args``) and calls::

    self._do_compile(key, signature, device, constexprs, options, attrs, warmup)

which builds ``self.ASTSource(self, signature, constexprs, attrs)`` and calls
``triton.compile(src, target=target, options=options.__dict__)`` (the target and backend are
``self.device_caches[device]``'s). ``JITFunction.preload`` and Triton's ``warmup`` come through
the same method. Its name, its arguments and what it does with them are the same in Triton 3.5.1,
3.6.0 and 3.7.1 (so :mod:`.versions` holds nothing for it). Replacing it on the class covers
every ``@triton.jit`` function, those made before the replacement included, and
``GluonJITFunction`` (a subclass).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

DO_COMPILE = "_do_compile"


def jit_function_class() -> Any:
    from triton.runtime.jit import JITFunction

    return JITFunction


def do_compile_current() -> Any:
    """``JITFunction._do_compile`` as stored on the class (what ``set_do_compile`` gives back)."""
    return jit_function_class().__dict__[DO_COMPILE]


def set_do_compile(value: Any) -> None:
    setattr(jit_function_class(), DO_COMPILE, value)


@dataclasses.dataclass(frozen=True)
class JitCompile:
    """What ``_do_compile`` is about to hand ``triton.compile``, and where it came from."""

    fn: Any  # the JITFunction
    src: Any  # the ASTSource (GluonASTSource for Gluon) ``_do_compile`` would build
    target: GPUTarget
    backend: Any
    options: dict[str, Any]  # options.__dict__: every field of the backend's options
    default_options: dict[str, Any]  # backend.parse_options({}).__dict__
    signature: dict[str, str]  # by argument name
    constants: dict[Any, Any]  # by path, as Triton keys them
    attrs: dict[Any, Any]  # by path


def jit_compile_inputs(
    fn: Any, device: Any, signature: dict[str, Any], constexprs: dict[Any, Any], options: Any, attrs: Any
) -> JitCompile:
    """The compile ``fn._do_compile(key, signature, device, constexprs, options, attrs, warmup)``
    makes (``fn.device_caches[device]`` exists: ``run``/``preload`` made it just before)."""
    _, _, target, backend, _ = fn.device_caches[device]
    src = fn.ASTSource(fn, signature, constexprs, attrs)
    return JitCompile(
        fn=fn,
        src=src,
        target=target,
        backend=backend,
        options=dict(options.__dict__),
        default_options=dict(backend.parse_options({}).__dict__),
        signature=dict(signature),
        constants=dict(constexprs),
        attrs=dict(attrs or {}),
    )


def jit_kernel_name(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or getattr(fn.fn, "__qualname__", repr(fn)))


def jit_kernel_file(fn: Any) -> str:
    code = getattr(getattr(fn, "fn", None), "__code__", None)
    return str(code.co_filename) if code is not None else "<unknown>"


def async_compile_active() -> bool:
    """Whether Triton's async compile mode (``triton.runtime._async_compile``) is on in this
    context: ``_do_compile`` then hands the compile to its executor instead of compiling."""
    try:
        from triton.runtime import _async_compile
    except ImportError:  # pragma: no cover - every supported Triton has it
        return False
    return _async_compile.active_mode.get() is not None


def caller_stages_hooked() -> bool:
    """Whether this process rewrites Triton's compile pipeline (``knobs.runtime.
    add_stages_inspection_hook``, Triton >= 3.6; 3.5 has no such knob): kiln's workers may not
    have the same hook, so the compile stays Triton's. (From 3.7 the hook also adds an entry to
    the JIT's specialization, which is no argument of the kernel.)"""
    import triton

    return getattr(triton.knobs.runtime, "add_stages_inspection_hook", None) is not None


def is_compile_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Triton's own error about the kernel's code (``CompilationError`` and its
    subclasses: what ``triton.compile`` raises for a kernel it cannot compile)."""
    from triton.compiler.errors import CompilationError

    return isinstance(exc, CompilationError)


def compiled_kernel_hash(kernel: Any) -> str | None:
    """The cache hash a ``CompiledKernel`` was loaded or compiled under (``None`` for anything else)."""
    value = getattr(kernel, "hash", None)
    return value if isinstance(value, str) else None


def triton_cache_file_name(src: Any) -> str:
    """The base name ``triton.compile`` gives a compile's files (``src.name[:150]``)."""
    return str(src.name)[:150]

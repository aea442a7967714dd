"""Worker side of a kernel's transport: the ``@triton.jit`` function a :class:`KernelSpec` names.

A spec that can travel as source is rebuilt here (its globals bound from their data forms,
compiled with the original file name, line numbers and ``__future__`` flags, given the
original's parameter defaults, wrapped in ``triton.jit``); one that cannot is imported by
``module:qualname``. Rebuilt functions are memoized per process by the
spec's identity.

What a worker reads of a spec is :class:`Rebuildable`, so this module names no spec and
:mod:`triton_kiln.compile.kernel_spec` builds on it (``KernelSpec.load`` is :func:`load`).
"""

from __future__ import annotations
import __future__

import builtins
import importlib
import linecache
import types
from typing import Any, Protocol

from triton_kiln.compile.values import GlobalValue, decanonical
from triton_kiln.errors import KernelSpecError


class Rebuildable(Protocol):
    """What a worker reads of a :class:`~triton_kiln.compile.kernel_spec.KernelSpec` to get its
    kernel back (a ``"jit"`` global's payload is one too)."""

    @property
    def name(self) -> str: ...
    @property
    def module(self) -> str: ...
    @property
    def qualname(self) -> str: ...
    @property
    def importable(self) -> bool: ...
    @property
    def src(self) -> str: ...
    @property
    def filename(self) -> str: ...
    @property
    def first_line(self) -> int: ...
    @property
    def jit_options(self) -> tuple[tuple[str, Any], ...]: ...
    @property
    def globals(self) -> tuple[tuple[str, GlobalValue], ...]: ...
    @property
    def language(self) -> str: ...
    @property
    def defaults(self) -> tuple[tuple[str, GlobalValue], ...]: ...
    @property
    def lazy_annotations(self) -> bool: ...
    @property
    def identity(self) -> str: ...
    @property
    def by_source(self) -> bool: ...


_REBUILT: dict[str, Any] = {}  # identity -> rebuilt JIT function (per worker process)


def load(spec: Rebuildable) -> Any:
    """The JIT function ``spec`` describes, rebuilt or imported."""
    return _load(spec, _REBUILT)


def _load(spec: Rebuildable, memo: dict[str, Any]) -> Any:
    """Rebuild from source when possible (see :attr:`KernelSpec.by_source`), else import."""
    if spec.by_source:
        return _rebuild(spec, memo)
    if spec.importable:
        obj: Any = importlib.import_module(spec.module)
        for part in spec.qualname.split("."):
            obj = getattr(obj, part)
        return obj
    return _rebuild(spec, memo)


def _rebuild(spec: Rebuildable, memo: dict[str, Any]) -> Any:
    key = spec.identity
    if key in memo:
        return memo[key]
    from triton_kiln.compile import gluon

    # Same module name as the original, so Triton's names and cache keys look the same.
    namespace: dict[str, Any] = {"__name__": spec.module, "__builtins__": builtins}
    for name, value in spec.globals:
        _bind(namespace, name, _rebuild_value(name, value, memo))
    # Same file name and line numbers as the original: Triton writes both into the binary's
    # line info (so the cubin equals a direct compile's), and tracebacks point to the real file.
    # The padded text is visible to ``linecache`` only while Triton's jit reads the source.
    filename = spec.filename
    text = "\n" * (spec.first_line - 1) + spec.src
    lines = text.splitlines(keepends=True)
    previous = linecache.cache.get(filename)
    linecache.cache[filename] = (len(text), None, lines, filename)
    try:
        # The original's own future flags, not this module's: with ``from __future__ import
        # annotations`` the annotations stay strings, without it Python evaluates them (and
        # Triton reads ``tl.constexpr`` the class where the caller has it).
        flags = __future__.annotations.compiler_flag if spec.lazy_annotations else 0
        code = compile(text, filename, "exec", flags=flags, dont_inherit=True)
        exec(code, namespace)
        raw = namespace[spec.name]
        _set_defaults(raw, spec, memo)
        options = {k: v for k, v in spec.jit_options if v not in (None, ())}
        jitted = gluon.rejit(spec.language, raw, options)
    finally:
        if previous is None:
            linecache.cache.pop(filename, None)
        else:
            linecache.cache[filename] = previous
    namespace[spec.name] = jitted
    memo[key] = jitted
    return jitted


def _set_defaults(raw: Any, spec: Rebuildable, memo: dict[str, Any]) -> None:
    """Give the rebuilt function the caller's default values.

    ``exec`` evaluated the default expressions against the globals as they are now; the
    caller's Python evaluated them when it defined the kernel, and those values are what
    Triton binds (they differ if the module rebound a constant after the ``def``).
    """
    if not spec.defaults:
        return
    values = {
        param: _rebuild_value(f"{spec.name}({param}=...)", value, memo) for param, value in spec.defaults
    }
    keyword_only = set(raw.__kwdefaults__ or ())
    positional = tuple(v for param, v in values.items() if param not in keyword_only)
    if len(positional) != len(raw.__defaults__ or ()):
        raise KernelSpecError(
            f"kernel {spec.name!r}: the rebuilt function has {len(raw.__defaults__ or ())} positional "
            f"default(s), the original {len(positional)}; its source and its signature disagree."
        )
    raw.__defaults__ = positional or None
    raw.__kwdefaults__ = {param: values[param] for param in keyword_only} or None


def _bind(namespace: dict[str, Any], dotted: str, value: Any) -> None:
    """Bind ``a.b.c`` in a namespace, creating placeholder modules for the intermediate parts."""
    parts = dotted.split(".")
    if len(parts) == 1:
        namespace[dotted] = value
        return
    holder = namespace.get(parts[0])
    if not isinstance(holder, types.ModuleType):
        holder = types.ModuleType(parts[0])
        namespace[parts[0]] = holder
    for part in parts[1:-1]:
        child = getattr(holder, part, None)
        if not isinstance(child, types.ModuleType):
            child = types.ModuleType(part)
            setattr(holder, part, child)
        holder = child
    setattr(holder, parts[-1], value)


def _rebuild_value(name: str, value: GlobalValue, memo: dict[str, Any]) -> Any:
    import triton.language as tl

    kind, payload = value
    if kind == "module":
        return importlib.import_module(payload)
    if kind == "object":
        module_name, qualname = payload
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    if kind == "constexpr":
        return tl.constexpr(decanonical(payload))
    if kind == "constexpr_dtype":
        return tl.constexpr(_dtype(payload))
    if kind == "dtype":
        return _dtype(payload)
    if kind == "value":
        return decanonical(payload)
    if kind == "jit":
        return _load(payload, memo)
    raise KernelSpecError(f"global {name!r} of kind {kind!r} cannot be rebuilt in a worker")


def _dtype(name: str) -> Any:
    import triton.language as tl

    for candidate in vars(tl).values():
        if isinstance(candidate, tl.dtype) and str(candidate) == name:
            return candidate
    raise KernelSpecError(f"unknown Triton dtype {name!r}")

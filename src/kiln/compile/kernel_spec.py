"""How a ``@triton.jit`` kernel travels to a worker, and what makes up its identity.

A kernel is described by a :class:`KernelSpec`, built in the parent by walking the kernel's
source: every global name it reads is resolved and classified. The spec serves two purposes:

* **identity** (:attr:`KernelSpec.identity`): a stable hash of the kernel's source, the
  sources of the ``@triton.jit`` helpers it calls (transitively), and the values of the
  globals they read (constexprs, dtypes, plain numbers). It feeds the compile key.
* **transport**: when every global the kernel (and its helpers) read can be rebuilt from data
  (constexprs, dtypes, plain values, modules, library objects, other ``@jit`` functions), the
  kernel travels as source and the worker rebuilds it with ``triton.jit``, never importing the
  user's module (which may import torch: seconds per process). Otherwise it travels as
  ``module:qualname`` and the worker imports it (usually from the zygote's preloaded modules).
  A kernel that is neither importable (``__main__``, a function body, a notebook) nor
  rebuildable makes :class:`~kiln.errors.KernelSpecError`, which says what to change.

Nothing here imports a worker or starts a process; it is pure analysis.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import importlib
import inspect
import json
import linecache
import sys
import types
from dataclasses import dataclass
from typing import Any

from kiln.compile import gluon
from kiln.errors import KernelSpecError

# ----------------------------------------------------------------------------- classification

# A global's value, as data: (kind, payload). Kinds:
#   "module"    payload: module name
#   "object"    payload: [module, qualname] of an importable object from a library module
#   "constexpr" payload: canonical value
#   "dtype"     payload: Triton dtype name
#   "value"     payload: canonical value (int, float, bool, str, None, tuples)
#   "jit"       payload: KernelSpec of a helper
#   "opaque"    payload: [type name, repr] -- hashed, but cannot be shipped by source
GlobalValue = tuple[str, Any]

_LIBRARY_PREFIXES = ("triton", "torch", "numpy", "math", "builtins", "functools", "typing")


def _is_jit(obj: Any) -> bool:
    try:
        from triton.runtime.jit import JITCallable
    except ImportError:  # Triton < 3.5 has no JITCallable
        from triton.runtime.jit import JITFunction as JITCallable
    return isinstance(obj, JITCallable)


def _canonical(value: Any) -> Any:
    """A JSON-able form of a plain value that keeps types apart (1, 1.0 and True differ)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [_canonical(v) for v in value]]
    raise TypeError(type(value).__name__)


def _decanonical(data: Any) -> Any:
    if data is None or isinstance(data, str):
        return data
    tag, payload = data
    if tag == "bool":
        return bool(payload)
    if tag == "int":
        return int(payload)
    if tag == "float":
        return float(payload)
    if tag == "tuple":
        return tuple(_decanonical(v) for v in payload)
    if tag == "list":
        return [_decanonical(v) for v in payload]
    raise ValueError(f"unknown canonical tag {tag!r}")


def canonical_value(value: Any) -> Any:
    """Canonical, type-tagged JSON form of a constexpr or option value, for keys.

    Triton dtypes and ``tl.constexpr`` wrappers are reduced to their meaning; anything else
    that is not a plain value is tagged with its type and ``repr`` (stable only if its repr is).
    """
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        return ["constexpr", canonical_value(value.value)]
    if isinstance(value, tl.dtype):
        return ["dtype", str(value)]
    try:
        return _canonical(value)
    except TypeError:
        return ["opaque", f"{type(value).__module__}.{type(value).__qualname__}", repr(value)]


def _classify(value: Any, *, seen: dict[int, KernelSpec]) -> GlobalValue:
    import triton.language as tl

    if _is_jit(value):
        return ("jit", KernelSpec.of(value, _seen=seen))
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if isinstance(value, tl.constexpr):
        try:
            return ("constexpr", _canonical(value.value))
        except TypeError:
            if isinstance(value.value, tl.dtype):
                return ("constexpr_dtype", str(value.value))
            return ("opaque", [type(value.value).__qualname__, repr(value.value)])
    if isinstance(value, tl.dtype):
        return ("dtype", str(value))
    try:
        return ("value", _canonical(value))
    except TypeError:
        pass
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and module.split(".")[0] in _LIBRARY_PREFIXES:
        return ("object", [module, qualname])
    return ("opaque", [f"{type(value).__module__}.{type(value).__qualname__}", repr(value)])


# ----------------------------------------------------------------------------- source analysis


class _NameCollector(ast.NodeVisitor):
    """Collects names a function stores locally and the dotted global chains it loads."""

    def __init__(self) -> None:
        self.locals: set[str] = set()
        self.loads: set[tuple[str, ...]] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            self.locals.add(arg.arg)
        if args.vararg:
            self.locals.add(args.vararg.arg)
        if args.kwarg:
            self.locals.add(args.kwarg.arg)
        for stmt in node.body:
            self.visit(stmt)
        # decorators and annotations are evaluated at definition time, not compiled

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.locals.add(node.id)
        else:
            self.loads.add((node.id,))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        current: ast.expr = node
        while isinstance(current, ast.Attribute):
            chain.append(current.attr)
            current = current.value
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
            chain.append(current.id)
            self.loads.add(tuple(reversed(chain)))
        else:
            self.visit(current)


_ANALYSIS: dict[str, tuple[frozenset[str], frozenset[tuple[str, ...]]]] = {}


def _analyse(src: str) -> tuple[frozenset[str], frozenset[tuple[str, ...]]]:
    cached = _ANALYSIS.get(src)
    if cached is None:
        tree = ast.parse(src)
        collector = _NameCollector()
        collector.visit(tree)
        cached = (frozenset(collector.locals), frozenset(collector.loads))
        _ANALYSIS[src] = cached
    return cached


def _resolve(chain: tuple[str, ...], scope: dict[str, Any]) -> tuple[str, Any] | None:
    """Resolve a dotted chain against a scope; returns the longest meaningful prefix and its value.

    ``tl.float16`` resolves to the *module* ``tl`` (library attributes are part of Triton's own
    key); ``cfg.BLOCK`` in a user module resolves to the value of ``cfg.BLOCK``.
    """
    if chain[0] not in scope:
        return None
    name = chain[0]
    value = scope[name]
    for attr in chain[1:]:
        if not isinstance(value, types.ModuleType) or value.__name__.split(".")[0] in _LIBRARY_PREFIXES:
            break
        if not hasattr(value, attr):
            break
        value = getattr(value, attr)
        name = f"{name}.{attr}"
    return name, value


# ----------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class KernelSpec:
    """A kernel's identity and how to rebuild it in another process.

    ``module``/``qualname`` are set when the kernel can be imported by reference; ``src`` and
    ``globals`` always describe it (for the identity hash, and for rebuilding by source).
    """

    name: str
    module: str
    qualname: str
    importable: bool
    src: str
    filename: str
    first_line: int
    jit_options: tuple[tuple[str, Any], ...]
    globals: tuple[tuple[str, GlobalValue], ...]
    language: str = gluon.TRITON  # "triton", "gluon" or "constexpr_function" (kiln.compile.gluon)

    # -- construction -------------------------------------------------------------------

    @classmethod
    def of(cls, fn: Any, *, _seen: dict[int, KernelSpec] | None = None) -> KernelSpec:
        """Describe a ``@triton.jit`` function (reading the current values of its globals)."""
        if not _is_jit(fn):
            raise KernelSpecError(
                f"{fn!r} is not a @triton.jit or @gluon.jit function; kiln compiles Triton and Gluon "
                f"kernels only."
            )
        seen = {} if _seen is None else _seen
        if id(fn) in seen:
            return seen[id(fn)]
        src: str = fn.src
        scope: dict[str, Any] = dict(fn.__globals__)
        with contextlib.suppress(TypeError, ValueError):
            scope.update(inspect.getclosurevars(fn.fn).nonlocals)
        local_names, loads = _analyse(src)
        # Placeholder breaks recursion for self-referencing kernels.
        placeholder = cls(fn.__name__, fn.__module__, fn.__qualname__, False, src, "", 0, (), ())
        seen[id(fn)] = placeholder
        resolved: dict[str, GlobalValue] = {}
        for chain in sorted(loads):
            if chain[0] in local_names:
                continue
            hit = _resolve(chain, scope)
            if hit is None:
                continue  # a builtin, or a name Triton will report as undefined
            name, value = hit
            if value is fn:
                continue
            resolved[name] = _classify(value, seen=seen)
        jit_options = (
            ("debug", getattr(fn, "debug", None)),
            ("do_not_specialize", tuple(getattr(fn, "do_not_specialize", ()) or ())),
            ("noinline", getattr(fn, "noinline", None)),
        )
        spec = cls(
            name=fn.__name__,
            module=fn.__module__,
            qualname=fn.__qualname__,
            importable=_importable(fn),
            src=src,
            filename=inspect.getsourcefile(fn.fn) or "<unknown>",
            first_line=_def_line(fn),
            jit_options=jit_options,
            globals=tuple(sorted(resolved.items())),
            language=gluon.language_of(fn),
        )
        seen[id(fn)] = spec
        return spec

    # -- identity -----------------------------------------------------------------------

    def _identity_data(self) -> Any:
        def value_data(value: GlobalValue) -> Any:
            kind, payload = value
            if kind == "jit":
                return ["jit", payload.identity]
            return [kind, payload]

        data = {
            "name": self.name,
            "src": self.src,
            # The binary embeds line info: the same source on another line is another cubin.
            "first_line": self.first_line,
            "jit": [[k, _canonical(v) if not isinstance(v, tuple) else list(v)] for k, v in self.jit_options],
            "globals": [[n, value_data(v)] for n, v in self.globals],
        }
        if self.language != gluon.TRITON:  # Triton kernels keep the identities they always had
            data["language"] = self.language
        return data

    @property
    def identity(self) -> str:
        """Hash of everything about the kernel that changes its binary (source, helpers, globals)."""
        cached = self.__dict__.get("_identity")
        if cached is None:
            blob = json.dumps(self._identity_data(), sort_keys=True, default=repr)
            cached = hashlib.sha256(blob.encode()).hexdigest()
            object.__setattr__(self, "_identity", cached)
        return cached

    def unshippable_globals(self) -> list[str]:
        """Names of globals that cannot be rebuilt from data (only matters for by-source transport)."""
        bad = [name for name, (kind, _) in self.globals if kind == "opaque"]
        for _, (kind, payload) in self.globals:
            if kind == "jit" and not payload.importable:
                bad.extend(payload.unshippable_globals())
        return bad

    def check_shippable(self) -> None:
        if self.importable:
            return
        bad = self.unshippable_globals()
        if bad:
            raise KernelSpecError(
                f"kernel {self.name!r} (defined in {self.module}, {self.filename}:{self.first_line}) is "
                f"not importable by name, so kiln sends it to workers as source, but it reads the "
                f"global(s) {sorted(set(bad))}, which are neither constexprs, dtypes, plain values, "
                f"modules nor @triton.jit functions. Move the kernel into an importable module, or "
                f"make those globals tl.constexpr values."
            )

    # -- rebuilding (worker side) ---------------------------------------------------------

    @property
    def by_source(self) -> bool:
        """Whether workers rebuild this kernel from source rather than importing its module.

        Source is preferred whenever every global can be rebuilt from data: the worker then
        never imports the user's module (which may import torch and cost seconds per process).
        """
        return not self.unshippable_globals()

    def load(self) -> Any:
        """Return the JIT function this spec describes, rebuilding or importing it."""
        return _load(self, _REBUILT)


def _def_line(fn: Any) -> int:
    """The line of the ``def`` (below any decorators): where ``fn.src`` and Triton's line info start."""
    start = int(getattr(fn, "starting_line_number", 1))
    for offset, line in enumerate(getattr(fn, "raw_src", None) or ()):
        if line.strip().startswith("def "):
            return start + offset
    return start


def _importable(fn: Any) -> bool:
    module_name = fn.__module__
    qualname = fn.__qualname__
    if module_name in ("__main__", "__mp_main__") or "<locals>" in qualname:
        return False
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__spec__", None) is None:
        return False
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn


_REBUILT: dict[str, Any] = {}  # identity -> rebuilt JIT function (per worker process)


def _load(spec: KernelSpec, memo: dict[str, Any]) -> Any:
    """Rebuild from source when possible (see :attr:`KernelSpec.by_source`), else import."""
    if spec.by_source:
        return _rebuild(spec, memo)
    if spec.importable:
        obj: Any = importlib.import_module(spec.module)
        for part in spec.qualname.split("."):
            obj = getattr(obj, part)
        return obj
    return _rebuild(spec, memo)


def _rebuild(spec: KernelSpec, memo: dict[str, Any]) -> Any:
    key = spec.identity
    if key in memo:
        return memo[key]
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
        code = compile(text, filename, "exec")
        exec(code, namespace)
        raw = namespace[spec.name]
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
        return tl.constexpr(_decanonical(payload))
    if kind == "constexpr_dtype":
        return tl.constexpr(_dtype(payload))
    if kind == "dtype":
        return _dtype(payload)
    if kind == "value":
        return _decanonical(payload)
    if kind == "jit":
        return _load(payload, memo)
    raise KernelSpecError(f"global {name!r} of kind {kind!r} cannot be rebuilt in a worker")


def _dtype(name: str) -> Any:
    import triton.language as tl

    for candidate in vars(tl).values():
        if isinstance(candidate, tl.dtype) and str(candidate) == name:
            return candidate
    raise KernelSpecError(f"unknown Triton dtype {name!r}")

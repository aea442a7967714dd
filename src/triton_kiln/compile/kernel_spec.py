"""How a ``@triton.jit`` kernel travels to a worker, and what makes up its identity.

A kernel is described by a :class:`KernelSpec`, built in the parent by walking the kernel's
source: every global name it reads is resolved and classified, in its body and in its
signature (parameter defaults and annotations, which Python evaluates at the ``def`` and
Triton's code generator evaluates again when it compiles), and its parameter defaults are
kept as the values Python gave them (what Triton binds). The spec serves two purposes:

* **identity** (:attr:`KernelSpec.identity`): a stable hash of the kernel's source, the
  sources of the ``@triton.jit`` helpers it calls (transitively), the values of the globals
  they read (constexprs, dtypes, plain numbers) and their parameter defaults. It feeds the
  compile key.
* **transport**: when every global the kernel (and its helpers) read can be rebuilt from data
  (constexprs, dtypes, plain values, modules, library objects, other ``@jit`` functions), the
  kernel travels as source and the worker rebuilds it with ``triton.jit``, never importing the
  user's module (which may import torch: seconds per process). Otherwise it travels as
  ``module:qualname`` and the worker imports it (usually from the zygote's preloaded modules).
  A kernel that is neither importable (``__main__``, a function body, a notebook) nor
  rebuildable makes :class:`~triton_kiln.errors.KernelSpecError` before anything is compiled; it
  names the globals and defaults that cannot travel and says what to change.

Nothing here imports a worker or starts a process; it is pure analysis. The worker's side
(rebuilding or importing the function) is :mod:`triton_kiln.compile.rebuild`; the data forms of
values are :mod:`triton_kiln.compile.values`.
"""

from __future__ import annotations
import __future__

import ast
import contextlib
import hashlib
import inspect
import json
import sys
import types
from dataclasses import dataclass
from typing import Any

from triton_kiln.compile import gluon, rebuild, spec_batch
from triton_kiln.compile.parse import parse
from triton_kiln.compile.values import GlobalValue, canonical
from triton_kiln.errors import KernelSpecError
from triton_kiln.triton_compat import is_jit_function, jit_parts

# ----------------------------------------------------------------------------- classification

_LIBRARY_PREFIXES = ("triton", "torch", "numpy", "math", "builtins", "functools", "typing")


def _classify(value: Any, *, seen: dict[int, KernelSpec]) -> GlobalValue:
    import triton.language as tl

    if is_jit_function(value):
        return ("jit", KernelSpec.of(value, _seen=seen))
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    if isinstance(value, tl.constexpr):
        try:
            return ("constexpr", canonical(value.value))
        except TypeError:
            if isinstance(value.value, tl.dtype):
                return ("constexpr_dtype", str(value.value))
            return ("opaque", [type(value.value).__qualname__, repr(value.value)])
    if isinstance(value, tl.dtype):
        return ("dtype", str(value))
    try:
        return ("value", canonical(value))
    except TypeError:
        pass
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and module.split(".")[0] in _LIBRARY_PREFIXES:
        return ("object", [module, qualname])
    return ("opaque", [f"{type(value).__module__}.{type(value).__qualname__}", repr(value)])


# ----------------------------------------------------------------------------- source analysis


class _NameCollector(ast.NodeVisitor):
    """Collects the names a function stores locally and the dotted global chains it loads.

    Loads of the body (``loads``) are hidden by the function's locals and parameters. Loads of
    its signature (``signature_loads``: parameter defaults and annotations) are not: Python
    evaluates them where the function is defined, and Triton's code generator evaluates them
    again, against the kernel's globals, when it compiles (``def k(G: tl.constexpr = G)`` reads
    the global ``G``).
    """

    def __init__(self) -> None:
        self.locals: set[str] = set()
        self.loads: set[tuple[str, ...]] = set()
        self.signature_loads: set[tuple[str, ...]] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if args.vararg:
            params.append(args.vararg)
        if args.kwarg:
            params.append(args.kwarg)
        outer = _NameCollector()
        for expr in [*args.defaults, *args.kw_defaults, *(p.annotation for p in params), node.returns]:
            if expr is not None:
                outer.visit(expr)
        self.signature_loads |= outer.loads
        self.locals.update(p.arg for p in params)
        for stmt in node.body:
            self.visit(stmt)
        # decorators are applied at definition time, and are not part of Triton's source

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


@dataclass(frozen=True)
class _Analysis:
    """The names a function's source defines and reads (see :class:`_NameCollector`)."""

    locals: frozenset[str]
    loads: frozenset[tuple[str, ...]]
    signature_loads: frozenset[tuple[str, ...]]

    def global_chains(self) -> list[tuple[str, ...]]:
        """Every dotted chain that names a global: the body's unless a local hides it, the
        signature's always."""
        body = [chain for chain in self.loads if chain[0] not in self.locals]
        return sorted({*body, *self.signature_loads})


_ANALYSIS: dict[str, _Analysis] = {}


def _analyse(src: str) -> _Analysis:
    cached = _ANALYSIS.get(src)
    if cached is None:
        tree = parse(src)
        collector = _NameCollector()
        collector.visit(tree)
        cached = _Analysis(
            frozenset(collector.locals), frozenset(collector.loads), frozenset(collector.signature_loads)
        )
        _ANALYSIS[src] = cached
    return cached


def _resolve(chain: tuple[str, ...], scope: dict[str, Any]) -> tuple[str, Any] | None:
    """Resolve a dotted chain against a scope; returns the longest meaningful prefix and its value.

    ``tl.float16`` resolves to the *module* ``tl`` (library attributes are part of Triton's own
    key); ``cfg.BLOCK`` in a user module resolves to the value of ``cfg.BLOCK``. A ``@jit``
    helper in a torch module (inductor's ``triton_helpers.maximum``, which Helion's generated
    kernels call) resolves to the helper itself: it travels as source, so a worker never
    imports torch to rebuild the kernel (seconds per worker).
    """
    if chain[0] not in scope:
        return None
    name = chain[0]
    value = scope[name]
    for attr in chain[1:]:
        if not isinstance(value, types.ModuleType) or not hasattr(value, attr):
            break
        top = value.__name__.split(".")[0]
        if top in _LIBRARY_PREFIXES and not (top == "torch" and is_jit_function(getattr(value, attr))):
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
    ``defaults`` are the parameter defaults as the caller's Python evaluated them when it
    defined the kernel (what Triton binds); ``lazy_annotations`` says whether the kernel's
    module has ``from __future__ import annotations`` (its annotations are then strings).
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
    language: str = gluon.TRITON  # "triton", "gluon" or "constexpr_function" (triton_kiln.compile.gluon)
    defaults: tuple[tuple[str, GlobalValue], ...] = ()  # parameter -> its default, in order
    lazy_annotations: bool = False

    # -- construction -------------------------------------------------------------------

    batch = staticmethod(spec_batch.batch)  # see triton_kiln.compile.spec_batch

    @classmethod
    def of(cls, fn: Any, *, _seen: dict[int, KernelSpec] | None = None) -> KernelSpec:
        """Describe a ``@triton.jit`` function (reading the current values of its globals)."""
        if not is_jit_function(fn):
            raise KernelSpecError(
                f"{fn!r} is not a @triton.jit or @gluon.jit function; kiln compiles Triton and Gluon "
                f"kernels only."
            )
        if _seen is None and (batch := spec_batch.current()) is not None:
            try:
                return cls.of(fn, _seen=batch)
            except BaseException:
                batch.clear()  # no placeholder of a description that failed is kept
                raise
        seen = {} if _seen is None else _seen
        if id(fn) in seen:
            return seen[id(fn)]
        parts = jit_parts(fn)
        src = parts.src
        scope: dict[str, Any] = dict(parts.globals)
        with contextlib.suppress(TypeError, ValueError):
            scope.update(inspect.getclosurevars(parts.python_fn).nonlocals)
        # Placeholder breaks recursion for self-referencing kernels.
        placeholder = cls(fn.__name__, fn.__module__, fn.__qualname__, False, src, "", 0, (), ())
        seen[id(fn)] = placeholder
        resolved: dict[str, GlobalValue] = {}
        for chain in _analyse(src).global_chains():
            hit = _resolve(chain, scope)
            if hit is None:
                continue  # a builtin, or a name Triton will report as undefined
            name, value = hit
            if value is fn:
                continue
            resolved[name] = _classify(value, seen=seen)
        spec = cls(
            name=fn.__name__,
            module=fn.__module__,
            qualname=fn.__qualname__,
            importable=_importable(fn),
            src=src,
            filename=inspect.getsourcefile(parts.python_fn) or "<unknown>",
            first_line=parts.first_line,
            jit_options=parts.options,
            globals=tuple(sorted(resolved.items())),
            language=gluon.language_of(fn),
            defaults=_defaults(parts.python_fn, seen),
            lazy_annotations=bool(parts.python_fn.__code__.co_flags & __future__.annotations.compiler_flag),
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
            "jit": [[k, canonical(v) if not isinstance(v, tuple) else list(v)] for k, v in self.jit_options],
            "globals": [[n, value_data(v)] for n, v in self.globals],
        }
        if self.language != gluon.TRITON:  # Triton is the default: only another language is named
            data["language"] = self.language
        if self.defaults:  # a helper called without an argument compiles with its default
            data["defaults"] = [[n, value_data(v)] for n, v in self.defaults]
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
        """What cannot be rebuilt from data (only matters for by-source transport): the names of
        globals, and ``kernel(PARAM=...)`` for parameter defaults, of this kernel and of the
        helpers that travel with it."""
        names, defaults = self._unshippable()
        return names + defaults

    def _unshippable(self) -> tuple[list[str], list[str]]:
        names = [name for name, (kind, _) in self.globals if kind == "opaque"]
        defaults = [
            f"{self.name}({param}={_short(payload[1])})"
            for param, (kind, payload) in self.defaults
            if kind == "opaque"
        ]
        for _, (kind, payload) in self.globals:
            if kind == "jit" and not payload.importable:
                helper_names, helper_defaults = payload._unshippable()
                names.extend(helper_names)
                defaults.extend(helper_defaults)
        return names, defaults

    def check_shippable(self) -> None:
        """Raise :class:`KernelSpecError` naming what cannot travel, for a kernel that must
        travel as source (called before anything is compiled)."""
        if self.importable:
            return
        names, defaults = self._unshippable()
        if not names and not defaults:
            return
        what = []
        if names:
            what.append(f"the global(s) {sorted(set(names))}")
        if defaults:
            what.append(f"the parameter default(s) {sorted(set(defaults))}")
        raise KernelSpecError(
            f"kernel {self.name!r} (defined in {self.module}, {self.filename}:{self.first_line}) is "
            f"not importable by name, so kiln sends it to workers as source, but its source and "
            f"signature name {' and '.join(what)}, which are neither constexprs, dtypes, plain "
            f"values, modules nor @triton.jit functions, so no worker can rebuild them. Move the "
            f"kernel into an importable module (workers then import it), or make those globals "
            f"tl.constexpr values or plain numbers."
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
        return rebuild.load(self)


def _defaults(python_fn: Any, seen: dict[int, KernelSpec]) -> tuple[tuple[str, GlobalValue], ...]:
    """Each parameter default as data, as Python evaluated it when the kernel was defined.

    These, not the current values of the globals the default expressions name, are what
    Triton binds: the autotuner's binder for a kernel, ``call_JitFunction`` for a helper called
    without the argument.
    """
    return tuple(
        (param.name, _classify(param.default, seen=seen))
        for param in inspect.signature(python_fn).parameters.values()
        if param.default is not inspect.Parameter.empty
    )


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


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

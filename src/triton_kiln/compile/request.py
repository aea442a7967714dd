"""A compile request: one kernel, one signature, one set of constexprs, options and target.

:class:`CompileRequest` is frozen and validated on construction (unknown options, signatures
that do not match the kernel and missing targets fail at once, in the caller's thread, with a
message saying what to fix). Its :attr:`~CompileRequest.key` hashes everything that changes
the binary::

    kiln key version, kernel identity (source + helpers + globals, see kernel_spec),
    signature, constexprs (type-tagged), attrs, options, target,
    Triton's version, Triton's key, Triton's cache-invalidating environment variables

so two requests that differ in a single constexpr value never share a key, and re-creating
the same request (in this process or another) always gives the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.compile.kernel_spec import KernelSpec
from triton_kiln.compile.options import options_problem
from triton_kiln.compile.unroll import static_unroll
from triton_kiln.compile.values import canonical_value
from triton_kiln.errors import JobInfo, RequestError, TargetError
from triton_kiln.settings import default_triton_key_dir
from triton_kiln.triton_compat import GPUTarget

KEY_VERSION = 1


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable, picklable mapping that keeps its insertion order.

    Order matters for signatures: Triton's launcher takes arguments in signature order.
    Equality and hashing ignore order, as for a dict.
    """

    __slots__ = ("_items",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._items: tuple[tuple[str, Any], ...] = tuple((data or {}).items())

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self._items)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"{dict(self._items)!r}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self._items),))


def _target_label(target: GPUTarget) -> str:
    return f"{target.backend}:{target.arch}"


@dataclass(frozen=True, eq=False)
class CompileRequest:
    """Everything needed to compile one kernel variant.

    Args:
        kernel: the ``@triton.jit`` function.
        signature: type of every non-constexpr argument (``{"x_ptr": "*fp32", "n": "i32"}``);
            constexpr arguments may be left out (they are filled in as ``"constexpr"``).
        constexprs: values of constexpr arguments (``{"BLOCK": 1024}``).
        options: Triton compile options (``num_warps``, ``num_stages``, ``num_ctas``, ``maxnreg``...).
        target: a ``GPUTarget``; ``None`` means the local GPU, and is an error when there is none.
        attrs: specialization attributes per argument (``{"x_ptr": [["tt.divisibility", 16]]}``).
        triton_env: the ``TRITON_*`` variables the worker compiles with (default: this process's).
        triton_key_dir: where Triton's key is kept between processes (part of every key; see
            :func:`triton_kiln.triton_compat.triton_key`); default: that of the settings in force
            (:func:`triton_kiln.settings.default_triton_key_dir`). Callers that hold a
            :class:`~triton_kiln.settings.Settings` pass ``settings.triton_key_dir``.
    """

    kernel: Any
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    target: GPUTarget | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    triton_env: Mapping[str, str] = field(default_factory=triton_compat.triton_env)
    triton_key_dir: Path | None = field(default_factory=default_triton_key_dir, repr=False, kw_only=True)
    spec: KernelSpec = field(init=False, repr=False)

    def __post_init__(self) -> None:
        spec = KernelSpec.of(self.kernel)
        _check_mappings(spec.name, self)
        arg_names = triton_compat.jit_arg_names(self.kernel)
        constexprs = dict(self.constexprs)
        signature = dict(self.signature)
        unknown_constexprs = set(constexprs) - set(arg_names)
        if unknown_constexprs:
            raise RequestError(
                f"{spec.name}: constexprs {sorted(unknown_constexprs)} are not arguments of the kernel "
                f"(its arguments: {arg_names})."
            )
        for name in constexprs:
            signature.setdefault(name, "constexpr")
        _check_missing_constexprs(spec.name, self.kernel, signature)
        unknown = set(signature) - set(arg_names)
        missing = [n for n in arg_names if n not in signature]
        if unknown or missing:
            raise RequestError(
                f"{spec.name}: the signature must name every argument of the kernel {arg_names}; "
                f"missing {missing}, unknown {sorted(unknown)}."
            )
        for name, kind in signature.items():
            if not isinstance(kind, str):
                raise RequestError(f"{spec.name}: signature[{name!r}] must be a string such as '*fp32'.")
            if kind == "constexpr" and name not in constexprs:
                raise RequestError(
                    f"{spec.name}: argument {name!r} is a constexpr but has no value in constexprs."
                )
        _check_signature_types(spec.name, signature)
        target = self.target
        if target is None:
            target = triton_compat.local_target()
            if target is None:
                raise TargetError(
                    f"no GPU was found on this machine to compile {spec.name!r} for; pass an explicit "
                    f"target, e.g. target=GPUTarget('cuda', 90, 32) for an H100/H200."
                )
        if not isinstance(target, GPUTarget):
            raise RequestError(f"target must be a triton GPUTarget, got {target!r}.")
        _check_target(spec.name, target)
        allowed = triton_compat.backend_option_names(target)
        bad_options = set(self.options) - allowed
        if bad_options:
            raise RequestError(
                f"{spec.name}: unknown compile option(s) {sorted(bad_options)} for target "
                f"{_target_label(target)}; Triton accepts {sorted(allowed)}."
            )
        option_problem = options_problem(self.options)
        if option_problem is not None:
            raise RequestError(f"{spec.name}: {option_problem}.")
        unknown_attrs = set(self.attrs) - set(arg_names)
        if unknown_attrs:
            raise RequestError(f"{spec.name}: attrs name unknown arguments {sorted(unknown_attrs)}.")
        set_ = object.__setattr__
        set_(self, "spec", spec)
        set_(self, "signature", FrozenMap({n: signature[n] for n in arg_names}))
        set_(self, "constexprs", FrozenMap(constexprs))
        set_(self, "options", FrozenMap(self.options))
        set_(self, "attrs", FrozenMap({k: _freeze(v) for k, v in self.attrs.items()}))
        set_(self, "target", target)
        set_(self, "triton_env", FrozenMap(self.triton_env))
        _ = self.key  # computed now, while the environment matches the triton_env snapshot

    # -- identity ---------------------------------------------------------------------------

    def key_data(self) -> dict[str, Any]:
        """Everything that goes into :attr:`key`, as JSON-able data (for debugging a cache miss)."""
        assert self.target is not None
        return {
            "kiln_key_version": KEY_VERSION,
            "kernel": self.spec.identity,
            "signature": list(self.signature.items()),  # argument order (it is the kernel's)
            "constexprs": sorted([k, canonical_value(v)] for k, v in self.constexprs.items()),
            "attrs": sorted([k, canonical_value(v)] for k, v in self.attrs.items()),
            "options": sorted([k, canonical_value(v)] for k, v in self.options.items()),
            "target": [self.target.backend, str(self.target.arch), self.target.warp_size],
            "triton_version": triton_compat.triton_version(),
            "triton_key": triton_compat.triton_key(self.triton_key_dir),
            "env": sorted(triton_compat.cache_invalidating_env().items()),
        }

    @property
    def key(self) -> str:
        cached = self.__dict__.get("_key")
        if cached is None:
            blob = json.dumps(self.key_data(), sort_keys=True, default=repr)
            cached = hashlib.sha256(blob.encode()).hexdigest()
            object.__setattr__(self, "_key", cached)
        return cached

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompileRequest) and other.key == self.key

    # -- descriptions -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    def info(self) -> JobInfo:
        assert self.target is not None
        return JobInfo(
            kernel=self.spec.name,
            constexprs=tuple(self.constexprs.items()),
            options=tuple(self.options.items()),
            key=self.key,
            target=_target_label(self.target),
        )

    def label(self) -> str:
        return self.info().label()

    def __repr__(self) -> str:
        return f"CompileRequest({self.label()}, target={self.target})"

    # -- worker side ------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # The kernel object itself stays behind: the worker rebuilds it from ``spec``.
        state = dict(self.__dict__)
        state["kernel"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def ast_source(self, kernel: Any) -> Any:
        """Triton's ``ASTSource`` for this request, around an already loaded ``kernel``."""
        arg_names = triton_compat.jit_arg_names(kernel)
        attrs = {(arg_names.index(k),): [list(a) for a in v] for k, v in self.attrs.items()}
        return triton_compat.ASTSource(kernel, dict(self.signature), dict(self.constexprs), attrs or None)


# --- validation ---
# Checks of a request's arguments that Triton would otherwise fail on late (in a worker) or with
# a message naming the wrong cause; each says what to write instead.


def _check_mappings(kernel: str, request: CompileRequest) -> None:
    examples = {
        "signature": "{'x_ptr': '*fp32', 'n': 'i32'}",
        "constexprs": "{'BLOCK': 1024}",
        "options": "{'num_warps': 4}",
        "attrs": "{'x_ptr': [['tt.divisibility', 16]]}",
    }
    for field_name, example in examples.items():
        value = getattr(request, field_name)
        if not isinstance(value, Mapping):
            raise RequestError(
                f"{kernel}: {field_name} must be a dict mapping argument names to values, such as "
                f"{example}; got a {type(value).__name__}."
            )


def _check_missing_constexprs(kernel: str, fn: Any, signature: Mapping[str, str]) -> None:
    params = getattr(fn, "params", ())
    missing = [p.name for p in params if getattr(p, "is_constexpr", False) and p.name not in signature]
    if missing:
        example = ", ".join(f"{n!r}: ..." for n in missing)
        raise RequestError(
            f"{kernel}: the constexpr argument(s) {missing} have no value; pass them in "
            f"constexprs={{{example}}}."
        )


def _check_signature_types(kernel: str, signature: Mapping[str, str]) -> None:
    for name, kind in signature.items():
        problem = triton_compat.signature_type_problem(kind)
        if problem is not None:
            raise RequestError(f"{kernel}: signature[{name!r}]: {problem}.")


BACKENDS = ("cuda", "hip")
"""The backends a target may name (Triton's own ``GPUTarget.backend`` values)."""


def target_from_text(text: str) -> GPUTarget | None:
    """``cuda:90`` -> ``GPUTarget("cuda", 90, 32)``; ``hip:gfx942`` -> ``GPUTarget("hip", "gfx942",
    64)``; ``None`` for text of another form (``kiln compile --target``,
    ``triton_kiln.autotune(target=)``)."""
    backend, _, arch = text.partition(":")
    if backend == "cuda" and arch.isdigit():
        return GPUTarget("cuda", int(arch), 32)
    if backend == "hip" and arch.startswith("gfx"):
        return GPUTarget("hip", arch, 64)
    return None


def target_problem(target: GPUTarget) -> str | None:
    """Why ``target`` cannot be compiled for (``None``: it can): Triton's checks, and a backend
    Triton has (``'nvidia'`` would otherwise fail deep in Triton, or in every zygote start)."""
    problem = triton_compat.target_problem(target)
    if problem is None and target.backend not in BACKENDS:
        problem = (
            f"unknown backend {target.backend!r}; expected 'cuda' or 'hip', "
            f"as in GPUTarget('cuda', 90, 32) or GPUTarget('hip', 'gfx942', 64)"
        )
    return problem


def _check_target(kernel: str, target: GPUTarget) -> None:
    problem = target_problem(target)
    if problem is not None:
        raise TargetError(f"{kernel}: {problem}.")


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def guess_compile_cost(request: CompileRequest) -> float:
    """A rough, relative guess of how long ``request`` takes to compile (bigger = longer).

    Compile time grows with tile sizes (power-of-two constexprs of 16 or more) and pipeline
    stages; the pool starts the most expensive guesses first so that the longest compile does
    not start last and set the batch's tail. A kernel whose ``tl.static_range`` loops unroll by
    constexprs (:mod:`triton_kiln.compile.unroll`) compiles in time proportional to the copies they
    make, whatever the tile: there the copies count first (small tiles, many copies: the
    longest compiles) and the tiles only break ties (their tenth root).
    """
    cost = 1.0
    for value in request.constexprs.values():
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value >= 16
            and value & (value - 1) == 0
        ):
            cost *= value
    copies = static_unroll(request.spec.src, request.constexprs)
    if copies > 1:
        cost = copies * cost**0.1
    stages = request.options.get("num_stages", 3)
    warps = request.options.get("num_warps", 4)
    if isinstance(stages, int) and stages > 0:
        cost *= stages
    if isinstance(warps, int) and warps > 0:
        cost /= warps**0.5  # more warps: smaller per-thread tiles, slightly faster codegen
    return cost

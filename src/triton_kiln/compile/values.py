"""How values a kernel depends on are written as data: canonical, type-tagged JSON forms.

Keys hash these forms (so ``1``, ``1.0`` and ``True`` never share a key), and kernels sent to a
worker as source carry their globals in them (:mod:`triton_kiln.compile.kernel_spec` writes them,
:mod:`triton_kiln.compile.rebuild` reads them back).
"""

from __future__ import annotations

from typing import Any

# A global's value, as data: (kind, payload). Kinds:
#   "module"    payload: module name
#   "object"    payload: [module, qualname] of an importable object from a library module
#   "constexpr" payload: canonical value
#   "dtype"     payload: Triton dtype name
#   "value"     payload: canonical value (int, float, bool, str, None, tuples)
#   "jit"       payload: KernelSpec of a helper
#   "opaque"    payload: [type name, repr] -- hashed, but cannot be shipped by source
GlobalValue = tuple[str, Any]


def canonical(value: Any) -> Any:
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
        return [type(value).__name__, [canonical(v) for v in value]]
    raise TypeError(type(value).__name__)


def decanonical(data: Any) -> Any:
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
        return tuple(decanonical(v) for v in payload)
    if tag == "list":
        return [decanonical(v) for v in payload]
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
        return canonical(value)
    except TypeError:
        return ["opaque", f"{type(value).__module__}.{type(value).__qualname__}", repr(value)]

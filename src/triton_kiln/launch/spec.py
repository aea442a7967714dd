"""What a compiled binary expects from a call: one :class:`ArgSpec` per kernel argument.

A :class:`LaunchSpec` is plain JSON-able data (it travels in artifacts and bundles, and a C
host can read it): for each argument in the kernel's order, its Triton type (``"*fp16"``,
``"i32"``, ``"constexpr"``...), its constexpr value when it has one, and whether the binary
assumes it divisible by 16. From it come

* the argument *kinds* kiln's C launcher packs (:meth:`LaunchSpec.kinds`), or the reason it
  cannot (:meth:`LaunchSpec.unsupported_reason`);
* the *call key* a matching call produces (:func:`call_key_for`), the same tuple the C helper's
  ``call_key(args, flags)`` computes from real arguments. Codes (kept in sync with the C file):

  ===========================  =====================================================
  argument                     key items
  ===========================  =====================================================
  constexpr parameter (``c``)  its value
  tuning-key parameter (``k``) its value, then the items below
  ``None``                     ``None``
  ``bool``                     ``2``
  ``int``                      ``1`` when it equals 1 (specialized); else
                               ``16 + 2*range + divisible`` (range 0: i32, 1: i64, 2: u64)
  ``float``                    ``3``
  tensor                       its ``dtype``, then ``100 + aligned_to_16``
  ===========================  =====================================================

  ``do_not_specialize`` parameters (``n``) never count as 1 or divisible, and
  ``do_not_specialize_on_alignment`` ones (``a``) never as aligned, as in Triton.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from triton_kiln.errors import KilnError

CODE_ONE = 1
CODE_BOOL = 2
CODE_FLOAT = 3
CODE_INT = 16
CODE_PTR = 100

# Triton scalar type -> the C launcher's kind (its size and encoding).
SCALAR_KINDS: dict[str, str] = {
    "i1": "b",
    "u1": "b",
    "i8": "b",
    "u8": "b",
    "i16": "h",
    "u16": "H",
    "i32": "i",
    "u32": "I",
    "i64": "l",
    "u64": "L",
    "fp16": "e",
    "bf16": "B",
    "fp32": "f",
    "f32": "f",
    "fp64": "d",
}
_INT_RANGE = {"i32": 0, "i64": 1, "u64": 2}

# Triton's name of a pointer's element type -> torch dtype attribute name.
TORCH_DTYPES: dict[str, str] = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
    "i1": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "fp8e4b8": "float8_e4m3fnuz",
    "fp8e5b16": "float8_e5m2fnuz",
}


class LaunchSpecError(KilnError):
    """A launch spec is malformed, or a call cannot be matched to it."""


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument as a compiled binary sees it."""

    name: str
    type: str  # Triton's: "*fp16", "i32", "fp32", "u1", "constexpr", "nvTmaDesc", "tensordesc<...>"
    value: Any = None  # the constexpr's value (JSON-able), when type == "constexpr"
    divisible_16: bool = False  # the binary assumes this pointer/integer is a multiple of 16

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == "constexpr":
            data["value"] = _json_value(self.value, self.name)
        if self.divisible_16:
            data["divisible_16"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ArgSpec:
        try:
            name, kind = data["name"], data["type"]
        except KeyError as exc:
            raise LaunchSpecError(
                f"an argument record lacks the field {exc.args[0]!r}: {dict(data)}"
            ) from None
        if not isinstance(name, str) or not isinstance(kind, str):
            raise LaunchSpecError(f"argument name and type must be strings: {dict(data)}")
        if kind == "constexpr" and "value" not in data:
            raise LaunchSpecError(f"constexpr argument {name!r} has no 'value'")
        return cls(name, kind, data.get("value"), bool(data.get("divisible_16", False)))


@dataclass(frozen=True)
class LaunchSpec:
    """Every argument of a binary, in the kernel's order (constexprs included)."""

    args: tuple[ArgSpec, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    def to_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self.args]

    @classmethod
    def from_json(cls, data: Sequence[Mapping[str, Any]]) -> LaunchSpec:
        if not isinstance(data, list | tuple):
            raise LaunchSpecError(f"a launch spec is a list of argument records, got {type(data).__name__}")
        return cls(tuple(ArgSpec.from_json(a) for a in data))

    @classmethod
    def from_request(cls, request: Any) -> LaunchSpec:
        """From a :class:`~triton_kiln.compile.request.CompileRequest` (its signature, constexprs and
        attrs)."""
        args = []
        for name, kind in request.signature.items():
            divisible = any(list(attr) == ["tt.divisibility", 16] for attr in request.attrs.get(name, ()))
            value = request.constexprs[name] if kind == "constexpr" else None
            args.append(ArgSpec(name, kind, value, divisible))
        return cls(tuple(args))

    # -- the C launcher --------------------------------------------------------------------

    def unsupported_reason(self) -> str | None:
        """Why kiln's C launcher cannot pack these arguments (``None``: it can)."""
        for arg in self.args:
            if arg.type.startswith("tensordesc") or arg.type == "nvTmaDesc":
                return f"argument {arg.name!r} is a TMA tensor descriptor ({arg.type})"
            if arg.type.startswith("(") or arg.type.startswith("["):
                return f"argument {arg.name!r} is a tuple"
            if arg.type != "constexpr" and not arg.type.startswith("*") and arg.type not in SCALAR_KINDS:
                return f"argument {arg.name!r} has the type {arg.type!r}, which kiln's launcher does not pack"
        return None

    def kinds(self) -> str:
        """One character per argument for the C launcher (``C``: constexpr, not passed)."""
        reason = self.unsupported_reason()
        if reason is not None:
            raise LaunchSpecError(reason)
        out = []
        for arg in self.args:
            if arg.type == "constexpr":
                out.append("C")
            elif arg.type.startswith("*"):
                out.append("P")
            else:
                out.append(SCALAR_KINDS[arg.type])
        return "".join(out)


def _json_value(value: Any, name: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise LaunchSpecError(
        f"constexpr {name!r} = {value!r} ({type(value).__name__}) has no JSON form; kiln stores launch "
        f"specs as JSON, so only None, bool, int, float and str constexprs can be saved."
    )


def param_flags(params: Sequence[Any], key_names: Sequence[str]) -> bytes:
    """The C helper's per-argument flags for a ``JITFunction``'s ``params`` (see the module doc)."""
    keys = set(key_names)
    out = bytearray()
    for param in params:
        if param.is_constexpr:
            out += b"c"
        elif param.do_not_specialize:
            out += b"n"
        elif param.name in keys:
            out += b"k"
        elif param.do_not_specialize_on_alignment:
            out += b"a"
        else:
            out += b"s"
    return bytes(out)


def call_key_for(
    spec: LaunchSpec, flags: bytes, key_values: Mapping[str, Any], dtype_of: Any
) -> tuple[Any, ...]:
    """The call key of calls this binary serves (what ``call_key(args, flags)`` returns for them).

    ``key_values`` gives the tuning-key arguments' values; ``dtype_of("fp16")`` returns the
    dtype object a tensor of that element type carries (``torch.float16``).
    """
    if len(flags) != len(spec.args):
        raise LaunchSpecError(f"{len(flags)} flags for {len(spec.args)} arguments")
    items: list[Any] = []
    for arg, flag in zip(spec.args, flags.decode(), strict=True):
        if flag == "c":
            if arg.type != "constexpr":
                raise LaunchSpecError(f"constexpr parameter {arg.name!r} has the type {arg.type!r}")
            items.append(arg.value)
            continue
        if flag == "k":
            if arg.name not in key_values:
                raise LaunchSpecError(f"no tuning-key value for {arg.name!r}")
            items.append(key_values[arg.name])
        if arg.type == "constexpr":
            if arg.value == 1 and not isinstance(arg.value, bool):
                items.append(CODE_ONE)
            elif arg.value is None:
                items.append(None)
            else:
                raise LaunchSpecError(f"argument {arg.name!r} was specialized to {arg.value!r}")
        elif arg.type.startswith("*"):
            element = arg.type[1:]
            if element not in TORCH_DTYPES:
                raise LaunchSpecError(f"pointer argument {arg.name!r} to {element!r} has no torch dtype")
            items.append(dtype_of(element))
            items.append(CODE_PTR + int(arg.divisible_16 and flag in "sk"))
        elif arg.type in ("i1", "u1"):
            items.append(CODE_BOOL)
        elif arg.type in ("fp32", "f32"):
            items.append(CODE_FLOAT)
        elif arg.type in _INT_RANGE:
            items.append(CODE_INT + 2 * _INT_RANGE[arg.type] + int(arg.divisible_16 and flag in "sk"))
        else:
            raise LaunchSpecError(f"argument {arg.name!r} of type {arg.type!r} cannot be matched to calls")
    return tuple(items)


def torch_dtype(element: str) -> Any:
    """``torch.<dtype>`` for a Triton element type name (imports torch)."""
    import torch

    return getattr(torch, TORCH_DTYPES[element])

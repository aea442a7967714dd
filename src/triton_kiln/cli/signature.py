"""``kiln compile``'s ``--signature`` and ``--value``: the calls tuning will make, as compile requests.

A binary is found in the cache only under the key of the request a real call builds, and a
real call's request carries Triton's specialization of its arguments: ``tt.divisibility`` 16 on
16-byte-aligned pointers and on integers that are multiples of 16, an integer equal to 1 turned
into a constexpr, an integer's type chosen by its value. So ``kiln compile`` does not build
requests from the types: it makes *stand-in arguments* (a :class:`~triton_kiln.triton_compat.StandInTensor`
per pointer, a plain ``int`` per integer) that Triton specializes as it would the real ones, and
builds each request through the autotuner's own :func:`~triton_kiln.autotuner.compile_requests.request_for`
(Triton's binder, then Triton's packing). Keys match a real call's by construction.

The notation is Triton's AOT compiler's (``triton/tools/compile.py``), with torch's defaults::

    *fp16      a pointer, 16-byte aligned (every torch allocation is)   = *fp16:16
    *fp16:1    a pointer with no alignment known (a view at an odd offset)
    i32        an integer, unspecialized (any value but 1 and multiples of 16)
    i32:16     an integer that is a multiple of 16
    i32:1      an integer equal to 1 (Triton passes it as a constexpr)
    fp32, i1   a float or bool scalar (never specialized)

``--value NAME=INT,...`` gives the integers of one call (the M, N, K tuning will see); the
specialization then follows from each value exactly as in a real call. Repeat it for several
calls: each adds its requests, and requests that come out the same are compiled once.

``--config`` and ``--constexpr`` are checked here too, before anything is compiled: each keyword
is a compile option (``num_warps`` a power of two of at least 1, ``num_stages`` at least 0,
``num_ctas`` at least 1, ``maxnreg`` positive) or a parameter of the kernel, and every
``tl.constexpr`` parameter without a default has a value in every config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from triton_kiln.compile.options import option_problem

INT_TYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
_INT_STAND_INS = {  # (unspecialized, multiple of 16): values Triton types as this type
    "i32": (17, 16),
    "i64": (2**31 + 1, 2**32),
    "u64": (2**63 + 1, 2**63),
}


@dataclass(frozen=True)
class ArgType:
    """One argument of ``--signature``: its type and hint (``16``, ``1`` or ``None``)."""

    name: str
    type: str  # as Triton writes it: "*fp16", "i32"
    hint: int | None

    @property
    def is_pointer(self) -> bool:
        return self.type.startswith("*")

    def spelled(self) -> str:
        return self.type if self.hint is None else f"{self.type}:{self.hint}"


def _allowed(name: str, type_: str) -> str:
    if type_.startswith("*"):
        return (
            f"{name}={type_} or {name}={type_}:16 (16-byte aligned, the default), "
            f"{name}={type_}:1 (not aligned)"
        )
    if type_ in INT_TYPES:
        return (
            f"{name}={type_} (unspecialized), {name}={type_}:16 (a multiple of 16), "
            f"{name}={type_}:1 (equal to 1)"
        )
    return f"{name}={type_} (a {type_} scalar takes no hint)"


def parse_arg_type(name: str, text: str) -> ArgType:
    """``*fp16:16`` -> ``ArgType(name, "*fp16", 16)``; a bad hint or type is a one-line error."""
    from triton_kiln.triton_compat import signature_type_problem

    type_, sep, hint_text = text.strip().partition(":")
    type_ = type_.strip()
    if type_.startswith(("tensordesc<", "(")):
        raise click.BadParameter(
            f"{name}={text}: kiln compile makes no stand-in for tensor descriptors or tuples yet; "
            f"compile such kernels through kiln.precompile with real arguments",
            param_hint="--signature",
        )
    problem = signature_type_problem(type_)
    if problem is not None:
        raise click.BadParameter(f"{name}={text}: {problem}", param_hint="--signature")
    if not sep:
        return ArgType(name, type_, 16 if type_.startswith("*") else None)
    hint_text = hint_text.strip()
    takes_hint = type_.startswith("*") or type_ in INT_TYPES
    if not takes_hint or hint_text not in ("16", "1"):
        raise click.BadParameter(
            f"{name}={text}: {':' + hint_text!r} is not a hint; write {_allowed(name, type_)}",
            param_hint="--signature",
        )
    return ArgType(name, type_, int(hint_text))


def parse_values(texts: Sequence[str], pairs: Callable[[str, str], dict[str, str]]) -> list[dict[str, Any]]:
    """Each ``--value`` as one call's values by name (one empty call when none is given)."""
    calls: list[dict[str, Any]] = []
    for text in texts:
        call: dict[str, Any] = {}
        for name, raw in pairs(text, "--value").items():
            try:
                call[name] = int(raw, 0)
            except ValueError:
                raise click.BadParameter(f"{name}={raw}: not an integer", param_hint="--value") from None
        calls.append(call)
    return calls or [{}]


def stand_in(arg: ArgType, value: Any | None) -> Any:
    """What Triton specializes as a real argument of this type, hint and value would be."""
    from triton_kiln.triton_compat import StandInTensor

    if arg.is_pointer:
        if value is not None:
            raise click.BadParameter(
                f"{arg.name} is a pointer ({arg.type}); --value gives integers", param_hint="--value"
            )
        return StandInTensor(_unconst(arg.type)[1:], aligned=arg.hint == 16)
    if arg.type not in INT_TYPES:
        if value is not None:
            raise click.BadParameter(
                f"{arg.name} is a {arg.type} scalar, never specialized: give it no --value",
                param_hint="--value",
            )
        return True if arg.type in ("i1", "u1") else 0.5
    if value is None:
        plain, multiple = _INT_STAND_INS.get(arg.type, (17, 16))
        return {None: plain, 16: multiple, 1: 1}[arg.hint]
    if (arg.hint == 16 and value % 16) or (arg.hint == 1 and value != 1):
        raise click.BadParameter(
            f"{arg.name}: --signature says {arg.spelled()}, --value gives {value}", param_hint="--value"
        )
    return value


def parse_types(kernel: Any, types: Mapping[str, str]) -> dict[str, ArgType]:
    """``--signature``'s entries by name, checked against the kernel's non-constexpr arguments."""
    from triton_kiln.triton_compat import jit_params

    params = {p.name: p for p in jit_params(kernel)}
    unknown = sorted(set(types) - set(params))
    if unknown:
        raise click.BadParameter(
            f"{', '.join(unknown)}: no such argument of {kernel.__name__} "
            f"(its arguments: {', '.join(params)})",
            param_hint="--signature",
        )
    parsed = {
        name: parse_arg_type(name, text)
        for name, text in types.items()
        if not params[name].is_constexpr and text.strip() != "constexpr"
    }
    missing = [
        name for name, p in params.items() if not p.is_constexpr and not p.has_default and name not in parsed
    ]
    if missing:
        raise click.BadParameter(
            f"no type for {', '.join(missing)}: --signature names every non-constexpr argument "
            f"without a default, e.g. 'x_ptr=*fp32,n=i32'",
            param_hint="--signature",
        )
    return parsed


def call_requests(
    kernel: Any,
    types: dict[str, ArgType],
    call: Mapping[str, Any],
    configs: Sequence[Any],
    common: Mapping[str, Any],
    target: Any,
) -> list[Any]:
    """One request per config for a call with these values (stand-ins where none is given),
    built as the autotuner builds a real call's."""
    from triton_kiln.autotuner.compile_requests import request_for

    unknown = sorted(set(call) - set(types))
    if unknown:
        raise click.BadParameter(
            f"{', '.join(unknown)}: not in --signature (--value gives integer arguments named there)",
            param_hint="--value",
        )
    args = {name: stand_in(arg, call.get(name)) for name, arg in types.items()}
    requests = []
    for config in configs:
        kwargs = {**args, **{k: v for k, v in common.items() if k not in config.kwargs}}
        try:
            request, _ = request_for(kernel, config, (), kwargs, target)
        except Exception as exc:  # Triton's binder or packer: a missing constexpr, a bad type
            raise click.ClickException(f"{kernel.__name__}: {type(exc).__name__}: {exc}") from None
        _check_types(request, types, args)
        requests.append(request)
    return requests


def _check_types(request: Any, types: Mapping[str, ArgType], args: Mapping[str, Any]) -> None:
    """Each argument is typed as ``--signature`` says (Triton types an integer by its value)."""
    for name, arg in types.items():
        got = request.signature[name]
        if got == "constexpr":  # an integer equal to 1, or a kernel that made it one
            continue
        if _unconst(got) != _unconst(arg.type):
            why = (
                " (Triton types an integer by its value: i32 up to 2**31-1, i64 above, u64 from 2**63)"
                if arg.type in INT_TYPES
                else ""
            )
            raise click.BadParameter(
                f"{name}: --signature says {arg.type}, but Triton passes {args[name]!r} as {got}{why}; "
                f"write {name}={got} or give a --value it types as {arg.type}",
                param_hint="--signature",
            )


def _unconst(type_: str) -> str:
    """``*kfp16`` (a pointer to constant data: the parameter's annotation makes it so) -> ``*fp16``."""
    return "*" + type_[2:] if type_.startswith("*k") else type_


def distinct(requests: Sequence[Any]) -> list[Any]:
    """The requests with one per compile key, in order (calls that specialize alike share one)."""
    seen: dict[str, Any] = {}
    for request in requests:
        seen.setdefault(request.key, request)
    return list(seen.values())


def parse_config(kernel: Any, values: Mapping[str, Any], text: str) -> Any:
    """The ``triton.Config`` one ``--config`` gives (its values parsed), its names and option values
    checked: a keyword is a compile option or a parameter of the kernel."""
    import triton

    from triton_kiln.tuning.configs import COMPILE_OPTIONS

    params = [p.name for p in _params(kernel)]
    for name, value in values.items():
        if name not in COMPILE_OPTIONS and name not in params:
            raise click.BadParameter(
                f"{name} is neither a compile option ({', '.join(COMPILE_OPTIONS)}) nor a parameter "
                f"of {kernel.__name__} (its parameters: {', '.join(params)}); in {text!r}",
                param_hint="--config",
            )
        problem = option_problem(name, value)  # the rules CompileRequest checks too
        if problem is not None:
            raise click.BadParameter(f"{name}={value}: {problem}; in {text!r}", param_hint="--config")
    kwargs = {k: v for k, v in values.items() if k not in COMPILE_OPTIONS}
    return triton.Config(kwargs, **{k: v for k, v in values.items() if k in COMPILE_OPTIONS})


def check_common(kernel: Any, common: Mapping[str, Any]) -> None:
    """``--constexpr`` names parameters of the kernel (compile options go in ``--config``)."""
    from triton_kiln.tuning.configs import COMPILE_OPTIONS

    params = [p.name for p in _params(kernel)]
    for name in common:
        if name in COMPILE_OPTIONS:
            raise click.BadParameter(
                f"{name} is a compile option, not a parameter: give it in --config '{name}=...'",
                param_hint="--constexpr",
            )
        if name not in params:
            raise click.BadParameter(
                f"{name} is not a parameter of {kernel.__name__} (its parameters: {', '.join(params)})",
                param_hint="--constexpr",
            )


def check_constexpr_values(
    kernel: Any, configs: Sequence[tuple[Any, str]], common: Mapping[str, Any]
) -> None:
    """Every ``tl.constexpr`` parameter without a default has a value in each config, from the
    config or ``--constexpr``; ``configs`` pairs each with where it came from (``""`` for none)."""
    needed = [p.name for p in _params(kernel) if p.is_constexpr and not p.has_default]
    for config, where in configs:
        missing = [name for name in needed if name not in config.kwargs and name not in common]
        if missing:
            names = ", ".join(missing)
            what = "a tl.constexpr parameter" if len(missing) == 1 else "tl.constexpr parameters"
            example = ",".join(f"{name}=..." for name in missing)
            raise click.UsageError(
                f"{names} {'is' if len(missing) == 1 else 'are'} {what} with no value{where}: "
                f"give --constexpr {example} or --config '{example}'"
            )


def _params(kernel: Any) -> list[Any]:
    from triton_kiln.triton_compat import jit_params

    return jit_params(kernel)

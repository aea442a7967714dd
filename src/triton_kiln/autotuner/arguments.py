"""``triton_kiln.autotune``'s arguments, checked when the decorator is applied.

Triton's ``autotune`` accepts almost anything at decoration and fails on the first call, deep in
its code, or never (a ``key`` naming no parameter tunes once for every shape, and kiln's tuning
database would reuse that config in every later process). kiln checks here what it can name:

* called directly (``triton_kiln.autotune``), a wrong argument raises ``TypeError`` / ``ValueError``
  (``NotImplementedError`` for an autotuner stacked over another), saying what to write;
* for a kernel :func:`triton_kiln.install` routed from ``@triton.autotune``, which Triton would have
  accepted, the kernel is decorated as Triton would and one :class:`AutotuneArgumentWarning`
  names what is wrong: a library that imports under Triton must import under kiln.

``triton_kiln.install()`` binds ``triton.autotune`` to this same function, so a call is taken as routed
when the routing is in effect and none of kiln's own (keyword-only) arguments was given: a
library written for Triton cannot pass those. A direct call after ``install()`` that passes none
of them gets the warnings, not the errors (the safe side of the drop-in).

kiln's own arguments (``target``, ``database``, ``pool``...) exist only in direct calls and are
always checked strictly.
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from triton_kiln import triton_compat


class AutotuneArgumentWarning(UserWarning):
    """A kernel routed by ``triton_kiln.install()`` has an argument Triton accepts but that is wrong."""


class StackedAutotunerError(NotImplementedError):
    """``triton_kiln.autotune`` was applied over another autotuner."""


@dataclass
class Checked:
    """What the decorator builds the :class:`Autotuner` from, after the checks."""

    configs: list[Any]
    key: list[str]
    warmup: Any
    rep: Any
    target: Any
    database: Any
    problems: list[str] = field(default_factory=list)  # routed: what the one warning names


def is_routed(autotune: Callable[..., Any], kiln_arguments: dict[str, Any]) -> bool:
    """Whether this decoration came through ``triton.autotune`` routed by ``triton_kiln.install()``
    (``autotune``: kiln's decorator, which the decorator module hands in)."""
    import triton

    # triton_kiln.install() puts kiln's autotune in Triton's place (triton_kiln.routing): read here
    # from Triton, as importing triton_kiln.routing would make the autotuner package depend on what
    # depends on it
    return triton.autotune is autotune and not any(kiln_arguments.values())


def stacked_over(fn: Any) -> Any:
    """The autotuner under ``fn`` (through ``@triton.heuristics`` layers), or ``None``."""
    tuner_class = triton_compat.triton_autotuner_class()
    inner = fn
    while inner is not None and not inspect.isfunction(inner):
        if isinstance(inner, tuner_class):
            return inner
        inner = getattr(inner, "fn", None)
    return None


def check_kernel(fn: Any) -> None:
    """``fn`` must be a ``@triton.jit`` kernel (possibly under ``@triton.heuristics``)."""
    if hasattr(fn, "arg_names") and not inspect.isfunction(fn):
        return
    what = f"a Python function {fn.__name__}" if inspect.isfunction(fn) else f"a {type(fn).__name__}"
    raise TypeError(
        f"kiln.autotune decorates a @triton.jit kernel (got {what}); put @triton.jit below @kiln.autotune"
    )


def stacked_message(fn: Any, inner: Any) -> str:
    name = getattr(inner, "base_fn", fn).__name__
    return (
        f"kiln.autotune over another autotuner is not supported: {name} is already a "
        f"{type(inner).__module__}.{type(inner).__qualname__}; decorate the @triton.jit kernel "
        f"with one autotuner and list every config there"
    )


def check(fn: Any, routed: bool, **given: Any) -> Checked:
    """Check the decorator's arguments for kernel ``fn``; raise (direct) or collect (routed)."""
    problems: list[str] = []

    def wrong(exc: Exception) -> None:
        if not routed:
            raise exc
        problems.append(str(exc))

    params = list(fn.arg_names)
    jit_fn = _jit_under(fn)
    listing = ", ".join(params)
    configs = _configs(given["configs"])
    key = [given["key"]] if isinstance(given["key"], str) else given["key"]
    if not isinstance(key, (list, tuple)) or not all(isinstance(k, str) for k in key):
        wrong(TypeError(f"key is a list of parameter names of {fn.__name__}, got {given['key']!r}"))
    else:
        unknown = [k for k in key if k not in params]
        if unknown:
            wrong(ValueError(f"key names {_names(unknown)}, not parameters of the kernel ({listing})"))
    _check_config_kwargs(configs, params, jit_fn, listing, wrong)
    for name in ("reset_to_zero", "restore_value"):
        _check_names(name, given[name], params, listing, wrong)
    for name in ("pre_hook", "post_hook", "do_bench"):
        value = given[name]
        if value is not None and value is not False and not callable(value):
            wrong(TypeError(f"{name} is a function or None, got {_what(value)}"))
    warmup = _length("warmup", given["warmup"], 0.0, wrong)
    rep = _length("rep", given["rep"], None, wrong)
    _check_kiln_only(given)
    target = _target(given["target"])
    database = _database(given["database"])
    return Checked(list(configs or []), list(key), warmup, rep, target, database, problems)


def warn(fn: Any, problems: Sequence[str]) -> None:
    """The one warning of a routed kernel whose arguments Triton accepts but are wrong."""
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "kernel")
    text = "; ".join(problems)
    warnings.warn(
        AutotuneArgumentWarning(
            f"kiln: @triton.autotune of {name} (routed by kiln.install()): {text}. Triton accepts "
            f"this, so the kernel is decorated as Triton would; fix the decorator's arguments"
        ),
        stacklevel=4,
    )


def _jit_under(fn: Any) -> Any:
    from triton_kiln.autotuner.call_conventions import unwrap

    return unwrap(fn)[0]


def _configs(configs: Any) -> list[Any]:
    """Triton's ``if not configs``: none (or an empty list) is one default config."""
    from triton import Config

    if not configs:
        return [Config({}, num_warps=4, num_stages=3, num_ctas=1)]
    if not isinstance(configs, (list, tuple)) or not all(isinstance(c, Config) for c in configs):
        raise TypeError(
            f"configs is a list of triton.Config, e.g. [triton.Config({{'BLOCK': 64}}, num_warps=4)]; "
            f"got {_what(configs)}"
            + (f" of {_what(configs[0])}" if isinstance(configs, (list, tuple)) and configs else "")
        )
    return list(configs)


def _check_config_kwargs(
    configs: list[Any], params: list[str], jit_fn: Any, listing: str, wrong: Callable[[Exception], None]
) -> None:
    kwargs = {name for config in configs for name in config.kwargs}
    unknown = sorted(kwargs - set(params) - triton_compat.any_backend_option_names())
    if unknown:
        wrong(ValueError(f"a config sets {_names(unknown)}, not parameters of the kernel ({listing})"))
    runtime = {p.name for p in getattr(jit_fn, "params", ()) if not getattr(p, "is_constexpr", True)}
    clashing = sorted(kwargs & runtime)
    if clashing:
        wrong(
            ValueError(
                f"a config sets {_names(clashing)}, which the kernel takes at run time (not tl.constexpr): "
                f"the call passes it too; tune tl.constexpr parameters only"
            )
        )


def _check_names(
    name: str, value: Any, params: list[str], listing: str, wrong: Callable[[Exception], None]
) -> None:
    if value is None:
        return
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        wrong(TypeError(f"{name} is a list of parameter names, e.g. [{value!r}]; got {_what(value)}"))
        value = [value] if isinstance(value, str) else []
    unknown = [v for v in value if v not in params]
    if unknown:
        wrong(ValueError(f"{name} names {_names(unknown)}, not parameters of the kernel ({listing})"))


def _length(name: str, value: Any, floor: float | None, wrong: Callable[[Exception], None]) -> Any:
    """``warmup`` (>= 0) / ``rep`` (> 0) in ms, finite; routed: an unusable one becomes None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        wrong(TypeError(f"{name} is a number of milliseconds, got {_what(value)}"))
        return None
    number = float(value)
    low_ok = number >= floor if floor is not None else number > 0
    if not math.isfinite(number) or not low_ok:
        bound = ">= 0" if floor is not None else "> 0"
        wrong(ValueError(f"{name} is a finite number of milliseconds {bound}, got {value!r}"))
    return value


def _check_kiln_only(given: dict[str, Any]) -> None:
    from triton_kiln.pool import CompilePool

    for name in ("sandbox", "check_outputs"):
        if given[name] is not None and not isinstance(given[name], bool):
            raise TypeError(f"{name} is True or False, got {_what(given[name])}")
    if given["pool"] is not None and not isinstance(given["pool"], CompilePool):
        raise TypeError(
            f"pool is a kiln.CompilePool (or None for kiln.get_pool()), got {_what(given['pool'])}"
        )
    if given["reference"] is not None and not callable(given["reference"]):
        raise TypeError(
            "reference is a function f(args: dict) writing the expected outputs, "
            f"got {_what(given['reference'])}"
        )
    tolerances = given["tolerances"]
    if tolerances is not None and not (
        isinstance(tolerances, (tuple, list))
        and len(tolerances) == 2
        and all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in tolerances)
    ):
        raise TypeError(
            f"tolerances is (rtol, atol), two numbers >= 0, e.g. (1e-2, 1e-3); got {tolerances!r}"
        )


def _target(target: Any) -> Any:
    """A ``GPUTarget``; a string as ``kiln compile --target`` reads it (``cuda:90``, ``hip:gfx942``)."""
    if target is None or isinstance(target, triton_compat.GPUTarget):
        return target
    if isinstance(target, str):
        from triton_kiln.compile.request import target_from_text

        parsed = target_from_text(target)
        if parsed is not None:
            return parsed
    raise TypeError(
        f"target is a GPUTarget or a string like 'cuda:90', 'cuda:100' or 'hip:gfx942'; got {target!r}"
    )


def _database(database: Any) -> Any:
    """A tuning database, ``False`` or ``None``; a path opens the process's database at it."""
    if database is None or database is False:
        return database
    if isinstance(database, (str, os.PathLike)):
        from pathlib import Path

        from triton_kiln.autotuner.autotuner import _shared_database

        return _shared_database(Path(database))
    if not all(hasattr(database, m) for m in ("lookup", "begin_run", "record", "finish_run")):
        raise TypeError(
            "database is a kiln.tuning.TuningDatabase, a path to one, or False for none; "
            f"got {_what(database)}"
        )
    return database


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _what(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"

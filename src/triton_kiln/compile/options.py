"""What the compile options kiln knows may be set to: checked before anything is compiled.

One table for everyone who takes options from a user: ``kiln compile --config``
(:mod:`triton_kiln.cli.signature`) and :class:`~triton_kiln.compile.request.CompileRequest`. Triton
would fail on a bad value late, in a worker, with a message naming the wrong cause (``'>' not
supported between 'str' and 'int'`` for ``num_warps="4"``, a bare ``AssertionError`` for
``num_warps=3``). Only these four options are checked, and only their types and ranges: other
options (Inductor's, AMD's) go to Triton as given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["OPTION_RULES", "option_problem", "options_problem"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


OPTION_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    # Triton asserts a power of two and nothing more: more threads than a block may hold compile,
    # and fail as OutOfResources when the binary is loaded, inside the launch (autotuners' hooks
    # see that exception), so no upper bound here
    "num_warps": (
        lambda v: _is_int(v) and v >= 1 and v & (v - 1) == 0,
        "a power of two of at least 1 (warps per program)",
    ),
    "num_stages": (  # 0 as well: Triton compiles it as 1, and AMD configs use it
        lambda v: _is_int(v) and v >= 0,
        "an integer of at least 0 (software-pipelining stages; 0 and 1 pipeline nothing)",
    ),
    "num_ctas": (lambda v: _is_int(v) and v >= 1, "an integer of at least 1 (CTAs in a cluster)"),
    "maxnreg": (lambda v: _is_int(v) and v >= 1, "a positive integer (registers per thread)"),
}
"""``{option: (check, what it expects)}`` for the options whose values kiln checks."""

NONE_MEANS_DEFAULT = frozenset({"maxnreg"})
"""Options whose ``None`` is Triton's own default (no limit), as Triton's parsed options give it."""


def option_problem(name: str, value: Any) -> str | None:
    """What ``name`` expects, when ``value`` is not fit for it (``None``: fit, or not checked)."""
    check, expected = OPTION_RULES.get(name, (lambda _: True, ""))
    return None if check(value) else f"expected {expected}"


def options_problem(options: Mapping[str, Any]) -> str | None:
    """The first of ``options`` whose value is not fit, as ``options['num_warps']='4': expected ...``."""
    for name, value in options.items():
        if value is None and name in NONE_MEANS_DEFAULT:
            continue
        problem = option_problem(name, value)
        if problem is not None:
            return f"options[{name!r}]={value!r}: {problem}"
    return None

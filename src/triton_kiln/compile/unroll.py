"""How many times a kernel's ``tl.static_range`` loops copy their bodies, for given constexprs.

A ``tl.static_range(n)`` loop is unrolled when Triton builds the kernel's IR: its body appears
``n`` times, so the compile (every pass, then ptxas) grows with ``n``. Where ``n`` is computed
from constexprs (``tl.static_range(triton.cdiv(H, BLOCK_H))``), configs with small tiles unroll
the most and compile the longest: Liger's ``_token_gather_weighted_sum_kernel`` at ``H = 2048``
copies its body 32 times with ``BLOCK_H=64`` and 4 times with ``BLOCK_H=512``, and its compile
time grows with the copy count, whatever the tile (bench/results/ holds the figures).
:func:`static_unroll` gives that copy count, read from the
kernel's source (parsed once per source) and evaluated on the request's constexprs;
:func:`triton_kiln.compile.request.guess_compile_cost` ranks by it.

Only what can be evaluated is counted: integer constants, constexpr names, ``+ - * // %``,
``cdiv`` (``triton.cdiv``/``tl.cdiv``), ``min``/``max``. A trip count that reads anything else
(a runtime argument, a global) counts as 1. Nested unrolled loops multiply; the largest product
over the kernel's loops is the answer.
"""

from __future__ import annotations

import ast
import functools
import operator
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from triton_kiln.compile.parse import parse

_MAX = 1 << 20  # a trip count past this is not a real unroll (or not evaluated right): ignored

_BINOPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


class _Unknown(Exception):
    """A trip count that cannot be evaluated from constants and constexprs."""


def static_unroll(src: str, constexprs: Mapping[str, Any]) -> int:
    """The largest number of body copies the kernel's ``static_range`` loops make (>= 1)."""
    loops = _static_loops(src)
    if not loops:
        return 1
    values = {k: v for k, v in constexprs.items() if isinstance(v, int) and not isinstance(v, bool)}
    best = 1
    for chain in loops:
        copies = 1
        for args in chain:
            copies *= _trips(args, values)
        best = max(best, copies)
    return min(best, _MAX)


@functools.lru_cache(maxsize=256)
def _static_loops(src: str) -> tuple[tuple[tuple[ast.expr, ...], ...], ...]:
    """Each ``static_range`` loop as the chain of ``static_range`` argument lists around and at it."""
    if "static_range" not in src:
        return ()  # most kernels: no parse (a loop is found by that name only, see _is_static_range)
    try:
        tree = parse(textwrap.dedent(src))
    except SyntaxError:
        return ()
    found: list[tuple[tuple[ast.expr, ...], ...]] = []

    def visit(node: ast.AST, chain: tuple[tuple[ast.expr, ...], ...]) -> None:
        if isinstance(node, ast.For) and _is_static_range(node.iter):
            assert isinstance(node.iter, ast.Call)
            chain = (*chain, tuple(node.iter.args))
            found.append(chain)
        for child in ast.iter_child_nodes(node):
            visit(child, chain)

    visit(tree, ())
    return tuple(found)


def _is_static_range(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "static_range"


def _trips(args: tuple[ast.expr, ...], values: Mapping[str, int]) -> int:
    try:
        bounds = [_eval(a, values) for a in args]
    except (_Unknown, ZeroDivisionError):
        return 1
    if len(bounds) == 1:
        start, end, step = 0, bounds[0], 1
    elif len(bounds) in (2, 3):
        start, end, step = bounds[0], bounds[1], bounds[2] if len(bounds) == 3 else 1
    else:
        return 1
    if step == 0:
        return 1
    trips = len(range(start, end, step))
    return trips if 1 <= trips <= _MAX else 1


def _eval(node: ast.expr, values: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, values)
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        args = [_eval(a, values) for a in node.args]
        if name == "cdiv" and len(args) == 2:
            return -(-args[0] // args[1])
        if name in ("min", "max") and args:
            return min(args) if name == "min" else max(args)
    raise _Unknown(ast.dump(node))

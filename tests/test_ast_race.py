"""``triton_compat.retry_ast_race``: a compile's description is made again when CPython's AST
constructor raises its spurious recursion-depth ``SystemError`` (threads parsing at once on
CPython 3.11); the routing paths that use it are tested with their own (test_jit_routing.py,
test_inductor.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from triton_kiln import triton_compat

RACE = "AST constructor recursion depth mismatch (before=60, after=58)"


def failing(times: int, error: BaseException) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def describe() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "described"

    return calls, describe


def test_the_race_is_retried_until_the_description_succeeds() -> None:
    calls, describe = failing(2, SystemError(RACE))
    assert triton_compat.retry_ast_race(describe) == "described"
    assert len(calls) == 3


def test_a_third_race_in_a_row_propagates() -> None:
    calls, describe = failing(3, SystemError(RACE))
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        triton_compat.retry_ast_race(describe)
    assert len(calls) == 3


@pytest.mark.parametrize("error", [SystemError("another interpreter error"), ValueError(RACE)])
def test_any_other_error_propagates_at_once(error: BaseException) -> None:
    calls, describe = failing(1, error)
    with pytest.raises(type(error)):
        triton_compat.retry_ast_race(describe)
    assert len(calls) == 1

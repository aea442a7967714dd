"""``kiln.compile.parse``: CPython 3.11's transient ``SystemError`` from ``ast.parse`` in
concurrent threads (seen on CI, where it sent one Inductor config's compile to the caller's
process) is parsed again, and a compile's description that meets it is made again
(``again_after_ast_race``; the routing paths' own tests are in test_jit_routing.py and
test_inductor.py); any other error is raised as it is."""

from __future__ import annotations

import ast
import threading
from typing import Any

import pytest

from triton_kiln.compile import parse as parse_module
from triton_kiln.compile.parse import RETRIES, again_after_ast_race, parse

TRANSIENT = SystemError("AST constructor recursion depth mismatch (before=60, after=53)")


def _failing(times: int, error: BaseException) -> Any:
    real = ast.parse
    calls = {"n": 0}

    def fake(source: str) -> ast.Module:
        calls["n"] += 1
        if calls["n"] <= times:
            raise error
        return real(source)

    return fake, calls


def test_the_transient_error_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, calls = _failing(RETRIES, TRANSIENT)
    monkeypatch.setattr(parse_module.ast, "parse", fake)
    tree = parse("def f(x):\n    return x\n")
    assert isinstance(tree.body[0], ast.FunctionDef)
    assert calls["n"] == RETRIES + 1


def test_the_transient_error_past_the_retries_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, calls = _failing(RETRIES + 1, TRANSIENT)
    monkeypatch.setattr(parse_module.ast, "parse", fake)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        parse("x = 1\n")
    assert calls["n"] == RETRIES + 1


@pytest.mark.parametrize("error", [SystemError("something else"), SyntaxError("bad")])
def test_other_errors_are_raised_at_once(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    fake, calls = _failing(1, error)
    monkeypatch.setattr(parse_module.ast, "parse", fake)
    with pytest.raises(type(error)):
        parse("x = 1\n")
    assert calls["n"] == 1


def test_kilns_parses_run_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ast.parse
    inside = {"now": 0, "most": 0}
    lock = threading.Lock()

    def watched(source: str) -> ast.Module:
        with lock:
            inside["now"] += 1
            inside["most"] = max(inside["most"], inside["now"])
        try:
            threading.Event().wait(0.002)  # a thread switch inside the parse
            return real(source)
        finally:
            with lock:
                inside["now"] -= 1

    monkeypatch.setattr(parse_module.ast, "parse", watched)
    threads = [threading.Thread(target=lambda: [parse("x = 1\n") for _ in range(20)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inside["most"] == 1


def test_a_description_that_meets_the_transient_error_is_made_again() -> None:
    calls: list[int] = []

    def describe() -> str:
        calls.append(1)
        if len(calls) <= RETRIES:
            raise TRANSIENT
        return "described"

    assert again_after_ast_race(describe) == "described"
    assert len(calls) == RETRIES + 1
    calls.clear()
    with pytest.raises(ValueError):
        again_after_ast_race(lambda: calls.append(1) or int("not a number"))
    assert len(calls) == 1  # any other error at once

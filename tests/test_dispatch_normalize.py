"""The C dispatcher's normalization of keyword calls and defaults (``Dispatcher(..., normalize)``).

A positional call whose length has entries is keyed as it is (today's fast path, unchanged). A
call with keyword arguments, or a positional call of a length with no entries, is turned into
one tuple of every parameter by ``normalize`` (a function with the kernel's signature) and keyed
like that, so every calling convention that names the same arguments reaches the same entry.
Misses go to the full path with the caller's own arguments, and a call the signature rejects is
left to the full path to report.
"""

from __future__ import annotations

from typing import Any

import pytest

from triton_kiln.launch.native import native

torch = pytest.importorskip("torch")

FLAGS = b"sskc"  # x, y (pointers), n (a tuning-key int), BLOCK (a constexpr with a default)


class Entry:
    def __init__(self, result: str) -> None:
        self.fast = (None, (), "config", result, None, None, ("x", "y", "n", "BLOCK"), {})
        self.launched: list[tuple[Any, ...]] = []

    def launch(self, grid: Any, args: tuple[Any, ...]) -> str:
        self.launched.append(args)
        return str(self.fast[3])


class Owner:
    best_config: Any = None


def normalize(x: Any, y: Any, n: Any, BLOCK: Any = 128) -> tuple[Any, ...]:
    return (x, y, n, BLOCK)


def make(tables: dict[int, dict[Any, Any]], norm: Any = normalize) -> tuple[Any, list[Any]]:
    calls: list[Any] = []

    def fallback(grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        calls.append((args, kwargs))
        return "full path"

    flags = [FLAGS[:n] for n in range(len(FLAGS) + 1)]
    return native().Dispatcher(tables, flags, Owner(), fallback, norm), calls


def key(*args: Any) -> Any:
    return native().call_key(args, FLAGS[: len(args)])


def test_keyword_and_default_calls_reach_the_entry_of_the_full_positional_call() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    entry = Entry("hit")
    dispatcher, calls = make({4: {key(x, y, 64, 128): entry}})
    assert dispatcher[(1,)](x, y, 64, 128) == "hit"
    assert dispatcher[(1,)](x, y, 64) == "hit"  # default filled
    assert dispatcher[(1,)](x, y, n=64) == "hit"
    assert dispatcher[(1,)](y=y, x=x, n=64, BLOCK=128) == "hit"
    assert calls == []
    assert all(args == (x, y, 64, 128) for args in entry.launched)
    assert len(entry.launched) == 4


def test_positional_calls_with_entries_of_their_length_are_keyed_as_they_are() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    short, full = Entry("short"), Entry("full")
    seen: list[Any] = []

    def counting(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        seen.append(args)
        return normalize(*args, **kwargs)

    dispatcher, calls = make({3: {key(x, y, 64): short}, 4: {key(x, y, 64, 128): full}}, counting)
    assert dispatcher[(1,)](x, y, 64) == "short"
    assert seen == []  # not normalized: its length has entries
    assert dispatcher[(1,)](x, y, n=64) == "full"
    assert seen == [(x, y)]
    assert calls == []


def test_a_normalized_miss_goes_to_the_full_path_with_the_callers_own_arguments() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    dispatcher, calls = make({4: {key(x, y, 64, 128): Entry("hit")}})
    assert dispatcher[(1,)](x, y, n=64, BLOCK=256) == "full path"  # another constexpr value
    assert calls == [((x, y), {"n": 64, "BLOCK": 256})]


def test_a_call_the_signature_rejects_is_left_to_the_full_path() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    dispatcher, calls = make({4: {key(x, y, 64, 128): Entry("hit")}})
    assert dispatcher[(1,)](x, y, 64, bogus=1) == "full path"
    assert calls == [((x, y, 64), {"bogus": 1})]


def test_errors_of_normalize_other_than_type_errors_propagate() -> None:
    def broken(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        raise RuntimeError("boom")

    x, y = torch.zeros(64), torch.zeros(64)
    dispatcher, calls = make({}, broken)
    with pytest.raises(RuntimeError, match="boom"):
        dispatcher[(1,)](x, y, n=64)
    assert calls == []


def test_normalize_must_return_a_tuple() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    dispatcher, _ = make({}, lambda *a, **k: list(a))
    with pytest.raises(TypeError, match="must return a tuple"):
        dispatcher[(1,)](x, y, n=64)


def test_without_normalize_keyword_calls_take_the_full_path_as_before() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    dispatcher, calls = make({4: {key(x, y, 64, 128): Entry("hit")}}, None)
    assert dispatcher[(1,)](x, y, n=64, BLOCK=128) == "full path"
    assert dispatcher[(1,)](x, y, 64, 128) == "hit"
    assert calls == [((x, y), {"n": 64, "BLOCK": 128})]


def test_normalize_must_be_callable() -> None:
    with pytest.raises(TypeError, match="normalize must be callable"):
        make({}, 42)

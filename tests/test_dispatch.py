"""kiln's C dispatcher (``_kiln_launch.Dispatcher``), the fast path behind ``kernel[grid](...)``.

Launching needs a GPU (``test_launch_gpu.py`` checks outputs there); here, on CPU, the routing:
which calls reach an entry, which fall back to the full path and with what, what a hit sets on
the owner, and that the C key it matches on is ``call_key``'s.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from triton_kiln.launch.native import native

torch = pytest.importorskip("torch")


class FakeEntry:
    """A registered entry without kiln's launcher (``fast[0] is None``): hits call ``launch``."""

    def __init__(self, config: str, result: str) -> None:
        self.fast = (None, (), config, result, None, None, ("x", "y", "n"), {})
        self.launched: list[tuple[Any, tuple[Any, ...]]] = []

    def launch(self, grid: Any, args: tuple[Any, ...]) -> str:
        self.launched.append((grid, args))
        return str(self.fast[3])


class Owner:
    best_config: Any = None


FLAGS = b"ssk"  # x (pointer), y (pointer), n (a tuning-key int)


def make(tables: dict[int, dict[Any, Any]] | None = None) -> tuple[Any, Owner, list[Any]]:
    calls: list[Any] = []
    owner = Owner()

    def fallback(grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        calls.append((grid, args, kwargs))
        return "full path"

    flags = [FLAGS[:n] for n in range(len(FLAGS) + 1)]
    dispatcher = native().Dispatcher({} if tables is None else tables, flags, owner, fallback)
    return dispatcher, owner, calls


def key(*args: Any) -> Any:
    return native().call_key(args, FLAGS[: len(args)])


def test_a_miss_goes_to_the_full_path_with_the_grid_and_arguments() -> None:
    dispatcher, owner, calls = make()
    x, y = torch.zeros(8), torch.zeros(8)
    assert dispatcher[(4,)](x, y, 8) == "full path"
    assert calls == [((4,), (x, y, 8), {})]
    assert owner.best_config is None


def test_a_hit_launches_the_entry_and_sets_best_config() -> None:
    x, y = torch.zeros(8), torch.zeros(8)
    entry = FakeEntry("config A", "launched")
    dispatcher, owner, calls = make({3: {key(x, y, 8): entry}})
    assert dispatcher[(4,)](x, y, 8) == "launched"
    assert entry.launched == [((4,), (x, y, 8))]
    assert owner.best_config == "config A"
    assert calls == []


def test_the_key_separates_values_of_key_arguments_dtypes_and_alignment() -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    entry = FakeEntry("A", "hit")
    dispatcher, _, calls = make({3: {key(x, y, 64): entry}})
    assert dispatcher[(1,)](x, y, 64) == "hit"
    assert dispatcher[(1,)](x, y, 128) == "full path"  # another tuning-key value
    assert dispatcher[(1,)](x.half(), y, 64) == "full path"  # another dtype
    assert dispatcher[(1,)](x[1:], y, 64) == "full path"  # a pointer no longer 16-byte aligned
    assert len(calls) == 3
    assert len(entry.launched) == 1


def test_keyword_arguments_and_unknown_argument_counts_take_the_full_path() -> None:
    x, y = torch.zeros(8), torch.zeros(8)
    entry = FakeEntry("A", "hit")
    dispatcher, _, calls = make({3: {key(x, y, 8): entry}})
    assert dispatcher[(1,)](x, y, n=8) == "full path"
    assert calls[-1] == ((1,), (x, y), {"n": 8})
    assert dispatcher[(1,)](x, y, 8, 9) == "full path"  # more arguments than the kernel has flags for
    assert calls[-1] == ((1,), (x, y, 8, 9), {})
    assert entry.launched == []


def test_arguments_the_key_cannot_describe_take_the_full_path() -> None:
    dispatcher, _, calls = make({3: {}})
    weird = object()  # no dtype, no data_ptr
    assert dispatcher[(1,)](weird, weird, 8) == "full path"
    assert calls == [((1,), (weird, weird, 8), {})]


def test_a_callable_grid_reaches_the_entry_unevaluated() -> None:
    x, y = torch.zeros(8), torch.zeros(8)
    entry = FakeEntry("A", "hit")
    dispatcher, _, _ = make({3: {key(x, y, 8): entry}})

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (1,)

    assert dispatcher[grid](x, y, 8) == "hit"
    assert entry.launched == [(grid, (x, y, 8))]


def test_entries_added_or_dropped_later_are_seen() -> None:
    """The tables are the autotuner's own dicts: the dispatcher reads them on every call."""
    tables: dict[int, dict[Any, Any]] = {}
    dispatcher, _, calls = make(tables)
    x, y = torch.zeros(8), torch.zeros(8)
    bound = dispatcher[(2,)]
    assert bound(x, y, 8) == "full path"
    tables.setdefault(3, {})[key(x, y, 8)] = FakeEntry("A", "hit")
    assert bound(x, y, 8) == "hit"
    tables.clear()
    assert bound(x, y, 8) == "full path"
    assert len(calls) == 2


def test_errors_from_the_full_path_and_entries_propagate() -> None:
    def fallback(grid: Any, args: Any, kwargs: Any) -> Any:
        raise RuntimeError("from the full path")

    flags = [FLAGS[:n] for n in range(len(FLAGS) + 1)]
    dispatcher = native().Dispatcher({}, flags, Owner(), fallback)
    with pytest.raises(RuntimeError, match="from the full path"):
        dispatcher[(1,)](1, 2, 3)

    class Broken:
        fast = ("not an 8-tuple",)

    x, y = torch.zeros(8), torch.zeros(8)
    dispatcher, _, _ = make({3: {key(x, y, 8): Broken()}})
    with pytest.raises(TypeError, match="8-tuple"):
        dispatcher[(1,)](x, y, 8)


def test_bad_construction_is_refused_with_a_clear_error() -> None:
    module = native()
    with pytest.raises(TypeError, match="callable"):
        module.Dispatcher({}, [b""], Owner(), "not callable")
    with pytest.raises(TypeError, match=r"flags_by_len\[1\] must be 1 bytes"):
        module.Dispatcher({}, [b"", b"ss"], Owner(), lambda *a: None)


def test_a_dispatcher_in_a_cycle_with_its_owner_is_collected() -> None:
    """The autotuner holds its dispatcher, which holds the autotuner: the GC must free both."""
    owner = Owner()
    flags = [FLAGS[:n] for n in range(len(FLAGS) + 1)]
    owner.dispatcher = native().Dispatcher({}, flags, owner, lambda *a: None)  # type: ignore[attr-defined]
    owner.bound = owner.dispatcher[(1,)]  # type: ignore[attr-defined]
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None


def test_without_the_c_helper_kernel_grid_is_the_full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """No C compiler: no dispatcher, and ``kernel[grid](...)`` goes to ``Autotuner.run``."""
    import triton_kiln as kiln
    from support import kernels
    from triton_kiln.launch import dispatch as dispatch_mod
    from triton_kiln.launch.native import NativeBuildError

    def no_helper(cache_dir: Any = None) -> Any:
        raise NativeBuildError("no C compiler (test)")

    monkeypatch.setattr(dispatch_mod, "native", no_helper)
    tuned = kiln.autotune([kiln.Config({"BLOCK": 128})], key=["n"])(kernels.add_kernel)
    assert tuned._variants.tables.dispatcher is None
    runs: list[Any] = []
    monkeypatch.setattr(tuned, "run", lambda *args, **kwargs: runs.append((args, kwargs)) or "ran")
    assert tuned[(2,)](1, 2, 3, n=4) == "ran"
    assert runs == [((1, 2, 3), {"grid": (2,), "warmup": False, "n": 4})]

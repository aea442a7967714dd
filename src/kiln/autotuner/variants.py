"""The tuned call's fast path: call key -> cached launcher -> grid -> launch.

``kernel[grid]`` returns kiln's C ``BoundCall`` (``_kiln_launch.c``: ``Dispatcher.bind``),
which runs the steps below in C on a hit (only a grid function itself runs Python); it reads
each entry's ``LaunchEntry.fast``. Where the C helper cannot be built there is no fast path:
``kernel[grid]`` is Triton's own proxy to ``Autotuner.run``::

    kernel[grid](*args)            BoundCall.__call__ (C)
      no keyword arguments?        else: Autotuner.run (the full path)
      key = call_key(args, flags)  C: the key args' values, dtypes, alignment, int classes
      entry = fast[len(args)][key] miss: Autotuner.run, which tunes or loads, then registers
      grid(meta) when callable     meta = the call's arguments + the config's kwargs
      entry.launcher.launch(...)   kiln's C launcher on torch's current stream

A :class:`LaunchEntry` is registered by the full path after it has launched a config for a call
with only positional arguments. The key covers everything that chose the config and the
binary (tuning-key values, dtypes, Triton's specialization), so a hit launches exactly what the
full path would. Entries are dropped whenever the autotuner's ``cache`` changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class FastCache(dict[Any, Any]):
    """``Autotuner.cache`` (tuning key -> config) that drops the fast entries when it changes."""

    def __init__(self, on_change: Callable[[], None], *args: Any) -> None:
        super().__init__(*args)
        self._on_change = on_change

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._on_change()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._on_change()

    def clear(self) -> None:
        super().clear()
        self._on_change()

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        self._on_change()
        return value

    def popitem(self) -> tuple[Any, Any]:
        item = super().popitem()
        self._on_change()
        return item

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._on_change()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._on_change()
        return value

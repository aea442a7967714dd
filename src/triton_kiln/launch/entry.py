"""A launch ready to go: binary, the arguments a call leaves out, and how to compute the grid.

:class:`LaunchEntry` is what both the autotuner's fast path (:mod:`triton_kiln.autotuner.launch_tables`)
and a bundle's kernels (:mod:`triton_kiln.bundle.runtime`) launch once a call has been matched::

    launch(grid, args): full = args + tail; grid = grid(meta) if callable
                        (meta = the arguments by name + the config's kwargs);
                        kiln's C launcher on torch's current stream, or Triton's launcher
    fast:               (native launcher or None, tail, config, result, get_stream, get_device,
                        names, meta_extra): what kiln's C dispatcher (``_kiln_launch.Dispatcher``)
                        reads to compute the grid and launch without entering Python

It imports no Triton.
"""

from __future__ import annotations

from typing import Any

from triton_kiln.launch.launcher import KernelLauncher, stream_functions, stream_getter


class LaunchEntry:
    """What a matched call launches: the binary, the arguments the call leaves out, the config."""

    __slots__ = (
        "config",
        "fast",
        "launcher",
        "meta_extra",
        "names",
        "native",
        "result",
        "source",
        "stream",
        "tail",
    )

    def __init__(
        self,
        launcher: KernelLauncher,
        names: tuple[str, ...],
        tail: tuple[Any, ...],
        meta_extra: dict[str, Any],
        config: Any = None,
        result: Any = None,
        source: str = "",
    ) -> None:
        self.launcher = launcher
        self.names = names
        self.tail = tail
        self.meta_extra = meta_extra
        self.config = config
        self.result = result
        self.source = source  # "tuned", "database", "bundle <path>"
        # kiln's C launcher and torch's stream getter, called directly (one Python frame less).
        self.native = launcher.native
        self.stream = stream_getter() if launcher.native is not None else None
        get_stream, get_device = stream_functions() if launcher.native is not None else (None, None)
        self.fast = (
            self.native,
            tuple(tail),
            config,
            result,
            get_stream,
            get_device,
            tuple(names),
            dict(meta_extra),
        )

    def launch(self, grid: Any, args: tuple[Any, ...]) -> Any:
        full = args + self.tail if self.tail else args
        if callable(grid):
            meta = dict(zip(self.names, full, strict=False))
            meta.update(self.meta_extra)
            grid = grid(meta)
        if type(grid) is not tuple:
            grid = tuple(grid)
        if self.stream is not None:
            self.native.launch(grid, self.stream(), full)
        else:
            self.launcher.launch(grid, full)
        return self.result


class HookedEntry(LaunchEntry):
    """A launch whose config has a ``pre_hook``: it runs before every launch, as Triton runs it on
    every call (with the arguments by name and the config's kwargs), so the C dispatcher hands
    such entries to :meth:`launch` in Python (``fast[0]`` is ``None``) instead of launching."""

    __slots__ = ("pre_hook",)

    def __init__(self, pre_hook: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pre_hook = pre_hook
        self.stream = None  # launch() goes through the KernelLauncher, after the hook
        self.fast = (None, *self.fast[1:])

    def launch(self, grid: Any, args: tuple[Any, ...]) -> Any:
        full = args + self.tail if self.tail else args
        nargs = dict(zip(self.names, full, strict=False))
        nargs.update(self.meta_extra)
        self.pre_hook(nargs)  # may change the caller's descriptors (block shapes), as in Triton
        if callable(grid):
            grid = grid(nargs)
        if type(grid) is not tuple:
            grid = tuple(grid)
        self.launcher.launch(grid, full)
        return self.result

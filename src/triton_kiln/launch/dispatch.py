"""The one place kiln's C dispatcher is built: ``kernel[grid](*args)`` for tuned kernels and bundles.

::

    LaunchTables(flags, owner, full_path)      tables: len(args) -> call key -> entry
      .bind(grid)   -> _kiln_launch.BoundCall  (None without the C helper: the owner falls back)
      BoundCall(*args, **kwargs)  (C)          keywords, or a length with no entries: normalize
                                               (*args, **kwargs) -> one positional tuple, keyed as
                                               below; no normalize / TypeError -> full_path
                        key = call_key(args, flags_by_len[len(args)])
                        entry = tables[len(args)][key]  miss -> full_path(grid, args, kwargs)
                        owner.best_config = entry.fast[2]; launch entry.fast; return entry.fast[3]
      .key(args)    -> the same call key, from Python (None: the key cannot describe the args)
      .put(len(args), key, entry) / .get(args) / .clear()

An entry is anything with ``.fast`` (see :class:`triton_kiln.launch.entry.LaunchEntry`). The owner is
the autotuner (:mod:`triton_kiln.autotuner.launch_tables`) or a bundle's kernel
(:mod:`triton_kiln.bundle.runtime`); both read and write their tables only through this class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_kiln.launch.native import NativeBuildError, native

log = logging.getLogger("kiln.launch")

FullPath = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
"""``full_path(grid, args, kwargs)``: what a call the tables do not match runs."""

# What the C key (and hash()) raise for arguments it cannot describe: the full path decides.
_UNKEYABLE = (TypeError, AttributeError, OverflowError, ValueError)


class LaunchTables:
    """Launch entries by call key, and kiln's C dispatcher over them (when the helper builds)."""

    def __init__(
        self,
        flags: bytes,
        owner: Any,
        full_path: FullPath,
        *,
        name: str,
        cache_dir: Path | None = None,
        normalize: Callable[..., tuple[Any, ...]] | None = None,
    ) -> None:
        """``flags``: one byte per parameter (:func:`triton_kiln.launch.spec.param_flags`); ``owner``
        gets ``best_config`` set on each hit; ``name`` is the kernel's, for the log;
        ``normalize(*args, **kwargs)``: a keyword call (or one of a length with no entries) as
        one positional tuple (see ``_kiln_launch.c``), or ``None``: such calls take the full path."""
        self.tables: dict[int, dict[tuple[Any, ...], Any]] = {}
        self.flags_by_len = [flags[:n] for n in range(len(flags) + 1)]
        self._call_key: Callable[..., Any] | None = None
        self.dispatcher: Any = None
        self.unavailable: str | None = None  # why there is no C dispatcher
        self._normalize = normalize
        # The C helper is loaded (or built) at the first call, not here: defining a kernel
        # (every kernel of a library, at its import) loads nothing and runs no compiler.
        self._owner: Any = owner
        self._full_path = full_path
        self._name = name
        self._cache_dir = cache_dir
        self._loaded = False

    def _load(self) -> Any:
        """The C dispatcher, made on first need (``None``: no C helper, logged once)."""
        if not self._loaded:
            self._loaded = True
            try:
                module = native(self._cache_dir)
                self._call_key = module.call_key
                self.dispatcher = module.Dispatcher(
                    self.tables, list(self.flags_by_len), self._owner, self._full_path, self._normalize
                )
            except NativeBuildError as exc:
                self.unavailable = str(exc)
                log.info("kiln: %s has no fast launch path: %s", self._name, exc)
        return self.dispatcher

    @property
    def loaded(self) -> bool:
        """Whether the C helper was asked for yet (by a call, a key or :attr:`available`)."""
        return self._loaded

    @property
    def available(self) -> bool:
        return self._load() is not None

    @property
    def normalizer(self) -> Callable[..., tuple[Any, ...]] | None:
        """The dispatcher's ``normalize`` (``None``: none, or no C dispatcher)."""
        return self._normalize if self._load() is not None else None

    @property
    def normalizes(self) -> bool:
        """Whether keyword calls (and calls of unregistered lengths) are normalized in C."""
        return self._load() is not None and self._normalize is not None

    def bind(self, grid: Any) -> Any:
        """``kernel[grid]``: the C ``BoundCall``, or ``None`` without the C helper."""
        dispatcher = self.dispatcher
        if dispatcher is None:
            dispatcher = self._load()
            if dispatcher is None:
                return None
        return dispatcher[grid]

    def key(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The C dispatcher's key for these positional arguments (``None``: it has none)."""
        if self._call_key is None:
            self._load()
        if self._call_key is None or len(args) >= len(self.flags_by_len):
            return None
        try:
            key: tuple[Any, ...] = self._call_key(args, self.flags_by_len[len(args)])
            hash(key)
        except _UNKEYABLE:
            return None
        return key

    def put(self, n_args: int, key: tuple[Any, ...], entry: Any, *, replace: bool = True) -> None:
        """Register ``entry`` for calls of ``n_args`` positional arguments with this key
        (``replace=False``: keep an entry already there)."""
        table = self.tables.setdefault(n_args, {})
        if replace:
            table[key] = entry
        else:
            table.setdefault(key, entry)

    def get(self, args: tuple[Any, ...]) -> Any:
        """The entry a call with these positional arguments launches, or ``None``."""
        table = self.tables.get(len(args))
        key = self.key(args) if table is not None else None
        return None if key is None or table is None else table.get(key)

    def clear(self) -> None:
        self.tables.clear()

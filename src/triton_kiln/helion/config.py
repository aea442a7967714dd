"""Which kiln pool, GPU target and benchmark sandbox Helion's autotunes use (set by :func:`configure`).

By default: kiln's process-wide pool (:func:`triton_kiln.get_pool`, ``KILN_*`` settings), the
local GPU's target, and one process-wide call sandbox for Helion's benchmark jobs (made on first
use, warmed up with torch, Helion and a CUDA context; see :mod:`.sandbox_jobs`). Tests on a
machine without a GPU pass ``target=GPUTarget("cuda", 90, 32)`` and a stand-in ``sandbox``.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from triton_kiln import CompilePool, GPUTarget, get_pool
from triton_kiln.sandbox.call_messages import CallOutcome


class BenchmarkSandbox(Protocol):
    """What Helion's benchmark jobs need from a sandbox: ``call``, ``start`` and ``close`` of
    :class:`~triton_kiln.sandbox.call_client.CallSandbox`."""

    def call(
        self,
        fn: Callable[[], Any],
        *,
        label: str,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> CallOutcome: ...

    def start(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class HelionPoolConfig:
    pool: CompilePool | None = None  # None: triton_kiln.get_pool()
    target: GPUTarget | None = None  # None: the local GPU (an error without one)
    sandbox: BenchmarkSandbox | None = None  # None: kiln's process-wide benchmark sandbox


_lock = threading.Lock()
_config = HelionPoolConfig()
_default_sandbox: BenchmarkSandbox | None = None


def configure(
    pool: CompilePool | None = None,
    target: GPUTarget | None = None,
    sandbox: BenchmarkSandbox | None = None,
) -> HelionPoolConfig:
    """Send Helion's precompiles to ``pool`` (default: kiln's process-wide pool), for ``target``,
    and its benchmark jobs to ``sandbox`` (default: kiln's process-wide benchmark sandbox).

    Returns the previous configuration (pass its fields back to restore it).
    """
    global _config
    with _lock:
        previous = _config
        _config = HelionPoolConfig(pool=pool, target=target, sandbox=sandbox)
        return previous


def current() -> HelionPoolConfig:
    return _config


def pool() -> CompilePool:
    """The pool in force, started (in the background) if it was not yet."""
    chosen = _config.pool or get_pool()
    return chosen.start()


def sandbox() -> BenchmarkSandbox:
    """The benchmark sandbox in force; kiln's process-wide one is made (not started) on first use."""
    global _default_sandbox
    chosen = _config.sandbox
    if chosen is not None:
        return chosen
    with _lock:
        if _default_sandbox is None:
            from triton_kiln.helion.sandbox_jobs import make_sandbox

            _default_sandbox = make_sandbox()
            atexit.register(_close_default_sandbox)
        return _default_sandbox


def start_sandbox_ahead(idle_s: float) -> None:
    """Start the sandbox in force ahead of any search. It closes again when no search has called
    it within ``idle_s`` (``KILN_IDLE_S``), so a process that installs kiln and autotunes
    nothing holds no CUDA context; with ``idle_s`` 0 nothing starts. A search's provider starts
    it anyway, and Helion's cleanup at the end of the search closes it."""
    if idle_s <= 0:
        return
    box = sandbox()
    box.start()
    calls = getattr(box, "calls", None)  # None: a sandbox that does not count its calls stays

    def close_if_unused() -> None:
        if calls is not None and getattr(box, "calls", None) == calls:
            box.close()

    timer = threading.Timer(idle_s, close_if_unused)
    timer.daemon = True
    timer.name = "kiln-helion-sandbox-idle"
    timer.start()


def _close_default_sandbox() -> None:
    global _default_sandbox
    with _lock:
        made, _default_sandbox = _default_sandbox, None
    if made is not None:
        made.close()

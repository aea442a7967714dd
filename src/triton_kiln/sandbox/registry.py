"""One benchmark sandbox per device per process, started at a tuning's first miss (on a fresh
cache, ahead of it), gone when idle.

:func:`prestart` starts the device's sandbox in the background when a GPU is present (checked
without initializing CUDA in the caller: ``/dev/nvidia*``, or torch's answer when torch is
already imported), so that it warms up while the configs compile; :func:`shared` returns that
same sandbox to the tuner, which keeps it across tunings. When a run ends, :func:`release_later`
closes it once idle for ``KILN_IDLE_S`` (its process, CUDA context and input copies go; a run
that starts meanwhile, :func:`hold`, keeps it, and a later run starts a fresh process). With
``KILN_NATIVE_SANDBOX=0`` both give the torch sandbox (:class:`~triton_kiln.sandbox.torch_client.Sandbox`).
"""

from __future__ import annotations

import atexit
import glob
import os
import sys
import threading
from typing import Any

from triton_kiln import settings as settings_mod

_SANDBOXES: dict[int, Any] = {}
_LOCK = threading.Lock()
_RELEASES: dict[int, threading.Timer] = {}  # device -> the pending idle release of its sandbox
_RUNS: dict[int, int] = {}  # device -> tuning runs using its sandbox now
idle_releases: dict[int, int] = {}  # device -> times its sandbox exited idle (KILN_IDLE_S)


def gpu_present() -> bool:
    """Whether this machine seems to have an NVIDIA GPU, without creating a CUDA context."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return bool(torch.cuda.is_available())
        except Exception:
            return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def shared(device: int = 0) -> Any:
    """The process's sandbox for ``device`` (made on first use, closed at exit; not started)."""
    with _LOCK:
        sandbox = _SANDBOXES.get(device)
        if sandbox is None:
            current = settings_mod.current()
            if current.native_sandbox:
                from triton_kiln.sandbox.native_client import NativeSandbox

                sandbox = NativeSandbox(device, timeout_s=current.bench_timeout_s)
            else:
                from triton_kiln.sandbox.torch_client import Sandbox

                sandbox = Sandbox(device, timeout_s=current.bench_timeout_s)
            _SANDBOXES[device] = sandbox
            atexit.register(sandbox.close)
        return sandbox


def default_device() -> int:
    """torch's current device if torch has initialized CUDA already, else 0 (never initializes it)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:
        pass
    return 0


def prestart(device: int | None = None) -> Any:
    """Start ``device``'s sandbox in the background if benchmarks will need it; returns it or ``None``.

    Cheap and safe to call at decoration time: it does nothing without a GPU or with
    ``KILN_SANDBOX=0``, and never initializes CUDA in the caller (``device=None``: torch's
    current device when torch has initialized CUDA, else 0).
    """
    if not settings_mod.current().sandbox or not gpu_present():
        return None
    sandbox = shared(default_device() if device is None else device)
    sandbox.start()
    return sandbox


def prestart_ahead() -> Any:
    """:func:`prestart` before any tuning asks for it (a fresh cache, whose first call tunes:
    :mod:`triton_kiln.autotuner.prewarm`), so the first run finds its sandbox warm instead of
    waiting for its start (0.3-0.5 s of an H100's first call of Liger's DyT). A sandbox no run
    has held closes after ``KILN_IDLE_S``, as after a run (``0``: none is started ahead).
    Nothing where the device is not known yet: torch has not initialized CUDA and
    ``LOCAL_RANK`` says the process is one rank of several (each rank's own device is chosen
    later; its sandbox starts at its first miss)."""
    if settings_mod.current().idle_s <= 0:  # nothing held that no run asked for
        return None
    torch = sys.modules.get("torch")
    cuda_ready = torch is not None and _cuda_initialized(torch)
    if "LOCAL_RANK" in os.environ and not cuda_ready:
        return None
    sandbox = prestart()
    if sandbox is None:
        return None
    device = default_device()
    with _LOCK:
        unheld = _RUNS.get(device, 0) == 0 and device not in _RELEASES
        timer = _release_timer(device, sandbox, settings_mod.current().idle_s) if unheld else None
    if timer is not None:
        timer.start()
    return sandbox


def _cuda_initialized(torch: Any) -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _release_timer(device: int, sandbox: Any, idle_s: float) -> threading.Timer | None:
    """(``_LOCK`` held) The timer that closes ``device``'s idle sandbox after ``idle_s``, kept
    as its pending release; ``None`` for ``idle_s`` 0 (the caller closes it now)."""
    if idle_s <= 0:
        return None
    timer = threading.Timer(idle_s, _release, args=(device, sandbox))
    timer.name = "kiln-sandbox-idle"
    timer.daemon = True
    _RELEASES[device] = timer
    return timer


def hold(device: int) -> None:
    """A run uses ``device``'s sandbox: a pending idle release is called off until it ends."""
    with _LOCK:
        _RUNS[device] = _RUNS.get(device, 0) + 1
        timer = _RELEASES.pop(device, None)
    if timer is not None:
        timer.cancel()


def release_later(device: int, idle_s: float) -> None:
    """A run on ``device`` ended (one :func:`hold` each): once no run holds it, its sandbox
    closes after ``idle_s`` without another (0: now)."""
    with _LOCK:
        _RUNS[device] = max(0, _RUNS.get(device, 0) - 1)
        old = _RELEASES.pop(device, None)
        sandbox = _SANDBOXES.get(device) if _RUNS[device] == 0 else None
        timer = _release_timer(device, sandbox, idle_s) if sandbox is not None else None
    if old is not None:
        old.cancel()
    if timer is not None:
        timer.start()
    elif sandbox is not None:
        _close_idle(device, sandbox)


def _release(device: int, sandbox: Any) -> None:
    with _LOCK:
        if _RELEASES.get(device) is not threading.current_thread():
            return  # called off (hold), or replaced by a later run's release
        del _RELEASES[device]
    _close_idle(device, sandbox)


def _close_idle(device: int, sandbox: Any) -> None:
    if sandbox.pid is None:
        return
    sandbox.close()  # waits for a benchmark in progress (the sandbox's lock); the next starts anew
    idle_releases[device] = idle_releases.get(device, 0) + 1

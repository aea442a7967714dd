"""One benchmark sandbox per device per process, started early: when a tuned kernel is defined.

:func:`prestart` starts the device's sandbox in the background when a GPU is present (checked
without initializing CUDA in the caller: ``/dev/nvidia*``, or torch's answer when torch is
already imported), so that it is ready by the first call; :func:`shared` returns that same
sandbox to the tuner, which keeps it across tunings. With ``KILN_NATIVE_SANDBOX=0`` both give
the torch sandbox (:class:`~triton_kiln.sandbox.client.Sandbox`), as before.
"""

from __future__ import annotations

import atexit
import glob
import sys
import threading
from typing import Any

from triton_kiln import settings as settings_mod

_SANDBOXES: dict[int, Any] = {}
_LOCK = threading.Lock()


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
                from triton_kiln.sandbox.client import Sandbox

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

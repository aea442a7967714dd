"""Start what a first tuning waits for while the caller is still importing its kernels.

Called by ``kiln.install()`` (before the libraries it routes are imported) and when a tuned
kernel is defined, and only where a GPU is present (so, where tuning will happen; CI and
CPU-only machines start nothing); the key is computed once per process::

    kernel defined -> prewarm()
        ├─ the device's benchmark sandbox starts          (kiln.sandbox.registry.prestart)
        └─ thread "kiln-prewarm":
              Triton's key (hashes libtriton.so, ~2 s of CPU in a fresh cache; kept on disk)
              -> the process's compile pool is made        (its zygote starts with the first job:
                                                            a process served from caches spawns none)

Without it the first call pays Triton's key in the caller; with it, the zygote reads the key
from kiln's file. The zygote's own start (~1 s to the first compile on an H100 host) is still
on the first call's path. Nothing here initializes CUDA in the caller. A kernel given its own
``pool=`` or ``target=`` prewarms nothing: its pool and device are the caller's business.
"""

from __future__ import annotations

import logging
import threading

from triton_kiln import settings as settings_mod
from triton_kiln import triton_compat

log = logging.getLogger("kiln.autotune")

_lock = threading.Lock()
_started = False


def prewarm(sandbox: bool, pool: bool) -> bool:
    """Start the sandbox (``sandbox``; idempotent) and, once per process and in the background,
    compute Triton's key and make the default compile pool (``pool``). ``False`` without a GPU."""
    global _started
    from triton_kiln.sandbox.registry import gpu_present, prestart

    if not (sandbox or pool) or not gpu_present():
        return False
    if sandbox:
        prestart()
    if pool:
        with _lock:
            start, _started = not _started, True
        if start:
            threading.Thread(target=_warm_pool, name="kiln-prewarm", daemon=True).start()
    return True


def _warm_pool() -> None:
    from triton_kiln.pool import get_pool

    try:
        triton_compat.triton_key(settings_mod.current().triton_key_dir)
        get_pool()
    except Exception as exc:  # the first tuning will meet (and report) the same problem
        log.debug("kiln: prewarming the compile pool failed: %s", exc)

"""Start what a first tuning waits for while the caller is still importing its kernels.

Called by ``triton_kiln.install()`` (before the libraries it routes are imported) and when a tuned
kernel is defined, and only where a GPU is present (so, where tuning will happen; CI and
CPU-only machines start nothing); the key is computed once per process::

    kernel defined -> prewarm()
        ├─ the device's benchmark sandbox starts          (triton_kiln.sandbox.registry.prestart)
        ├─ thread "kiln-driver-prebuild": Triton's CUDA driver utilities (gcc, ~0.3 s on a fresh
        │     Triton cache) into Triton's cache, before the first launch needs them
        └─ thread "kiln-prewarm":
              Triton's key (hashes libtriton.so, ~2 s of CPU once per machine; kept on disk,
                            later processes read it: triton_compat.triton_key); the caller's own
                            Triton was already told, in prewarm itself, to ask kiln for it
                            (seed_caller_triton_key: the stored key, or this computation's)
              -> the process's compile pool is made and started: its zygote spawns now, reads
                 the key from kiln's file, imports Triton and compiles its warm-up kernel
              -> (with the sandbox) the output check's kernel, every dtype variant, queued in
                 that pool for each GPU capability ``nvidia-smi`` lists (a subprocess: no CUDA
                 here); the first tuning run finds them in the pool's caches instead of waiting
                 for their compile before its first benchmark (~0.4-1 s per run that meets a
                 new dtype, measured on an H100: bench/first_call_timeline.py)

Without it the first call pays Triton's key and the zygote's start (~1 s to the first compile on
an H100 host); with it, the first call finds the zygote ready and only compiles and times. On a
machine that serves every call from caches the zygote idles (one process, no CUDA; its workers
fork on demand). Nothing here initializes CUDA in the caller. A kernel given its own
``pool=`` or ``target=`` prewarms nothing: its pool and device are the caller's business.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from concurrent.futures import Future
from typing import Any

from triton_kiln import settings as settings_mod
from triton_kiln import triton_compat

log = logging.getLogger("kiln.autotune")

_lock = threading.Lock()
_started = False
compare_futures: list[Future[Any]] = []  # the output check's kernels prewarm queued (tests wait on them)


def prewarm(sandbox: bool, pool: bool) -> bool:
    """Start the sandbox (``sandbox``; idempotent) and, once per process and in the background,
    compute Triton's key and make the default compile pool (``pool``). ``False`` without a GPU."""
    global _started
    from triton_kiln.sandbox.registry import gpu_present, prestart

    if not gpu_present():
        return False
    # The caller's own Triton (plain @triton.jit kernels it compiles itself) asks kiln for its
    # key from now on: the stored one (a few ms of stat calls, never a hash), or the one the
    # thread below is computing (waited for, not computed twice).
    triton_compat.seed_caller_triton_key(settings_mod.current().triton_key_dir)
    if not (sandbox or pool):
        return False
    if sandbox:
        prestart()
    if settings_mod.current().prebuild_launchers:  # Triton's cuda_utils: gcc, off the first launch
        from triton_kiln.launch import prebuild

        prebuild.start_driver_utils()
    if pool:
        with _lock:
            start, _started = not _started, True
        if start:
            threading.Thread(target=_warm_pool, args=(sandbox,), name="kiln-prewarm", daemon=True).start()
    return True


def _warm_pool(sandbox: bool = False) -> None:
    from triton_kiln.pool import get_pool

    try:
        triton_compat.triton_key(settings_mod.current().triton_key_dir)
        pool = get_pool()
        pool.start()  # the zygote spawns in the background; nothing waits for it here
    except Exception as exc:  # the first tuning will meet (and report) the same problem
        log.debug("kiln: prewarming the compile pool failed: %s", exc)
        return
    if sandbox:
        _queue_compare_kernels(pool)


def _queue_compare_kernels(pool: Any) -> None:
    """The output check's kernel, every variant, for each local capability (not waited for)."""
    from triton_kiln.autotuner import compare_kernels
    from triton_kiln.sandbox.compare_kernel import VARIANTS

    for target in gpu_targets():
        try:
            compare_futures.extend(compare_kernels.submit(pool, target, VARIANTS).values())
        except Exception as exc:  # the first tuning run queues them itself
            log.debug("kiln: prewarming the output check's kernel for %s failed: %s", target, exc)


def gpu_targets() -> list[Any]:
    """The local GPUs' Triton targets, as ``nvidia-smi`` reports their compute capabilities
    (another process: this one creates no CUDA context); ``[]`` where it cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    capabilities: list[int] = []
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        major, _, minor = line.strip().partition(".")
        if major.isdigit() and minor.isdigit():
            capability = int(major) * 10 + int(minor)
            if capability not in capabilities:
                capabilities.append(capability)
    return [triton_compat.GPUTarget("cuda", c, 32) for c in capabilities]

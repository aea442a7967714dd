"""Get what a tuning needs ready: cheap parts when a kernel is defined, the rest at its first miss.

A process whose every result comes from memory, the tuning database, a bundle or the remote
store never tunes, so nothing that holds a process, a compiler run or GPU memory starts before a
tuning is asked for::

    triton_kiln.install() / a tuned kernel defined -> prepare()        (GPU present only)
        the caller's Triton asks kiln for its key (seed_caller_triton_key)
        the key kept on disk is looked up (a few ms of stat calls); where there is none yet
        (a fresh cache directory, a new Triton), thread "kiln-key" computes it, once per
        process, while the caller goes on importing: every tuning and the caller's first
        launch need it, and computing it (~1-2 s of CPU) at the first miss would put it
        before the first compile
        no process, no compiler, no CUDA, except where KILN_PREWARM says so: 1, or auto (the
        default) on a fresh cache (thread "kiln-prewarm" looks, nothing_tuned: no tuning
        database yet or one without a run, no compiled kernel in kiln's store, no remote
        cache), whose first call tunes; there everything below starts now (a kernel with a
        pool of its own: nothing), the sandbox included: started at the first miss, its start
        sat on an H100's first call of Liger's DyT for 0.3-0.5 s; one no tuning uses closes
        after KILN_IDLE_S (registry.prestart_ahead)

    a tuning's first miss (session.py, before its compiles are queued) -> prewarm()
        ├─ the device's benchmark sandbox starts          (triton_kiln.sandbox.registry.prestart;
        │     it warms up while the configs compile)
        ├─ thread "kiln-driver-prebuild": Triton's CUDA driver utilities (gcc, ~0.3 s on a fresh
        │     Triton cache) into Triton's cache, before the first launch needs them
        └─ thread "kiln-prewarm":
              Triton's key (hashes libtriton.so, ~2 s of CPU once per machine; kept on disk,
                            later processes read it: triton_compat.triton_key)
              -> the process's compile pool is started: its zygote spawns, reads the key from
                 kiln's file, imports Triton and compiles its warm-up kernel
              -> (with the sandbox) the output check's kernel, every dtype variant, queued in
                 that pool for each GPU capability ``nvidia-smi`` lists (a subprocess: no CUDA
                 here); the run finds them in the pool's caches instead of waiting for their
                 compile before its first benchmark
              -> kiln's C launcher loaded (built, where none is prebuilt or cached), before a
                 kernel's first call asks for it

What prewarm starts gives itself back once idle for ``KILN_IDLE_S`` (the pool's zygote and
workers: triton_kiln.pool.manager; the sandbox: triton_kiln.sandbox.registry.release_later).
Nothing here initializes CUDA in the caller. A kernel given its own ``pool=`` or ``target=``
prewarms nothing: its pool and device are the caller's business.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from triton_kiln import settings as settings_mod
from triton_kiln import triton_compat

log = logging.getLogger("kiln.autotune")

_lock = threading.Lock()
_started = False
_compare_queued = False
_key_looked_up = False
_untuned_checked: set[object] = set()  # databases KILN_PREWARM=auto looked into (None: the default)
compare_futures: list[Future[Any]] = []  # the output check's kernels prewarm queued (tests wait on them)


def prepare(database: object = None, *, missed: bool = False, shared_pool: bool = True) -> bool:
    """What a defined kernel gets at once: the caller's Triton asks kiln for its key from now on,
    and a key not yet kept on disk is computed in the background (:func:`key_ahead`). Starts no
    process, except the compile pool where ``KILN_PREWARM`` says so (``auto``: where
    :func:`nothing_tuned` of ``database``, the kernel's tuning database: ``None`` for the
    default one; ``missed``: a tuning's first miss, which starts the pool itself;
    ``shared_pool``: the kernel compiles in the process's pool, not one of its own). ``False``
    without a GPU."""
    from triton_kiln.sandbox.registry import gpu_present

    if not gpu_present():
        return False
    settings = settings_mod.current()
    triton_compat.seed_caller_triton_key(settings.triton_key_dir)
    key_ahead(settings.triton_key_dir)
    if not shared_pool:  # its pool is the caller's business
        return True
    if settings.prewarm:  # everything a tuning needs, now
        _start_driver_utils(settings)
        _start_pool(sandbox=settings.sandbox)
        _start_sandbox_ahead(settings)
    elif settings.prewarm is None and not missed:
        _start_pool_if_untuned(database)
    return True


def nothing_tuned(settings: settings_mod.Settings, database: object = None) -> bool:
    """Whether this is a fresh cache, where a kernel whose tuning database is ``database``
    (``None``: the default one; ``False``: none) tunes at its first call: no remote cache, no
    compiled kernel in kiln's artifact store (a process whose kernels kiln compiled before, as
    torch.compile's through kiln, is not on a fresh cache even where nothing was tuned), and no
    database file yet or one without a finished run. A database kiln cannot look into (not a
    file, unreadable) counts as tuned: where kiln cannot tell, it starts nothing."""
    from triton_kiln.tuning.db import default_database_path, holds_runs

    if settings.remote_cache is not None or _holds_artifacts(settings.cache_dir):
        return False
    if database is False or (database is None and not settings.use_tuning_db):
        return True  # results live in memory only: every process tunes
    path = default_database_path(settings) if database is None else getattr(database, "path", None)
    if not isinstance(path, Path):
        return False
    if not path.exists():
        return True
    return holds_runs(path) is False


def key_ahead(key_dir: Path | None) -> threading.Thread | None:
    """Once per process: where ``key_dir`` holds no valid Triton key, compute it in thread
    "kiln-key" (hashing, no process) and return that thread; ``None`` where the key is already
    held or kept, or was looked up before. A tuning or launch that asks for the key meanwhile
    waits for this computation instead of repeating it (:func:`triton_compat.triton_key`)."""
    global _key_looked_up
    with _lock:
        if _key_looked_up:
            return None
        _key_looked_up = True
    if triton_compat.stored_triton_key(key_dir) is not None:
        return None
    thread = threading.Thread(target=_compute_key, args=(key_dir,), name="kiln-key", daemon=True)
    thread.start()
    return thread


def _compute_key(key_dir: Path | None) -> None:
    try:
        triton_compat.triton_key(key_dir)
    except Exception as exc:  # the first tuning computes it again, and reports what fails
        log.debug("kiln: computing Triton's key ahead failed: %s", exc)


def prewarm(sandbox: bool, pool: bool) -> bool:
    """At a tuning's first miss: start the sandbox (``sandbox``; idempotent) and, in the
    background, compute Triton's key and start the default compile pool (``pool``; once per
    process). ``False`` without a GPU."""
    from triton_kiln.sandbox.registry import prestart

    if not prepare(missed=True) or not (sandbox or pool):
        return False
    if sandbox:
        prestart()
    _start_driver_utils(settings_mod.current())
    if pool:
        _start_pool(sandbox)
    return True


def _holds_artifacts(cache_dir: Path) -> bool:
    """Whether kiln's artifact store in ``cache_dir`` holds an entry (a directory listing or two)."""
    from triton_kiln.artifacts import usage
    from triton_kiln.artifacts.artifact import STORE_DIR

    return usage.holds_entry(Path(cache_dir) / STORE_DIR)


def _start_driver_utils(settings: settings_mod.Settings) -> None:
    if settings.prebuild_launchers:  # Triton's cuda_utils: gcc, off the first launch
        from triton_kiln.launch import prebuild

        prebuild.start_driver_utils()


def _start_pool(sandbox: bool) -> None:
    """Once per process: thread "kiln-prewarm" starts the default compile pool (and, with
    ``sandbox``, queues the output check's kernels in it, also in a pool started before)."""
    global _started, _compare_queued
    with _lock:
        compare = sandbox and not _compare_queued  # a pool KILN_PREWARM started has none queued
        start = not _started or compare
        _started, _compare_queued = True, _compare_queued or sandbox
    if start:
        threading.Thread(target=_warm_pool, args=(compare,), name="kiln-prewarm", daemon=True).start()


def _start_pool_if_untuned(database: object) -> None:
    """``KILN_PREWARM=auto``: thread "kiln-prewarm" looks whether anything was tuned for
    ``database`` (once per database) and, where nothing was, starts the pool as
    :func:`_start_pool` does; a later first miss starts it otherwise."""
    key = database if database is None or database is False else id(database)
    with _lock:
        if _started or key in _untuned_checked:
            return
        _untuned_checked.add(key)
    threading.Thread(target=_warm_pool_if_untuned, args=(database,), name="kiln-prewarm", daemon=True).start()


def _warm_pool_if_untuned(database: object) -> None:
    global _started, _compare_queued
    settings = settings_mod.current()
    try:
        untuned = nothing_tuned(settings, database)
    except Exception as exc:  # where kiln cannot tell, it starts nothing: the first miss will
        log.debug("kiln: whether anything was tuned could not be told: %s", exc)
        return
    if not untuned:
        return
    with _lock:
        if _started:  # a first miss got there first
            return
        _started, _compare_queued = True, _compare_queued or settings.sandbox
    log.debug("kiln: nothing tuned on this cache yet: the sandbox and the pool start now (KILN_PREWARM=auto)")
    _start_driver_utils(settings)
    _start_sandbox_ahead(settings)
    _warm_pool(settings.sandbox)


def _start_sandbox_ahead(settings: settings_mod.Settings) -> None:
    """The benchmark sandbox, where benchmarks use it: it holds GPU memory, so only where a
    tuning is expected (a fresh cache, or ``KILN_PREWARM=1``), and it closes after
    ``KILN_IDLE_S`` if none comes (:func:`triton_kiln.sandbox.registry.prestart_ahead`)."""
    if not settings.sandbox:
        return
    from triton_kiln.sandbox.registry import prestart_ahead

    try:
        prestart_ahead()
    except Exception as exc:  # the first miss starts it again, and reports what fails
        log.debug("kiln: starting the sandbox ahead failed: %s", exc)


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
    _load_launcher()


def _load_launcher() -> None:
    """kiln's C launcher loaded now, in this thread: the first call of every kiln kernel needs
    it, and where no prebuilt one ships (a source checkout) and the cache holds no build yet, it
    is built with the C compiler (~0.5-1 s), which would otherwise sit on that call's path."""
    from triton_kiln.launch.native import native
    from triton_kiln.launch.native_build import NativeBuildError

    try:
        native()
    except NativeBuildError as exc:  # the first call reports it, and launches through Triton
        log.debug("kiln: loading kiln's launcher ahead failed: %s", exc)


def _queue_compare_kernels(pool: Any) -> None:
    """The output check's kernel, every variant, for each local capability (not waited for)."""
    from triton_kiln.autotuner import compare_kernels
    from triton_kiln.launch import prebuild
    from triton_kiln.sandbox.compare_kernel import VARIANTS

    for target in gpu_targets():
        try:
            compare_futures.extend(compare_kernels.submit(pool, target, VARIANTS).values())
            prebuild.start_requests(compare_kernels.requests(target, VARIANTS).values())
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

"""Triton's own per-signature launcher, built in the background while kiln's pool compiles.

On Triton 3.5 and 3.6, a kernel's first launch builds a C launcher for its signature with gcc
(~0.26 s, in the launching thread; :mod:`triton_kiln.triton_compat.triton_launcher`). Its source
depends only on the signature, which kiln knows when it submits the compile, so the build
starts then, in a thread, beside the pool's compile::

    caller thread                                       prebuild threads (daemon, at most 2)
    pool.submit(request); start(src, target)
      launcher_source(src, target)  None -> nothing (Triton 3.7, not CUDA, tensor descriptors)
      sha256 of the source seen in this process -> nothing
      queued  ───────────────────────────────────────►  build_launcher(source): gcc, into
                                                        Triton's cache (its key, its layout)
    the artifact arrives: wait_for(key), at most a few seconds (plain-jit routing, whose
      kernels often compile faster than gcc builds; a wait is never longer than a second build)
    the kernel's first launch:
      CudaLauncher -> compile_module_from_src: a cache hit (gcc here only if the build is late)

Nothing here raises into the caller: a failure (no ``libcuda.so.1``, no C compiler) is logged
at DEBUG and the first launch builds the launcher as Triton always does. Only the user's process
prebuilds: kiln's zygote, workers and sandboxes never launch through it. Off with
``KILN_PREBUILD_LAUNCHERS=0`` (callers check the setting they resolved).
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

    from triton_kiln.compile.request import CompileRequest

from triton_kiln.procs import in_kiln_child
from triton_kiln.triton_compat import triton_launcher as compat

log = logging.getLogger("kiln.launch")

BUILD_THREADS = 2
"""Builds at once (each is one gcc): a few signatures' launchers in the time the pool compiles."""


class LauncherPrebuilder:
    """Builds launcher sources on daemon threads, each distinct source once per process.

    ``builder(source) -> bool`` is :func:`triton_kiln.triton_compat.triton_launcher.build_launcher`
    unless given (tests substitute a recorder for gcc)."""

    def __init__(self, builder: Callable[[str], bool] | None = None, threads: int = BUILD_THREADS) -> None:
        self.builder: Callable[[str], bool] = builder if builder is not None else compat.build_launcher
        self._threads_wanted = threads
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._seen: set[str] = set()  # sha256 of every source queued in this process
        self._in_flight: set[str] = set()  # sha256 of the sources queued or building now
        self._queue: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pending = 0  # queued or building
        self._unbuildable = False  # a build returned False: no libcuda or C compiler here

    def start(self, src: Any, target: GPUTarget) -> bool:
        """Queue the build of the launcher a kernel compiled from ``src`` for ``target`` will
        need; ``True`` when a build was queued (``False``: none needed, already queued in this
        process, or the source could not be made: logged at DEBUG). Never raises."""
        return self._start(src, target)[0]

    def begin(self, src: Any, target: GPUTarget) -> str | None:
        """As :meth:`start`; the build's key for :meth:`wait_for` while one is queued or
        building for this source (queued now or earlier), else ``None``. Never raises."""
        digest = self._start(src, target)[1]
        with self._lock:
            return digest if digest in self._in_flight else None

    def _start(self, src: Any, target: GPUTarget) -> tuple[bool, str | None]:
        try:
            if in_kiln_child():
                return False, None
            source = compat.launcher_source(src, target)
            if source is None:
                return False, None
            return self.start_source(source), _digest(source)
        except Exception as exc:  # a prebuild is an optimization: never the caller's failure
            log.debug("kiln: Triton's launcher for %r is not prebuilt: %r", _name(src), exc)
            return False, None

    def start_source(self, source: str) -> bool:
        """Queue the build of ``source`` unless this process queued it before, or an earlier
        build found it cannot build here (no libcuda, no C compiler: a machine without a GPU)."""
        digest = _digest(source)
        with self._lock:
            if digest in self._seen or self._unbuildable:
                return False
            self._seen.add(digest)
            self._in_flight.add(digest)
            self._pending += 1
            if len(self._threads) < self._threads_wanted:
                thread = threading.Thread(target=self._run, name="kiln-launcher-prebuild", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._queue.put((digest, source))
        return True

    def wait_for(self, key: str, timeout_s: float) -> bool:
        """Wait until the build :meth:`begin` returned ``key`` for has finished (built or
        failed); ``False`` if it still runs after ``timeout_s``."""
        with self._done:
            return self._done.wait_for(lambda: key not in self._in_flight, timeout=timeout_s)

    def wait(self, timeout_s: float) -> bool:
        """Wait until every queued build has finished; ``False`` if some still run after ``timeout_s``."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def _run(self) -> None:
        while True:
            digest, source = self._queue.get()
            try:
                if not self.builder(source):
                    log.debug("kiln: Triton's launchers are not prebuilt: no libcuda or C compiler here")
                    with self._lock:
                        self._unbuildable = True
            except Exception as exc:  # logged, never raised: the first launch builds it instead
                log.debug("kiln: prebuilding Triton's launcher failed: %r", exc)
            finally:
                with self._done:
                    self._pending -= 1
                    self._in_flight.discard(digest)
                    self._done.notify_all()

    def _after_fork_in_child(self) -> None:
        # the threads did not survive the fork; their locks may be held: start afresh
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._queue = queue.SimpleQueue()
        self._threads = []
        self._pending = 0
        self._in_flight = set()


PREBUILDER = LauncherPrebuilder()
"""This process's prebuilder (one set of threads, one record of sources seen)."""

os.register_at_fork(after_in_child=PREBUILDER._after_fork_in_child)


def start(src: Any, target: GPUTarget) -> bool:
    """:meth:`LauncherPrebuilder.start` of this process's :data:`PREBUILDER`."""
    return PREBUILDER.start(src, target)


_driver_utils_started = False
_driver_utils_lock = threading.Lock()


def start_driver_utils(builder: Callable[[], bool] | None = None) -> bool:
    """Build Triton's CUDA driver utilities (``cuda_utils``, ~0.3 s of gcc on a fresh Triton
    cache) on a daemon thread, once per process, so the first launch or binary load finds them in
    Triton's cache; ``True`` when the thread was started now. Never raises. ``triton_kiln.install()``
    calls it on a GPU machine (``autotuner/prewarm.py``)."""
    global _driver_utils_started
    with _driver_utils_lock:
        if _driver_utils_started or in_kiln_child():
            return False
        _driver_utils_started = True
    build = builder if builder is not None else compat.build_driver_utils

    def run() -> None:
        try:
            if not build():
                log.debug("kiln: Triton's driver utilities are not prebuilt: no libcuda or C compiler here")
        except Exception as exc:  # logged, never raised: Triton builds them at first use instead
            log.debug("kiln: prebuilding Triton's driver utilities failed: %r", exc)

    threading.Thread(target=run, name="kiln-driver-prebuild", daemon=True).start()
    return True


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _name(src: Any) -> str:
    return str(getattr(getattr(src, "fn", None), "__name__", None) or getattr(src, "name", "a kernel"))


def start_requests(requests: Iterable[CompileRequest]) -> int:
    """:func:`start` once per distinct signature and target among ``requests`` (configs of a
    kernel share one launcher; so do kernels with one signature), each with the ``ASTSource``
    kiln loads its binary with (``CompileRequest.ast_source``); how many builds were queued.
    Never raises."""
    queued = 0
    seen: set[Any] = set()
    for request in requests:
        try:
            mark = (tuple(request.signature.items()), request.target)  # the launcher's inputs
            if mark in seen:
                continue
            seen.add(mark)
            src = request.ast_source(request.kernel)
        except Exception as exc:  # a prebuild is an optimization: never the caller's failure
            log.debug("kiln: Triton's launcher for a request is not prebuilt: %r", exc)
            continue
        queued += PREBUILDER.start(src, request.target)
    return queued

"""The zygote's lifecycle, as the manager thread sees it: start, readiness, preloads, death.

::

    manager thread                 Supervisor (this module)                zygote process
    --------------                 ------------------------                --------------
    start / restart  ------------> spawn(): python -c zygote.main ------>  Triton key, warm-up
                                   ZygoteInit (sys.path, cwd, ...) ---->  preloads
    zygote's packets: Ready  ----> on_ready(): counters, preload results
                      Preloaded -> on_preloaded(): a module that started threads is
                                   marked unsafe and the zygote replaced (planned death)
    each loop turn  -------------> check(): exited? not ready in time?
    EOF / exit / timeout --------> on_death(): fds closed, process reaped;
                                   host.zygote_lost(): its workers' jobs retried or failed;
                                   restart, or after ``zygote_restarts`` failed starts in a
                                   row host.give_up(ZygoteError)

The supervisor touches only the zygote's handle and its own bookkeeping (failed starts,
modules unsafe to preload); what happens to workers and jobs is the manager's (its
:class:`ZygoteHost` methods). It runs on the manager thread only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from triton_kiln.errors import ZygoteError, describe_exit, format_seconds
from triton_kiln.pool import temp_root
from triton_kiln.pool.handles import ZygoteHandle
from triton_kiln.pool.jobs import JobTable
from triton_kiln.pool.protocol import Preload, ZygoteInit
from triton_kiln.settings import Settings
from triton_kiln.triton_compat import GPUTarget

log = logging.getLogger("kiln.pool")

_NEVER_PRELOAD = ("kiln", "triton", "builtins")


class ZygoteHost(Protocol):
    """What the supervisor asks of the manager thread."""

    def zygote_lost(self, *, planned: bool, returncode: int | None = None) -> None:
        """The zygote is gone and its workers with it: retry or fail their jobs."""

    def give_up(self, error: ZygoteError) -> None:
        """The zygote cannot start: the pool is broken, every job fails with ``error``."""


class Supervisor:
    """Starts the zygote, watches it and restarts it (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        pool_id: str,
        table: JobTable,
        selector: selectors.BaseSelector,
        host: ZygoteHost,
        *,
        preload: Iterable[str],
        warmup_target: GPUTarget | None,
        triton_key_dir: Path | None,
    ) -> None:
        self.settings = settings
        self.pool_id = pool_id
        self.table = table
        self.selector = selector
        self.host = host
        self.preload = list(preload)
        self.warmup_target = warmup_target
        self.triton_key_dir = triton_key_dir
        self.zygote: ZygoteHandle | None = None
        self.failures = 0  # failed starts in a row
        self.unsafe_modules: set[str] = set()  # never preloaded again (failed, or started threads)
        self.tmp_root: str | None = None  # the workers' private TMPDIRs live under it (0700)

    @property
    def ready_zygote(self) -> ZygoteHandle | None:
        """The current zygote if it is up and ready to fork."""
        zygote = self.zygote
        return zygote if zygote is not None and zygote.ready and not zygote.dead else None

    def spawn(self) -> None:
        self.table.stats.zygote_starts += 1
        if self.tmp_root is None:
            temp_root.sweep()  # the folders of pools whose process died before removing them
            self.tmp_root = temp_root.make()
        zygote = ZygoteHandle(self.pool_id, self.settings.stderr_tail_lines)
        target = self.warmup_target
        zygote.send_init(
            ZygoteInit(
                sys_path=list(sys.path),
                cwd=os.getcwd(),
                triton_key_dir=self.triton_key_dir,
                warmup_target=(target.backend, target.arch, target.warp_size) if target else None,
                preload=[m for m in dict.fromkeys(self.preload) if m not in self.unsafe_modules],
                tmp_root=self.tmp_root,
                nice=self.settings.worker_nice,
            )
        )
        self.zygote = zygote
        self.selector.register(zygote.ctl, selectors.EVENT_READ, ("zctl", zygote))
        self.selector.register(zygote.out_fd, selectors.EVENT_READ, ("zout", zygote))

    def check(self, now: float) -> None:
        zygote = self.zygote
        if zygote is None or zygote.dead:
            return
        if zygote.proc.poll() is not None:
            zygote.read_output()
            self.on_death(zygote, planned=False)
        elif not zygote.ready and now - zygote.started_at > self.settings.zygote_start_timeout_s:
            zygote.timed_out = True
            self.on_death(zygote, planned=False)

    def on_ready(self, zygote: ZygoteHandle, info: dict[str, Any]) -> None:
        zygote.ready = True
        zygote.info = info
        self.failures = 0
        self.table.stats.zygote_ready_s.append(time.monotonic() - zygote.started_at)
        self.on_preloaded(zygote, info["preloaded"])
        log.debug("zygote %s ready: %s", zygote.proc.pid, info)

    def on_preloaded(self, zygote: ZygoteHandle, results: dict[str, str | None]) -> None:
        restart = False
        for module, error in results.items():
            zygote.preloading.discard(module)
            if error is None:
                zygote.preloaded.add(module)
                continue
            self.unsafe_modules.add(module)
            if "threads" in error:
                restart = True
                warnings.warn(
                    f"kiln: {error} in the zygote, which must stay single-threaded to fork safely; "
                    f"workers will import {module!r} themselves instead (slower start). Set the "
                    f"library's thread-count variable to 1 to let kiln preload it.",
                    RuntimeWarning,
                    stacklevel=1,
                )
            else:
                log.warning("kiln could not preload %s in the zygote: %s", module, error)
        if restart:
            self.on_death(zygote, planned=True)

    def request_preload(self, modules: list[str]) -> None:
        zygote = self.zygote
        if zygote is None or zygote.dead:
            return
        wanted = [
            m
            for m in modules
            if m not in zygote.preloaded
            and m not in zygote.preloading
            and m not in self.unsafe_modules
            and m.split(".")[0] not in _NEVER_PRELOAD
            and m not in ("__main__", "__mp_main__")
        ]
        if wanted and zygote.ready:
            zygote.preloading.update(wanted)
            zygote.send(Preload(wanted))
        elif wanted:
            self.preload.extend(wanted)

    def on_death(self, zygote: ZygoteHandle, *, planned: bool) -> None:
        """The zygote exited, closed its socket, timed out, or is replaced (``planned``)."""
        if zygote.dead:
            return
        was_ready = zygote.ready
        returncode = zygote.proc.poll()
        if returncode is None and not planned:
            # Its socket closed first; give it a moment to exit so the error can say how.
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = zygote.proc.wait(timeout=2.0)
        self.unregister(zygote.ctl)
        self.unregister(zygote.out_fd)
        zygote.read_output()
        zygote.kill()
        self.zygote = None
        self.host.zygote_lost(planned=planned, returncode=returncode)  # as it was before our kill
        if self.table.closing:
            return
        if not was_ready and not planned:
            self.failures += 1
            if zygote.timed_out:
                limit = format_seconds(self.settings.zygote_start_timeout_s)
                reason = f"it did not become ready within {limit} (KILN_ZYGOTE_START_TIMEOUT_S)"
            else:
                reason = f"it ended with {describe_exit(returncode)} during start-up"
            if self.failures >= self.settings.zygote_restarts:
                self.host.give_up(
                    ZygoteError(f"{reason} ({self.failures} attempts in a row)", zygote.tail.snapshot())
                )
                return
            log.warning("kiln zygote failed to start (%s); retrying", reason)
        elif not planned:
            log.warning("kiln zygote (pid %s) died; starting a new one", zygote.proc.pid)
        self.spawn()

    def release(self) -> None:
        """Idle: the zygote exits (and its workers with it); the next :meth:`spawn` starts anew."""
        zygote = self.zygote
        if zygote is not None:
            self.unregister(zygote.ctl)
            self.unregister(zygote.out_fd)
        self.shutdown()
        self.zygote = None
        self.tmp_root = None

    def shutdown(self) -> None:
        """Close the zygote's socket (EOF: it kills and reaps its workers, exits), reap it, and
        remove the workers' temp directories (what a killed zygote could not)."""
        zygote = self.zygote
        if zygote is not None and not zygote.dead:
            with contextlib.suppress(OSError):
                zygote.ctl.close()
            try:
                zygote.proc.wait(timeout=10)
            except Exception:
                zygote.kill()
            zygote.close()
            zygote.dead = True
        if self.tmp_root is not None:
            shutil.rmtree(self.tmp_root, ignore_errors=True)

    def unregister(self, fileobj: Any) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fileobj)

"""Inductor's best configs shared through kiln's remote cache (``KILN_REMOTE_CACHE``): no
machine runs a kernel's runtime autotune or coordinate descent that a machine with the same GPU,
CUDA toolchain, torch and Triton ran for the same kernel.

::

    a kernel's module loads (the sidecar, or your process) -> Inductor's cached_autotune
      -> AutotuneCache: its local file (TORCHINDUCTOR_CACHE_DIR), then its remote half, whose
         backend is kiln's (RemoteAutotuneCache.backend_override_cls):
         the entry for (torch, Triton and its backend, the configs, the source) holds a config:
         Inductor keeps only it, so nothing is timed at the first call
    the kernel's runtime autotune or coordinate descent ends -> AutotuneCache.save
      -> its local file, and kiln's backend: published, for the next machine

Inductor's remote autotune cache is off unless turned on (``TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE``).
kiln uses it, with its own backend, for each kernel whose generated code leaves it unset (the
generated code is not changed: a process without kiln that loads it from Inductor's caches uses
no remote cache), and leaves it alone where you set that setting either way. The remote cache
never breaks a compile: a server fault, a missing or invalid entry is a miss
(:mod:`triton_kiln.remote.inductor_best_configs`), and the kernel is tuned as without kiln.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triton_kiln.triton_compat import inductor as compat

if TYPE_CHECKING:  # the remote package loads only with a remote cache (install() imports it)
    from triton_kiln.remote.inductor_best_configs import RemoteInductorBestConfigs

log = logging.getLogger("kiln.inductor")


@dataclass
class SharedBestConfigsStats:
    found: int = 0
    """Kernels whose best config came from the remote cache (nothing to time)."""
    missed: int = 0
    """Lookups the remote cache did not answer (the kernel is tuned here)."""
    published: int = 0
    """Best configs written for other machines."""


class SharedBestConfigs:
    """The backend of Inductor's remote autotune cache: kiln's remote store."""

    def __init__(self, remote: RemoteInductorBestConfigs) -> None:
        self.remote = remote
        self.stats = SharedBestConfigsStats()
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        found = self.remote.fetch(key)
        with self._lock:
            if found is None:
                self.stats.missed += 1
            else:
                self.stats.found += 1
        if found is not None:
            log.info(
                "kiln: a kernel's best config from the remote cache %s: nothing timed here", self.remote.where
            )
        return found

    def put(self, key: str, data: bytes) -> None:
        if self.remote.publish(key, data):
            with self._lock:
                self.stats.published += 1

    def backend_class(self) -> type:
        """An Inductor ``RemoteCacheBackend`` class whose instances read and write here."""
        shared = self

        # Inductor's base class is only known at run time (torch loads lazily)
        class KilnAutotuneBackend(compat.remote_cache_backend_base()):  # type: ignore[misc]
            def _get(self, key: str) -> bytes | None:
                return shared.get(key)

            def _put(self, key: str, data: Any) -> None:
                shared.put(key, bytes(data))

        return KilnAutotuneBackend


def install(settings: Any) -> tuple[list[tuple[compat.PatchPoint, Any]], SharedBestConfigs] | None:
    """Inductor's remote autotune cache used, with kiln's backend, by every kernel whose code
    leaves it unset (``settings.remote_cache`` is set: ``install()`` of
    :mod:`~triton_kiln.inductor.hooks` asks only then); returns the points and what they held
    (for ``uninstall()``) and the backend's owner, or ``None`` where you set Inductor's own
    ``autotune_remote_cache``."""
    from triton_kiln.remote import remote_inductor_best_configs

    chosen = compat.autotune_remote_cache_setting()
    if chosen is not None:
        log.info(
            "kiln: Inductor's remote autotune cache is set (%s) by you: kiln does not share best configs",
            chosen,
        )
        return None
    deciding, backend = compat.remote_autotune_cache_points()
    shared = SharedBestConfigs(remote_inductor_best_configs(settings))
    saved = [(deciding, deciding.current()), (backend, getattr(backend.owner, backend.name))]
    backend.set(shared.backend_class())
    deciding.set(_unless_turned_off(saved[0][1]))
    log.info("kiln: Inductor's best configs are shared through the remote cache %s", shared.remote.where)
    return saved, shared


def _unless_turned_off(original: Any) -> Any:
    @functools.wraps(original)
    def should_use_remote_autotune_cache(inductor_meta: Any) -> bool:
        asked = compat.remote_autotune_cache_asked(inductor_meta)
        return True if asked is None else bool(original(inductor_meta))

    return should_use_remote_autotune_cache

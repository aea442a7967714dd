"""Max-autotune's template timings shared through kiln's remote cache (``KILN_REMOTE_CACHE``):
no machine times a choice another machine with the same GPU, CUDA, torch and Triton timed.

::

    AlgorithmSelectorCache -> PersistentCache.lookup(choices, op, inputs, benchmark)
      Inductor's own file (TORCHINDUCTOR_CACHE_DIR/cache/<system hash>) holds every choice:
        its timings; nothing here runs
      it misses: benchmark(choices) is kiln's (SharedTimings):
        the remote entry for (system, op, inputs, precision) holds every choice: those timings
          (nothing timed: no benchmark, no GPU work), which Inductor writes to its file
        else Inductor's own benchmark(choices), and its timings published (merged with the
          entry's), for the next machine

The remote cache never breaks a compile: a server fault, a missing or invalid entry is a miss
(:mod:`triton_kiln.remote.inductor_timings`), and the choices are timed as without kiln.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triton_kiln.triton_compat import inductor as compat

if TYPE_CHECKING:  # the remote package loads only with a remote cache (install() imports it)
    from triton_kiln.remote.inductor_timings import RemoteInductorTimings

log = logging.getLogger("kiln.inductor")


@dataclass
class SharedTimingsStats:
    from_remote: int = 0
    """Lookups every choice of which came from the remote cache (nothing timed)."""
    timed: int = 0
    """Lookups whose choices were timed here (and published)."""


class SharedTimings:
    """Replaces ``PersistentCache.lookup``: on Inductor's local miss, the remote entry first."""

    def __init__(self, remote: RemoteInductorTimings) -> None:
        self.remote = remote
        self.stats = SharedTimingsStats()
        self._lock = threading.Lock()

    def lookup(self, original: Any) -> Any:
        """The method that replaces ``original`` (Inductor's ``PersistentCache.lookup``)."""
        shared = self

        @functools.wraps(original)
        def lookup(
            cache: Any, choices: Any, op: str, inputs: str, benchmark: Any, *args: Any, **kwargs: Any
        ) -> Any:
            if benchmark is None:  # Inductor asks only what is cached: nothing is timed
                return original(cache, choices, op, inputs, benchmark, *args, **kwargs)
            hint_override = kwargs.get("hint_override", args[0] if args else None)
            key = compat.template_timings_key(op, inputs, hint_override)
            return original(cache, choices, op, inputs, shared.benchmark(key, benchmark), *args, **kwargs)

        return lookup

    def benchmark(
        self, key: str, benchmark: Callable[[Any], dict[Any, float]]
    ) -> Callable[[Any], dict[Any, float]]:
        """``benchmark`` (Inductor's) behind the remote entry for ``key``."""

        def shared_benchmark(choices: Any) -> dict[Any, float]:
            choices = list(choices)
            hashes = {choice: compat.choice_hash(choice) for choice in choices}
            found = self.remote.fetch(key) or {}
            if choices and all(h in found for h in hashes.values()):
                with self._lock:
                    self.stats.from_remote += 1
                log.info(
                    "kiln: %d template choices' timings from the remote cache %s: none timed here",
                    len(choices),
                    self.remote.where,
                )
                return {choice: found[h] for choice, h in hashes.items()}
            timings = benchmark(choices)
            with self._lock:
                self.stats.timed += 1
            self.remote.publish(key, {**found, **{hashes[c]: float(ms) for c, ms in timings.items()}})
            return timings

        return shared_benchmark


def install(settings: Any) -> tuple[compat.PatchPoint, Any, SharedTimings] | None:
    """``PersistentCache.lookup`` replaced (``settings.remote_cache`` is set: ``install()`` of
    :mod:`~triton_kiln.inductor.hooks` asks only then); returns the point, what it held (for
    ``uninstall()``) and the replacement, or ``None`` on a torch without that method."""
    from triton_kiln.remote import remote_inductor_timings

    point = compat.persistent_cache_lookup_point()
    if not point.present:  # a torch without Inductor's local timings file: nothing to share
        log.info("kiln: this torch has no %s: template timings are not shared", point.qualname)
        return None
    shared = SharedTimings(remote_inductor_timings(settings))
    saved = point.current()
    point.set(shared.lookup(saved))
    log.info("kiln: Inductor's template timings are shared through the remote cache %s", shared.remote.where)
    return point, saved, shared

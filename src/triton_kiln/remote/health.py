"""Whether the remote cache is worth asking: a circuit breaker, and the one warning it gives.

Every request to the remote goes through :meth:`CircuitBreaker.allow` first. A failure (the
server unreachable, slower than ``KILN_REMOTE_TIMEOUT_S``, an error reply) opens the breaker:
for ``KILN_REMOTE_RETRY_S`` seconds every request is answered locally without touching the
network, then one request is let through to probe the server again (half-open); if it
succeeds, the breaker closes, if it fails, it opens for another period.

The first failure in a process is reported once, as a :class:`RemoteCacheWarning` (so a user
sees it with no logging set up); later failures and recoveries are logged on ``kiln.remote``
at INFO only, so a flapping server never floods the caller's output.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings

from triton_kiln.artifacts.store import CacheWarning

log = logging.getLogger("kiln.remote")


class RemoteCacheWarning(CacheWarning):
    """The remote cache failed (unreachable, slow or an error); kiln works locally meanwhile."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


class CircuitBreaker:
    """Closed (requests go out), open (none do, for ``retry_s``), half-open (one probe)."""

    def __init__(self, where: str, retry_s: float) -> None:
        self.where = where
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._open_until: float | None = None  # None: closed
        self._probing = False
        self.failures = 0
        """Failures seen (each opened or re-opened the breaker)."""
        self.skipped = 0
        """Requests answered locally because the breaker was open."""

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open_until is not None

    def allow(self) -> bool:
        """Whether a request may go to the remote now (a probe, once the open period is over)."""
        with self._lock:
            if self._open_until is None:
                return True
            if not self._probing and time.monotonic() >= self._open_until:
                self._probing = True  # one thread probes; the others stay local meanwhile
                return True
            self.skipped += 1
            return False

    def succeeded(self) -> None:
        with self._lock:
            recovered = self._open_until is not None
            self._open_until, self._probing = None, False
        if recovered:
            log.info("kiln: the remote cache %s answers again; using it", self.where)

    def failed(self, action: str, exc: BaseException) -> None:
        """Open the breaker for ``retry_s``; warn if this is the process's first failure here."""
        with self._lock:
            self._open_until = time.monotonic() + self.retry_s
            self._probing = False
            self.failures += 1
        with _warned_lock:
            first = self.where not in _warned
            _warned.add(self.where)
        message = (
            f"kiln: the remote cache {self.where} failed to {action} ({type(exc).__name__}: {exc}); "
            f"kiln goes on with its local cache and tries the remote again in {self.retry_s:g} s "
            f"(KILN_REMOTE_RETRY_S). Check the server, or unset KILN_REMOTE_CACHE."
        )
        if first:
            warnings.warn(message, RemoteCacheWarning, stacklevel=4)
        else:
            log.info("%s", message)


def forget_warnings() -> None:
    """Let the next failure warn again (for tests)."""
    with _warned_lock:
        _warned.clear()

"""kiln's remote cache on Redis: artifacts and finished tuning runs shared by machines.

Imported only when ``KILN_REMOTE_CACHE`` is set (by the pool, where it opens its artifact
store, and by the autotuner, where it opens the tuning database). kiln speaks RESP2 itself
(:mod:`triton_kiln.remote.resp`): no Redis client package is needed or imported.

::

    CompilePool.submit -> memory -> local store (ArtifactStore) -> in flight -> worker
                                        | miss                        | compiled
                                        v                             v
                             RemoteArtifacts.fetch          ArtifactStore.put (local, verified)
                             (artifacts.py) -> adopt:        -> RemoteArtifacts.publish
                             staged, verified as a local
                             entry, then installed
    Autotuner -> RemoteTuningDatabase (tuning.py) -> local SQLite -> on a miss, Redis
    program record (triton_kiln.program) -> RemotePrograms (programs.py): published by its
        writer thread; fetched by a thread at install() where this machine has none
    Inductor's template timings (triton_kiln.inductor.shared_timings) -> RemoteInductorTimings
        (inductor_timings.py): fetched where Inductor's local cache misses, published once timed
    Inductor's best configs (triton_kiln.inductor.shared_best_configs) -> RemoteInductorBestConfigs
        (inductor_best_configs.py): Inductor's remote autotune cache, read as a kernel loads

    RedisClient (client.py): one per URL and process; kiln's own RESP2 connections
    (connection.py, resp.py): one deadline per request, values refused from their declared
    length; a CircuitBreaker (health.py): a server fault opens it for KILN_REMOTE_RETRY_S, one
    warning; a bad entry is that key's miss (records.py validates every entry).
    Signer (signing.py): with KILN_REMOTE_KEY_FILE, HMAC-SHA256 on what is written and read.

Names in Redis: :mod:`triton_kiln.remote.names`. Set-up, what is verified, failure behaviour and
sizes: docs/REMOTE_CACHE.md.

Imports: artifacts, tuning records and the top-level settings; only the pool, the autotuner, the
program record and kiln's Inductor integration import this package.
"""

from __future__ import annotations

import atexit
import threading
from typing import TypedDict

from triton_kiln.remote.artifacts import RemoteArtifacts
from triton_kiln.remote.client import RedisClient
from triton_kiln.remote.health import RemoteCacheWarning
from triton_kiln.remote.inductor_best_configs import RemoteInductorBestConfigs
from triton_kiln.remote.inductor_timings import RemoteInductorTimings
from triton_kiln.remote.programs import RemotePrograms
from triton_kiln.remote.signing import Signer
from triton_kiln.remote.tuning import RemoteTuningDatabase
from triton_kiln.settings import Settings
from triton_kiln.tuning.db import TuningDatabase

__all__ = [
    "RemoteArtifacts",
    "RemoteCacheWarning",
    "RemotePrograms",
    "RemoteTuningDatabase",
    "client_for",
    "remote_artifacts",
    "remote_programs",
    "remote_tuning",
]


class _EntryOptions(TypedDict):
    ttl_s: int | None
    signer: Signer | None
    max_entry_bytes: int


_clients: dict[tuple[str, float, float], RedisClient] = {}
_clients_lock = threading.Lock()


def client_for(settings: Settings) -> RedisClient:
    """The process's client of ``settings.remote_cache`` (one per URL and timeouts: one breaker)."""
    if settings.remote_cache is None:
        raise ValueError("no remote cache is configured (KILN_REMOTE_CACHE is unset)")
    ident = (settings.remote_cache, settings.remote_timeout_s, settings.remote_retry_s)
    with _clients_lock:
        client = _clients.get(ident)
        if client is None:
            client = RedisClient(
                settings.remote_cache, timeout_s=settings.remote_timeout_s, retry_s=settings.remote_retry_s
            )
            _clients[ident] = client
        return client


@atexit.register
def _close_clients() -> None:
    """Close the clients' idle connections at exit (the server sees a clean close)."""
    with _clients_lock:
        clients = list(_clients.values())
    for client in clients:
        client.close()


def _ttl_s(settings: Settings) -> int | None:
    days = settings.remote_ttl_days
    return None if days is None else max(1, round(days * 86400))


def _signer(settings: Settings) -> Signer | None:
    key_file = settings.remote_key_file
    return None if key_file is None else Signer.from_file(key_file)


def _entry_options(settings: Settings) -> _EntryOptions:
    """What every kind of entry takes from the settings: its lifetime, its signer, its size limit."""
    return {
        "ttl_s": _ttl_s(settings),
        "signer": _signer(settings),
        "max_entry_bytes": settings.remote_max_entry_mb << 20,
    }


def remote_artifacts(settings: Settings) -> RemoteArtifacts:
    """The artifact entries of ``settings.remote_cache`` (an ``ArtifactStore``'s ``remote``)."""
    return RemoteArtifacts(client_for(settings), **_entry_options(settings))


def remote_tuning(local: TuningDatabase, settings: Settings) -> RemoteTuningDatabase:
    """``local`` with ``settings.remote_cache`` behind it."""
    return RemoteTuningDatabase(local, client_for(settings), **_entry_options(settings))


def remote_inductor_timings(settings: Settings) -> RemoteInductorTimings:
    """Inductor's template timings on ``settings.remote_cache``."""
    return RemoteInductorTimings(client_for(settings), **_entry_options(settings))


def remote_inductor_best_configs(settings: Settings) -> RemoteInductorBestConfigs:
    """Inductor's best configs on ``settings.remote_cache``."""
    return RemoteInductorBestConfigs(client_for(settings), **_entry_options(settings))


def remote_programs(settings: Settings, record_format: int) -> RemotePrograms:
    """The program records of ``settings.remote_cache`` (``record_format``: the record file's)."""
    return RemotePrograms(client_for(settings), record_format, **_entry_options(settings))

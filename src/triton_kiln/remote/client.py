"""The one module that talks to Redis (and the only one that imports ``redis``).

:class:`RedisClient` holds a connection pool of redis-py's, made with short connect and read
timeouts (``KILN_REMOTE_TIMEOUT_S``) and redis-py's own retries off, so a dead or slow server
costs one timeout, not several. Every request goes through :meth:`RedisClient._request`, which
asks the :class:`~triton_kiln.remote.health.CircuitBreaker` first and turns every failure (a refused
or timed-out connection, an error reply, a server going away mid-reply) into "no answer": a
read returns ``None`` (a miss), a write is dropped, and the breaker opens (one warning per
process). Nothing here raises because of the server.

What is stored (names: :mod:`triton_kiln.remote.names`):

* an artifact entry: a Redis hash ``{file name: bytes}`` written in one ``MULTI`` (``DEL``,
  ``HSET``, ``EXPIRE``), so a reader sees the old entry or the new one, never half of one;
* a finished tuning run: a string (JSON), written with ``SET ... EX``.

Each hit renews its key's TTL (a sliding expiry: entries in use stay, unused ones expire).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from triton_kiln.errors import RemoteCacheUnavailableError
from triton_kiln.remote.health import CircuitBreaker
from triton_kiln.settings import redacted_url

T = TypeVar("T")


class RedisClient:
    """Requests to one Redis server, each bounded by the timeouts and guarded by the breaker."""

    def __init__(self, url: str, *, timeout_s: float, retry_s: float) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise RemoteCacheUnavailableError(
                f"KILN_REMOTE_CACHE is set ({redacted_url(url)}), but the redis package is not "
                f"installed ({exc}). Install kiln's Redis extra (pip install 'triton-kiln[redis]'), "
                "or unset KILN_REMOTE_CACHE to use the local cache only."
            ) from exc

        self.url = url
        self.where = redacted_url(url)
        self.breaker = CircuitBreaker(self.where, retry_s)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._redis: Any = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            client_name="kiln",
        )

    def _request(self, action: str, request: Callable[[Any], T]) -> T | None:
        """``request(redis)``'s answer, or ``None`` if the breaker is open or the request failed."""
        if not self.breaker.allow():
            return None
        try:
            answer = request(self._redis)
        except self._errors as exc:
            self.breaker.failed(action, exc)
            return None
        self.breaker.succeeded()
        return answer

    # -- hashes: artifact entries -----------------------------------------------------------

    def read_hash(self, name: str, ttl_s: int | None) -> dict[bytes, bytes] | None:
        """The hash ``name`` (``None``: missing, or no answer); its TTL renewed."""

        def request(client: Any) -> dict[bytes, bytes]:
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(name)
            if ttl_s is not None:
                pipe.expire(name, ttl_s)
            return dict(pipe.execute()[0])

        return self._request("read an entry", request) or None

    def write_hash(self, name: str, fields: Mapping[str, bytes], ttl_s: int | None) -> bool:
        """Replace the hash ``name`` by ``fields`` atomically; whether the server took it."""

        def request(client: Any) -> bool:
            pipe = client.pipeline(transaction=True)
            pipe.delete(name)
            pipe.hset(name, mapping=dict(fields))
            if ttl_s is not None:
                pipe.expire(name, ttl_s)
            pipe.execute()
            return True

        return bool(self._request("write an entry", request))

    # -- strings: tuning runs ---------------------------------------------------------------

    def read_value(self, name: str, ttl_s: int | None) -> bytes | None:
        def request(client: Any) -> bytes | None:
            pipe = client.pipeline(transaction=False)
            pipe.get(name)
            if ttl_s is not None:
                pipe.expire(name, ttl_s)
            value = pipe.execute()[0]
            return value if isinstance(value, bytes) else None

        return self._request("read a tuning run", request)

    def write_value(self, name: str, value: bytes, ttl_s: int | None) -> bool:
        return bool(self._request("write a tuning run", lambda client: client.set(name, value, ex=ttl_s)))

    def close(self) -> None:
        self._redis.close()

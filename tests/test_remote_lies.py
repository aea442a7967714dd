"""The remote cache against servers and entries that lie: a bad reply costs a cache miss, never a
compile, a kernel call or the pool's manager thread.

Servers of the tests' own on 127.0.0.1 (tests/support/lying_servers.py: ``+OK`` to everything,
wrong-typed replies on the read and the write path, a byte every 0.25 s, no answer at all) and a
real ``redis-server`` holding poisoned entries (tuning runs with fields of the wrong type or
nested 200,000 deep, an ``artifact.json`` that is not an object, a non-ASCII signature, a key of
the wrong type, a 256 MiB value); real sm_90 compiles, only the GPU's timings stood in for.

What a lie costs is counted, not timed: the requests that waited for the server (the circuit
breaker's failures) and those answered locally once it opened.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.basics import SM90, add_request
from support.lying_servers import KINDS, WRONG_TYPES, LyingServer
from support.redis_server import REDIS_SERVER, RedisServer
from triton_kiln import settings
from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.remote.health import forget_warnings

pytest.importorskip("redis", reason="redis-py (the tests' own view of the server) is not installed")
pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)"),
    pytest.mark.timeout(300),
]

TIMEOUT_S = 0.5  # the deadline a lying server meets
HEALTHY_TIMEOUT_S = 5.0  # a real redis-server on a busy 2-core host: its replies are never the fault
BATCH = 6
# distinct compile keys for every batch of a test (fresh compiles, never a hit)
COMBOS = [(block, warps) for block in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) for warps in (1, 2, 4, 8)]


def remote_settings(
    url: str, cache_dir: Path, timeout_s: float = TIMEOUT_S, **changes: Any
) -> settings.Settings:
    return settings.current().replace(
        remote_cache=url, cache_dir=cache_dir, remote_timeout_s=timeout_s, remote_retry_s=60.0, **changes
    )


def manager_alive(pool: Any) -> bool:
    return bool(pool._manager.thread is not None and pool._manager.thread.is_alive())


def run_batch(
    make_pool: Any, url: str, cache_dir: Path, combos: list[tuple[int, int]], timeout_s: float = TIMEOUT_S
) -> tuple[float, Any, list[Any]]:
    """(seconds, pool, warnings) of a fresh pool on ``url`` compiling ``combos``: every job must succeed."""
    forget_warnings()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = make_pool(settings=remote_settings(url, cache_dir, timeout_s), cache_dir=cache_dir)
        futures = [pool.submit(add_request(block, warps)) for block, warps in combos]
        for future in futures:
            future.result(timeout=180)
    seconds = time.perf_counter() - started
    assert pool.stats.compiled == len(combos)
    assert pool.stats.failed == 0
    return seconds, pool, [w for w in caught if issubclass(w.category, CacheWarning)]


# ---------------------------------------------------------------------------- servers that lie


@pytest.mark.parametrize("kind", KINDS)
def test_a_lying_server_costs_one_warning_and_no_compile(kind: str, make_pool: Any, tmp_path: Path) -> None:
    """Every job compiles; one request waits for the liar (its deadline, ``TIMEOUT_S``), and every
    later one is answered locally, the breaker open: the cost is one deadline, whatever the batch."""
    combos = iter(COMBOS)
    with LyingServer(kind) as liar:
        _, pool, caught = run_batch(
            make_pool, liar.url, tmp_path / "faulty", [next(combos) for _ in range(BATCH)]
        )
        assert len(caught) == 1, [str(w.message) for w in caught]
        assert "goes on with its local cache" in str(caught[0].message)
        breaker = pool.store.remote.client.breaker
        assert breaker.is_open
        assert breaker.failures == 1  # the one request that waited for the liar
        assert breaker.skipped >= BATCH - 1  # the later lookups and writes stayed local
        assert manager_alive(pool)  # the pool's manager thread lives...
        assert pool.compile(add_request(*next(combos))) is not None  # ...and serves


def test_each_request_ends_by_its_deadline_however_the_server_dribbles(tmp_path: Path) -> None:
    from triton_kiln.pool.pool import open_store

    for kind in ("dribble", "silent"):
        forget_warnings()
        with LyingServer(kind) as liar:
            store = open_store(remote_settings(liar.url, tmp_path / kind))
            assert store is not None
            assert store.remote is not None
            started = time.monotonic()
            with pytest.warns(CacheWarning, match="KILN_REMOTE_TIMEOUT_S"):
                assert store.remote.fetch("ab" * 32) is None
            assert time.monotonic() - started < TIMEOUT_S + 0.5


@pytest.mark.parametrize("kind", WRONG_TYPES)
def test_a_kernel_call_returns_whatever_the_server_answers(kind: str, make_pool: Any, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import triton_kiln as kiln
    from test_autotune_cpu import FakeBench, by_block, configs, scale_kernel, tune

    forget_warnings()
    with LyingServer(kind) as liar:
        chosen = remote_settings(liar.url, tmp_path, tuning_db=tmp_path / "tuning.sqlite3")
        pool = make_pool(settings=chosen, cache_dir=tmp_path)
        with settings.scope(**{k: getattr(chosen, k) for k in ("cache_dir", "tuning_db", "remote_cache")}):
            tuner = kiln.autotune(configs(64, 128), key=["n"], pool=pool, target=SM90)(scale_kernel)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tune(tuner, lambda t, a, k: FakeBench(t, a, k, by_block({64: 2.0, 128: 1.0})))
        assert liar.commands, "the tuner never asked the server"
    assert tuner.best_config.kwargs == {"BLOCK": 128}
    remote = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(remote) == 1, [str(w.message) for w in remote]
    assert manager_alive(pool)


# ---------------------------------------------------------------------------- entries that lie

POISON: dict[str, Any] = {
    "kernel as a list": ("kernel", ["scale_kernel"]),
    "kernel as an object": ("kernel", {"a": 1}),
    "default_label as a list": ("default_label", ["BLOCK=64"]),
    "default_label as an object": ("default_label", {"a": 1}),
    "reason as a list": ("reason", ["x"]),
    "reason as an object": ("reason", {"a": 1}),
    "artifact_key as a list": ("artifact_key", ["k"]),
    "artifact_key as an object": ("artifact_key", {"a": 1}),
}


def poisoned(run_json: dict[str, Any], case: str) -> bytes:
    import json

    if case == "nested 200,000 deep":
        deep = "[" * 200_000 + "]" * 200_000
        return json.dumps(run_json).replace('"split": ', f'"split": {deep}, "x": ', 1).encode()
    field, value = POISON[case]
    if field in ("reason", "artifact_key"):
        for result in run_json["results"]:
            result[field] = value
    else:
        run_json[field] = value
    return json.dumps(run_json).encode()


@pytest.mark.parametrize("case", [*POISON, "nested 200,000 deep", "a hash at the run's key"])
def test_a_poisoned_tuning_run_is_a_miss_with_a_warning_and_leaves_no_run(
    case: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    from test_remote_tuning import IDENTITY, database, finish_a_run

    machine_a = database(tmp_path / "a.sqlite3", redis_server.url)
    finish_a_run(machine_a)
    assert machine_a.published == 1, "the healthy server did not take the run"
    client: Any = redis_server.client()
    (name,) = client.keys("kiln:r1:tuning:*")
    if case == "a hash at the run's key":
        client.delete(name)
        client.hset(name, "kernel", "scale_kernel")
    else:
        client.set(name, poisoned(machine_a.local.lookup(**IDENTITY).to_json(), case))

    machine_b = database(tmp_path / "b.sqlite3", redis_server.url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert machine_b.lookup(**IDENTITY) is None
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert issubclass(caught[0].category, CacheWarning)
    assert "invalid tuning run" in str(caught[0].message)
    assert machine_b.local.runs(limit=-1) == []  # nothing imported, no unfinished run left
    assert not machine_b.client.breaker.is_open  # one key's miss, not the server's outage
    # the next run finished here replaces the poisoned one
    finish_a_run(machine_b)
    assert database(tmp_path / "c.sqlite3", redis_server.url).lookup(**IDENTITY) is not None


def test_a_poisoned_run_costs_the_kernel_call_a_tuning_not_an_exception(
    redis_server: RedisServer, make_pool: Any, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    import triton_kiln as kiln
    from test_autotune_cpu import FakeBench, by_block, configs, scale_kernel, tune

    def machine(name: str) -> Any:
        chosen = remote_settings(
            redis_server.url, tmp_path / name, HEALTHY_TIMEOUT_S, tuning_db=tmp_path / name / "t.sqlite3"
        )
        pool = make_pool(settings=chosen, cache_dir=tmp_path / name)
        with settings.scope(**{k: getattr(chosen, k) for k in ("cache_dir", "tuning_db", "remote_cache")}):
            return kiln.autotune(configs(64, 128), key=["n"], pool=pool, target=SM90)(scale_kernel)

    tune(machine("a"), lambda t, a, k: FakeBench(t, a, k, by_block({64: 2.0, 128: 1.0})))
    client: Any = redis_server.client()
    (name,) = client.keys("kiln:r1:tuning:*")
    client.set(name, b'{"kernel": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    tuner_b = machine("b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tune(tuner_b, lambda t, a, k: FakeBench(t, a, k, by_block({64: 1.0, 128: 2.0})))
    assert tuner_b.loaded_from is None  # tuned here
    assert tuner_b.best_config.kwargs == {"BLOCK": 64}
    assert [w for w in caught if issubclass(w.category, CacheWarning)], "no warning"
    assert client.get(name).startswith(b"{")  # overwritten by the run tuned here
    assert b"[[[" not in client.get(name)

"""The remote cache on Redis at the artifact store's level, against a real
``redis-server``: names and sizes, every tampered remote entry a miss with a warning (never
installed, never loaded), an unreachable or paused server costing one warning, and the settings.

The pool-level and autotuner-level acceptance tests (a second machine compiles nothing; Redis
stopped mid-run) are in test_remote_machines.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request, wait_no_processes
from support.redis_server import REDIS_SERVER, RedisServer, free_port
from triton_kiln import CompilePool, SettingsError, settings
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore, CacheWarning
from triton_kiln.pool.pool import open_store
from triton_kiln.redis_url import redacted_url

pytest.importorskip("redis", reason="redis-py (the tests' own view of the server) is not installed")
pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)"),
    pytest.mark.timeout(120),
]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> CompiledArtifact:
    """One real sm_90 compile, shared by the tests of this module."""
    pool = CompilePool(workers=1, cache_dir=tmp_path_factory.mktemp("compile"))
    try:
        return pool.compile(add_request(64))
    finally:
        pool.shutdown(wait=True)
        assert not wait_no_processes(pool.pool_id)


def remote_store(root: Path, url: str, **changes: Any) -> ArtifactStore:
    # a busy CI host can take longer than the default 0.5 s to answer; the deadline's own tests
    # pass theirs
    changes.setdefault("remote_timeout_s", 5.0)
    store = open_store(settings.current().replace(cache_dir=root, remote_cache=url, **changes))
    assert store is not None
    assert store.remote is not None
    return store


def remote_hash(server: RedisServer, key: str) -> dict[bytes, bytes]:
    client: Any = server.client()
    return dict(client.hgetall(f"kiln:r1:artifact:a2:{key}"))


# ---------------------------------------------------------------------------- the round trip


def test_a_put_is_written_through_and_a_fresh_store_reads_it_back_verified(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    machine_a = remote_store(tmp_path / "a", redis_server.url)
    machine_a.put(artifact)
    stored = remote_hash(redis_server, artifact.key)
    local = machine_a.path_for(artifact.key)
    assert {name.decode() for name in stored} == {p.name for p in local.iterdir()}
    for name, data in stored.items():
        assert (local / name.decode()).read_bytes() == data  # exactly the local entry's files

    machine_b = remote_store(tmp_path / "b", redis_server.url)
    assert artifact.key not in machine_b
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = machine_b.get(artifact.key)
    assert got == artifact
    assert artifact.key in machine_b  # now a local entry: the next get does not ask the remote
    assert machine_b.remote is not None
    fetched = machine_b.remote.fetched  # type: ignore[attr-defined]
    assert machine_b.get(artifact.key) == artifact
    assert machine_b.remote.fetched == fetched  # type: ignore[attr-defined]


def test_an_entry_stored_before_the_remote_was_configured_is_uploaded_on_request(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    ArtifactStore(tmp_path / "a").put(artifact)  # no remote yet: nothing in Redis
    assert remote_hash(redis_server, artifact.key) == {}
    machine_a = remote_store(tmp_path / "a", redis_server.url)
    assert machine_a.get(artifact.key) == artifact  # a local hit does not write to the remote
    assert remote_hash(redis_server, artifact.key) == {}
    assert machine_a.upload(artifact.key) is True
    assert machine_a.upload("ab" * 32) is False  # no such local entry
    assert remote_store(tmp_path / "b", redis_server.url).get(artifact.key) == artifact


def test_keys_are_namespaced_versioned_and_expire(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    client: Any = redis_server.client()
    remote_store(tmp_path / "a", redis_server.url, remote_ttl_days=2.0).put(artifact)
    name = f"kiln:r1:artifact:a2:{artifact.key}"
    assert client.keys("*") == [name.encode()]
    assert 2 * 86400 - 60 < client.ttl(name) <= 2 * 86400
    client.expire(name, 100)
    remote_store(tmp_path / "b", redis_server.url, remote_ttl_days=2.0).get(artifact.key)
    assert client.ttl(name) > 86400  # a hit renews the TTL: entries in use stay
    client.flushdb()
    remote_store(tmp_path / "c", redis_server.url, remote_ttl_days=None).put(artifact)
    assert client.ttl(name) == -1  # no expiry: the server's maxmemory policy bounds it


def test_an_entry_over_the_size_limit_stays_local(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    store = remote_store(tmp_path / "a", redis_server.url)
    remote: Any = store.remote
    assert remote.max_entry_bytes == 16 << 20  # KILN_REMOTE_MAX_ENTRY_MB's default
    remote.max_entry_bytes = 1000  # the setting is in MiB; the add kernel's entry is smaller than one
    store.put(artifact)
    assert remote.too_large == 1
    assert remote.published == 0
    assert remote_hash(redis_server, artifact.key) == {}
    assert store.get(artifact.key) == artifact  # kept locally


def test_a_remote_entry_over_the_size_limit_is_not_loaded(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    remote_store(tmp_path / "a", redis_server.url).put(artifact)  # written by a kiln with a larger limit
    reader = remote_store(tmp_path / "b", redis_server.url)
    reader.remote.max_entry_bytes = 1000  # type: ignore[union-attr]
    with pytest.warns(CacheWarning, match="KILN_REMOTE_MAX_ENTRY_MB"):
        assert reader.get(artifact.key) is None
    assert not reader.path_for(artifact.key).parent.exists()  # nothing staged on disk


# ---------------------------------------------------------------------------- tampered entries


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def _tamper(case: str, fields: dict[bytes, bytes], binary_name: bytes) -> dict[bytes, bytes]:
    fields = dict(fields)
    record = json.loads(fields[b"artifact.json"])
    if case == "flipped byte":
        fields[binary_name] = _flip(fields[binary_name])
    elif case == "truncated binary":
        fields[binary_name] = fields[binary_name][: len(fields[binary_name]) // 2]
    elif case == "wrong hash in the manifest":
        record["files"][binary_name.decode()]["sha256"] = "0" * 64
        fields[b"artifact.json"] = json.dumps(record).encode()
    elif case == "truncated record":
        fields[b"artifact.json"] = fields[b"artifact.json"][:100]
    elif case == "no record":
        del fields[b"artifact.json"]
    elif case == "a file the manifest does not list":
        fields[b"payload.so"] = b"\x7fELF" + b"\0" * 100
    elif case == "a path out of the entry":
        record["files"]["../../escaped"] = record["files"].pop(binary_name.decode())
        record["binary_file"] = "../../escaped"
        fields[b"../../escaped"] = fields.pop(binary_name)
        fields[b"artifact.json"] = json.dumps(record).encode()
    elif case == "another key's entry":
        record["key"] = "f" * 64
        fields[b"artifact.json"] = json.dumps(record).encode()
    else:
        raise AssertionError(case)
    return fields


TAMPERED = [
    "flipped byte",
    "truncated binary",
    "wrong hash in the manifest",
    "truncated record",
    "no record",
    "a file the manifest does not list",
    "a path out of the entry",
    "another key's entry",
]


@pytest.mark.parametrize("case", TAMPERED)
def test_a_tampered_remote_entry_is_a_miss_with_a_warning_and_never_installed(
    case: str, redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    remote_store(tmp_path / "a", redis_server.url).put(artifact)
    name = f"kiln:r1:artifact:a2:{artifact.key}"
    client: Any = redis_server.client()
    tampered = _tamper(case, remote_hash(redis_server, artifact.key), artifact.binary_file_name.encode())
    client.delete(name)
    client.hset(name, mapping=tampered)

    machine_b = remote_store(tmp_path / "b" / "c", redis_server.url)
    with pytest.warns(CacheWarning, match="failed verification") as caught:
        assert machine_b.get(artifact.key) is None
    assert len(caught) == 1
    assert artifact.key not in machine_b
    shard = machine_b.path_for(artifact.key).parent
    assert not any(shard.iterdir()), list(shard.iterdir())  # nothing installed, no staging left
    assert not (tmp_path / "b" / "escaped").exists()
    assert not (tmp_path / "b" / "c" / "escaped").exists()


def test_a_tampered_entry_is_compiled_locally_and_the_remote_repaired(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path, make_pool: Any
) -> None:
    remote_store(tmp_path / "a", redis_server.url).put(artifact)
    name = f"kiln:r1:artifact:a2:{artifact.key}"
    client: Any = redis_server.client()
    good = remote_hash(redis_server, artifact.key)
    binary = artifact.binary_file_name.encode()
    client.hset(name, binary, _flip(good[binary]))

    base = settings.current().replace(remote_cache=redis_server.url, cache_dir=tmp_path / "b")
    pool = make_pool(settings=base, cache_dir=tmp_path / "b", workers=1)
    with pytest.warns(CacheWarning, match="failed verification"):
        compiled = pool.compile(add_request(64))
    assert pool.stats.dispatched == 1
    assert pool.stats.compiled == 1
    # the same compile (the binary's line info names the kernel's source path, which differs
    # when another checkout's compile sits in Triton's own cache: compare the key, not the bytes)
    assert compiled.key == artifact.key
    assert remote_hash(redis_server, artifact.key)[binary] == compiled.binary  # written back whole


# ---------------------------------------------------------------------------- unreachable, slow


def test_an_unreachable_server_costs_one_warning_and_no_waiting(
    artifact: CompiledArtifact, tmp_path: Path
) -> None:
    from triton_kiln.remote import RemoteCacheWarning
    from triton_kiln.remote.health import forget_warnings

    forget_warnings()
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    store = remote_store(tmp_path / "a", url, remote_timeout_s=0.2, remote_retry_s=60.0)
    other = remote_store(tmp_path / "b", url, remote_timeout_s=0.2, remote_retry_s=60.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.monotonic()
        store.put(artifact)
        for _ in range(20):
            assert other.get(artifact.key) is None
            assert other.get("ab" * 32) is None
        elapsed = time.monotonic() - started
    remote_warnings = [w for w in caught if issubclass(w.category, RemoteCacheWarning)]
    assert len(remote_warnings) == 1, [str(w.message) for w in caught]
    assert "KILN_REMOTE_RETRY_S" in str(remote_warnings[0].message)
    assert store.get(artifact.key) == artifact  # the local store is untouched
    assert elapsed < 2.0
    client: Any = store.remote.client  # type: ignore[union-attr]
    assert client.breaker.failures == 1
    assert client.breaker.skipped >= 40


def test_a_paused_server_times_out_once_then_the_breaker_keeps_kiln_local(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    from triton_kiln.remote import RemoteCacheWarning

    store = remote_store(tmp_path / "a", redis_server.url, remote_timeout_s=0.3, remote_retry_s=0.5)
    store.put(artifact)
    redis_server.pause()  # the port still accepts; nothing answers
    reader = remote_store(tmp_path / "b", redis_server.url, remote_timeout_s=0.3, remote_retry_s=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.monotonic()
        assert reader.get(artifact.key) is None  # one read timeout
        first = time.monotonic() - started
        started = time.monotonic()
        for _ in range(50):
            assert reader.get(artifact.key) is None
        rest = time.monotonic() - started
    assert 0.25 < first < 2.0
    assert rest < 0.3  # the breaker is open: no request reaches the network
    assert len([w for w in caught if issubclass(w.category, RemoteCacheWarning)]) == 1
    redis_server.resume()
    time.sleep(0.6)  # past KILN_REMOTE_RETRY_S: the next request probes, the server answers
    assert reader.get(artifact.key) == artifact


# ---------------------------------------------------------------------------- settings, imports


def test_remote_settings_are_typed_and_checked() -> None:
    values = settings.from_env(
        {
            "KILN_REMOTE_CACHE": "redis://:secret@cache.example:6380/3",
            "KILN_REMOTE_MAX_ENTRY_MB": "8",
            "KILN_REMOTE_TTL_DAYS": "0",
            "KILN_REMOTE_TIMEOUT_S": "0.25",
            "KILN_REMOTE_RETRY_S": "30",
        }
    )
    assert values.remote_cache == "redis://:secret@cache.example:6380/3"
    assert (values.remote_max_entry_mb, values.remote_ttl_days) == (8, None)
    assert (values.remote_timeout_s, values.remote_retry_s) == (0.25, 30.0)
    assert settings.from_env({}).remote_cache is None
    for bad in ("http://cache:6379", "redis://", "redis://host:99999/0", "redis://host/db", "unix://"):
        with pytest.raises(SettingsError, match="KILN_REMOTE_CACHE"):
            settings.from_env({"KILN_REMOTE_CACHE": bad})
    with pytest.raises(SettingsError, match="KILN_REMOTE_MAX_ENTRY_MB"):
        settings.from_env({"KILN_REMOTE_MAX_ENTRY_MB": "4096"})
    with pytest.raises(SettingsError, match="remote_timeout_s"):
        settings.current().replace(remote_timeout_s=0.0)


def test_a_password_never_reaches_a_message(artifact: CompiledArtifact, tmp_path: Path) -> None:
    assert redacted_url("redis://:hunter2@host:6379/0") == "redis://:***@host:6379/0"
    assert redacted_url("redis://kiln:hunter2@host:6379/0") == "redis://kiln:***@host:6379/0"
    assert redacted_url("redis://host:6379/0") == "redis://host:6379/0"
    with pytest.raises(SettingsError) as error:
        settings.from_env({"KILN_REMOTE_CACHE": "redis://:hunter2@host:port/0"})
    assert "hunter2" not in str(error.value)
    assert "redis://:***@host:port/0" in str(error.value)
    store = remote_store(tmp_path, f"redis://:hunter2@127.0.0.1:{free_port()}/0", remote_timeout_s=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.put(artifact)
    assert caught
    assert all("hunter2" not in str(w.message) for w in caught)


def test_nothing_imports_redis_unless_a_remote_cache_is_configured(tmp_path: Path) -> None:
    script = f"""
import sys
from pathlib import Path
import triton_kiln as kiln
from triton_kiln import cli, settings
from triton_kiln.autotuner import autotuner
pool = kiln.CompilePool(cache_dir={str(tmp_path / "cache")!r}, start=False)
assert pool.store is not None and pool.store.remote is None
autotuner._shared_database(settings.current().replace(cache_dir=Path({str(tmp_path)!r})).cache_dir / "t.db")
print(sorted(m for m in sys.modules if m == "redis" or m.startswith(("redis.", "triton_kiln.remote"))))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    # ...and nothing imports redis at all: kiln speaks RESP2 itself (remote/resp.py)
    importers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "triton_kiln").rglob("*.py")
        if "import redis" in path.read_text() or "from redis" in path.read_text()
    ]
    assert importers == []

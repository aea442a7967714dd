"""Artifact entries in a real ``redis-server`` that lie: an ``artifact.json`` that is not an object
or is nested 200,000 deep, a non-ASCII signature, a key holding another type, a 256 MiB value
over a 16 MiB limit. Each is that key's miss with one warning (never an exception, never the
breaker opened for the other keys), and the next local compile overwrites it; the oversized
value is refused from its declared length, its peak memory measured. And kiln's own client
logs in as the URL says: a password, a database number, a Unix socket, TLS with the server's
certificate verified."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request, wait_no_processes
from support.redis_server import REDIS_SERVER, RedisServer
from triton_kiln import CompilePool, settings
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore, CacheWarning
from triton_kiln.pool.pool import open_store

pytest.importorskip("redis", reason="redis-py (the tests' own view of the server) is not installed")
pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)"),
    pytest.mark.timeout(120),
]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> list[CompiledArtifact]:
    """Two real sm_90 compiles, shared by the tests of this module."""
    pool = CompilePool(workers=1, cache_dir=tmp_path_factory.mktemp("compile"))
    try:
        return [pool.compile(add_request(64)), pool.compile(add_request(128))]
    finally:
        pool.shutdown(wait=True)
        assert not wait_no_processes(pool.pool_id)


def remote_store(root: Path, url: str, **changes: Any) -> ArtifactStore:
    store = open_store(settings.current().replace(cache_dir=root, remote_cache=url, **changes))
    assert store is not None
    assert store.remote is not None
    return store


def name_of(key: str) -> str:
    return f"kiln:r1:artifact:a2:{key}"


def get_with_warnings(store: ArtifactStore, key: str) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = store.get(key)
    return found, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


RECORDS = {
    "a list": b"[1, 2, 3]",
    "a string": b'"artifact"',
    "nested 200,000 deep": b'{"files": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
}


@pytest.mark.parametrize("case", [*RECORDS, "a non-ASCII signature", "a string at the entry's key"])
def test_a_lying_artifact_entry_is_that_keys_miss_and_is_overwritten(
    case: str, redis_server: RedisServer, artifacts: list[CompiledArtifact], tmp_path: Path
) -> None:
    bad, good = artifacts
    signing: dict[str, Any] = {}
    if case == "a non-ASCII signature":
        key_file = tmp_path / "kiln.key"
        key_file.write_bytes(b"k" * 32)
        key_file.chmod(0o600)
        signing = {"remote_key_file": key_file}
    machine_a = remote_store(tmp_path / "a", redis_server.url, **signing)
    machine_a.put(bad)
    machine_a.put(good)
    client: Any = redis_server.client()
    if case in RECORDS:
        client.hset(name_of(bad.key), "artifact.json", RECORDS[case])
    elif case == "a non-ASCII signature":
        client.hset(name_of(bad.key), "kiln-signature", "\u00e9\u00ff".encode() * 16)
    else:
        client.delete(name_of(bad.key))
        client.set(name_of(bad.key), b"not a hash")

    machine_b = remote_store(tmp_path / "b", redis_server.url, **signing)
    found, messages = get_with_warnings(machine_b, bad.key)
    assert found is None
    assert len(messages) == 1, messages
    assert bad.key[:16] in messages[0]
    assert not machine_b.path_for(bad.key).exists()
    remote: Any = machine_b.remote
    assert not remote.client.breaker.is_open  # one key's miss, not the server's outage...
    found, messages = get_with_warnings(machine_b, good.key)  # ...the next key still comes from Redis
    assert found is not None
    assert messages == []
    machine_b.put(bad)  # the next verified local result overwrites the bad entry
    assert remote_store(tmp_path / "c", redis_server.url, **signing).get(bad.key) is not None


def test_a_value_over_the_limit_is_refused_before_it_is_read(
    redis_server: RedisServer, artifacts: list[CompiledArtifact], tmp_path: Path
) -> None:
    bad, good = artifacts
    machine_a = remote_store(tmp_path / "a", redis_server.url)
    machine_a.put(good)
    client: Any = redis_server.client()
    client.hset(name_of(bad.key), "artifact.json", b"\0" * (256 << 20))  # 256 MiB
    del client

    machine_b = remote_store(tmp_path / "b", redis_server.url, remote_max_entry_mb=16)
    tracemalloc.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert machine_b.remote is not None
            assert machine_b.remote.fetch(bad.key) is None
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 16 << 20, f"fetching a 256 MiB entry cost {peak >> 20} MiB"
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1, messages
    assert "KILN_REMOTE_MAX_ENTRY_MB" in messages[0]
    assert machine_b.get(good.key) is not None  # the server is fine: the next key is read


def test_password_database_number_and_unix_socket_urls_reach_the_server(
    artifacts: list[CompiledArtifact], tmp_path: Path
) -> None:
    import subprocess
    import time

    import redis

    from support.redis_server import free_port

    port, sock = free_port(), tmp_path / "redis.sock"
    proc = subprocess.Popen(
        [str(REDIS_SERVER), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--requirepass", "s3cr/t", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client: Any = redis.Redis(host="127.0.0.1", port=port, password="s3cr/t", db=3)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        bad, good = artifacts
        tcp = remote_store(tmp_path / "a", f"redis://:s3cr%2Ft@127.0.0.1:{port}/3")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tcp.put(good)
            assert client.exists(name_of(good.key))  # in database 3
            unix = remote_store(tmp_path / "b", f"unix://:s3cr%2Ft@{sock}?db=3")
            assert unix.get(good.key) is not None
        wrong = remote_store(tmp_path / "c", f"redis://:wrong@127.0.0.1:{port}/3")
        with pytest.warns(CacheWarning, match="goes on with its local cache"):
            assert wrong.get(bad.key) is None  # refused login: a server fault, one warning
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_rediss_url_verifies_the_servers_certificate(
    artifacts: list[CompiledArtifact], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil
    import subprocess
    import time

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate with")
    key, cert = tmp_path / "server.key", tmp_path / "server.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kiln-test",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    from support.redis_server import free_port

    port = free_port()
    proc = subprocess.Popen(
        [str(REDIS_SERVER), "--bind", "127.0.0.1", "--port", "0", "--tls-port", str(port), "--save", "",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
         "--tls-auth-clients", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        if proc.poll() is not None:
            pytest.skip("this redis-server has no TLS")
        _, good = artifacts
        url = f"rediss://127.0.0.1:{port}/0"
        untrusted = remote_store(tmp_path / "a", url, remote_timeout_s=2.0)
        with pytest.warns(CacheWarning, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.put(good)  # a certificate no CA of this machine signed: refused
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusted = remote_store(tmp_path / "b", url, remote_timeout_s=2.0, remote_retry_s=0.01)
        time.sleep(0.05)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            trusted.put(good)
            again = remote_store(tmp_path / "c", url, remote_timeout_s=2.0, remote_retry_s=0.01)
            assert again.get(good.key) is not None
    finally:
        proc.terminate()
        proc.wait(timeout=10)

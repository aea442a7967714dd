"""Signed remote entries (``KILN_REMOTE_KEY_FILE``): without a key, whoever can write to Redis can
write a consistent entry (files, manifest and checksums rewritten together) and it is loaded; with
a key the machines share, such an entry, an unsigned one or one signed with another key is a miss
with a warning, never installed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request, wait_no_processes
from support.redis_server import REDIS_SERVER, RedisServer
from triton_kiln import CompilePool, SettingsError, settings
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore, CacheWarning
from triton_kiln.pool.pool import open_store
from triton_kiln.tuning import ConfigResult, TuningDatabase

pytest.importorskip("redis", reason="redis-py (the tests' own view of the server) is not installed")
pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)"),
    pytest.mark.timeout(120),
]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> CompiledArtifact:
    pool = CompilePool(workers=1, cache_dir=tmp_path_factory.mktemp("compile"))
    try:
        return pool.compile(add_request(64))
    finally:
        pool.shutdown(wait=True)
        assert not wait_no_processes(pool.pool_id)


def key_file(path: Path, key: bytes) -> Path:
    path.write_bytes(key)
    path.chmod(0o600)
    return path


def store(root: Path, url: str, key: Path | None) -> ArtifactStore:
    chosen = open_store(settings.current().replace(cache_dir=root, remote_cache=url, remote_key_file=key))
    assert chosen is not None
    return chosen


def forge(server: RedisServer, artifact: CompiledArtifact) -> bytes:
    """Rewrite the entry consistently: another binary, its manifest and checksum to match."""
    client: Any = server.client()
    name = f"kiln:r1:artifact:a2:{artifact.key}"
    fields = dict(client.hgetall(name))
    binary_name = artifact.binary_file_name
    evil = artifact.binary[:-16] + b"\xcc" * 16
    record = json.loads(fields[b"artifact.json"])
    record["files"][binary_name] = {"sha256": hashlib.sha256(evil).hexdigest(), "size": len(evil)}
    record["binary_sha256"] = hashlib.sha256(evil).hexdigest()
    fields[binary_name.encode()] = evil
    fields[b"artifact.json"] = json.dumps(record).encode()
    client.delete(name)
    client.hset(name, mapping=fields)
    return evil


def test_without_a_key_a_consistent_rewrite_is_loaded(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    """The limit of checksums, pinned: this is what the key is for (docs/REMOTE_CACHE.md)."""
    store(tmp_path / "a", redis_server.url, None).put(artifact)
    evil = forge(redis_server, artifact)
    loaded = store(tmp_path / "b", redis_server.url, None).get(artifact.key)
    assert loaded is not None
    assert loaded.binary == evil


def test_with_a_key_signed_entries_load_and_forged_ones_do_not(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    key = key_file(tmp_path / "kiln.key", os.urandom(32))
    store(tmp_path / "a", redis_server.url, key).put(artifact)
    assert store(tmp_path / "b", redis_server.url, key).get(artifact.key) == artifact

    forge(redis_server, artifact)  # the signature no longer matches the rewritten record
    reader = store(tmp_path / "c", redis_server.url, key)
    with pytest.warns(CacheWarning, match="signed with another key"):
        assert reader.get(artifact.key) is None
    assert artifact.key not in reader


def test_with_a_key_unsigned_or_other_key_entries_are_refused(
    redis_server: RedisServer, artifact: CompiledArtifact, tmp_path: Path
) -> None:
    store(tmp_path / "a", redis_server.url, None).put(artifact)  # a kiln without the key wrote it
    key = key_file(tmp_path / "kiln.key", os.urandom(32))
    with pytest.warns(CacheWarning, match="not signed"):
        assert store(tmp_path / "b", redis_server.url, key).get(artifact.key) is None
    other = key_file(tmp_path / "other.key", os.urandom(32))
    store(tmp_path / "c", redis_server.url, other).put(artifact)
    with pytest.warns(CacheWarning, match="signed with another key"):
        assert store(tmp_path / "d", redis_server.url, key).get(artifact.key) is None
    # a reader without a key ignores the signature
    assert store(tmp_path / "e", redis_server.url, None).get(artifact.key) == artifact


IDENTITY = {
    "kernel_key": "k" * 64,
    "key_repr": "(4096,)",
    "device_name": "NVIDIA H100 80GB HBM3",
    "capability": "9.0",
    "triton_version": "3.7.1",
}


def test_with_a_key_a_rewritten_tuning_run_is_refused(redis_server: RedisServer, tmp_path: Path) -> None:
    from triton_kiln.remote import remote_tuning

    key = key_file(tmp_path / "kiln.key", os.urandom(32))
    chosen = settings.current().replace(remote_cache=redis_server.url, remote_key_file=key)
    writer = remote_tuning(TuningDatabase(tmp_path / "a.sqlite3"), chosen)
    run_id = writer.begin_run(kernel="k", default_label="A", **IDENTITY)
    writer.record(run_id, ConfigResult("A", {"BLOCK": 64}, "ok", runtime_ms=2.0))
    writer.record(run_id, ConfigResult("B", {"BLOCK": 128}, "ok", runtime_ms=1.0))
    writer.finish_run(run_id, "B", 1.0, 0.5)
    assert remote_tuning(TuningDatabase(tmp_path / "b.sqlite3"), chosen).lookup(**IDENTITY) is not None

    client: Any = redis_server.client()
    (name,) = client.keys("kiln:r1:tuning:*")
    line, _, payload = client.get(name).partition(b"\n")
    run = json.loads(payload)
    run["best_label"] = "A"  # steer the second machine to another config
    client.set(name, line + b"\n" + json.dumps(run).encode())
    reader = remote_tuning(TuningDatabase(tmp_path / "c.sqlite3"), chosen)
    with pytest.warns(CacheWarning, match="not signed with KILN_REMOTE_KEY_FILE"):
        assert reader.lookup(**IDENTITY) is None
    assert reader.local.runs() == []


def test_with_a_key_a_program_record_signed_with_another_key_or_rewritten_is_refused(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    from triton_kiln.remote import remote_programs

    ours = settings.current().replace(
        remote_cache=redis_server.url,
        remote_timeout_s=5.0,  # a healthy server on a busy host
        remote_key_file=key_file(tmp_path / "a.key", os.urandom(32)),
    )
    theirs = ours.replace(remote_key_file=key_file(tmp_path / "b.key", os.urandom(32)))
    record = b'{"format": 1, "program": "train", "runs": 1, "entries": []}'
    assert remote_programs(ours, 1).publish("train", record)
    assert remote_programs(ours, 1).fetch("train") == record
    with pytest.warns(CacheWarning, match="not signed with KILN_REMOTE_KEY_FILE"):
        assert remote_programs(theirs, 1).fetch("train") is None
    client: Any = redis_server.client()
    (name,) = client.keys("kiln:r1:program:*")
    line, _, _ = client.get(name).partition(b"\n")
    client.set(name, line + b"\n" + record.replace(b'"runs": 1', b'"runs": 9'))
    with pytest.warns(CacheWarning, match="not signed with KILN_REMOTE_KEY_FILE"):
        assert remote_programs(ours, 1).fetch("train") is None


def test_the_key_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    good = key_file(tmp_path / "good.key", os.urandom(32))
    assert settings.from_env({"KILN_REMOTE_KEY_FILE": str(good)}).remote_key_file == good
    short = key_file(tmp_path / "short.key", b"secret")
    with pytest.raises(SettingsError, match="at least 32 bytes"):
        settings.from_env({"KILN_REMOTE_KEY_FILE": str(short)})
    shared = key_file(tmp_path / "shared.key", os.urandom(32))
    shared.chmod(0o644)
    with pytest.raises(SettingsError, match="chmod 600"):
        settings.from_env({"KILN_REMOTE_KEY_FILE": str(shared)})
    with pytest.raises(SettingsError, match="KILN_REMOTE_KEY_FILE"):
        settings.from_env({"KILN_REMOTE_KEY_FILE": str(tmp_path / "missing.key")})

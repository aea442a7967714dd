"""Finished tuning runs through Redis: a run finished on one machine is found
by another machine's lookup (and kept in its local database); a tampered run is a miss with a
warning, never adopted; an unreachable server leaves the local database working."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.redis_server import REDIS_SERVER, RedisServer, free_port
from triton_kiln import settings
from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.tuning import ConfigResult, TuningDatabase
from triton_kiln.tuning.schema import SCHEMA_VERSION

pytest.importorskip("redis", reason="redis-py (the tests' own view of the server) is not installed")
pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)"),
    pytest.mark.timeout(60),
]

IDENTITY = {
    "kernel_key": "k" * 64,
    "key_repr": "(4096, 'torch.float32')",
    "device_name": "NVIDIA H100 80GB HBM3",
    "capability": "9.0",
    "triton_version": "3.7.1",
}


def database(path: Path, url: str, **changes: Any) -> Any:
    from triton_kiln.remote import remote_tuning

    # a busy CI host can take longer than the default 0.5 s to answer; the deadline's own tests
    # pass theirs
    changes.setdefault("remote_timeout_s", 5.0)
    return remote_tuning(TuningDatabase(path), settings.current().replace(remote_cache=url, **changes))


def finish_a_run(db: Any) -> None:
    run_id = db.begin_run(kernel="scale_kernel", default_label="BLOCK=64", **IDENTITY)
    for label, ms in (("BLOCK=64", 3.0), ("BLOCK=128", 1.0)):
        db.record(run_id, ConfigResult(label, {"BLOCK": int(label[6:])}, "ok", runtime_ms=ms, compile_s=0.5))
    db.finish_run(run_id, "BLOCK=128", 4.0, 1.0, split={"bench_s": 2.0})


def test_a_run_finished_on_one_machine_is_found_by_another(redis_server: RedisServer, tmp_path: Path) -> None:
    machine_a = database(tmp_path / "a.sqlite3", redis_server.url)
    finish_a_run(machine_a)
    assert machine_a.published == 1
    client: Any = redis_server.client()
    (name,) = client.keys("kiln:r1:tuning:*")
    assert name.decode().startswith(f"kiln:r1:tuning:s{SCHEMA_VERSION}:")

    machine_b = database(tmp_path / "b.sqlite3", redis_server.url)
    assert machine_b.local.lookup(**IDENTITY) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = machine_b.lookup(**IDENTITY)
    assert run is not None
    assert machine_b.imported == 1
    assert run.best_label == "BLOCK=128"
    assert [(r.label, r.runtime_ms) for r in run.results] == [("BLOCK=64", 3.0), ("BLOCK=128", 1.0)]
    assert run.split == {"bench_s": 2.0}
    redis_server.stop()
    assert machine_b.local.lookup(**IDENTITY) is not None  # kept locally: Redis no longer needed
    assert machine_b.lookup(**IDENTITY) is not None
    assert machine_b.imported == 1
    from triton_kiln.remote import RemoteCacheWarning

    with pytest.warns(RemoteCacheWarning, match="goes on with its local cache"):
        assert machine_b.lookup(**{**IDENTITY, "capability": "10.0"}) is None  # asks the stopped server


def _tamper(case: str, data: dict[str, Any]) -> bytes:
    if case == "not JSON":
        return b"{not json"
    if case == "another key's run":
        data["key_repr"] = "(8192, 'torch.float32')"
    elif case == "an unfinished run":
        data["finished_at"] = None
    elif case == "a best config it never measured":
        data["best_label"] = "BLOCK=4096"
    elif case == "an unknown status":
        data["results"][0]["status"] = "fastest"
    else:
        raise AssertionError(case)
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    "case",
    [
        "not JSON",
        "another key's run",
        "an unfinished run",
        "a best config it never measured",
        "an unknown status",
    ],
)
def test_a_tampered_run_is_a_miss_with_a_warning(
    case: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    finish_a_run(database(tmp_path / "a.sqlite3", redis_server.url))
    client: Any = redis_server.client()
    (name,) = client.keys("kiln:r1:tuning:*")
    client.set(name, _tamper(case, json.loads(client.get(name))))
    machine_b = database(tmp_path / "b.sqlite3", redis_server.url)
    with pytest.warns(CacheWarning, match="invalid tuning run"):
        assert machine_b.lookup(**IDENTITY) is None
    assert machine_b.imported == 0
    assert machine_b.local.runs() == []  # nothing adopted


def test_an_unreachable_server_leaves_the_local_database_working(tmp_path: Path) -> None:
    from triton_kiln.remote import RemoteCacheWarning
    from triton_kiln.remote.health import forget_warnings

    forget_warnings()
    url = f"redis://127.0.0.1:{free_port()}/0"
    db = database(tmp_path / "a.sqlite3", url, remote_timeout_s=0.2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert db.lookup(**IDENTITY) is None
        finish_a_run(db)
        assert db.lookup(**IDENTITY) is not None
    assert db.published == 0
    assert len([w for w in caught if issubclass(w.category, RemoteCacheWarning)]) == 1

"""The remote cache's promise, on CPU: a second "machine" (a fresh local cache,
another process, the same Redis) gets every artifact with 0 compiles and adopts a tuned kernel
with 0 compiles and 0 benchmarks; Redis stopped mid-run: kiln finishes locally with one warning.

Real compiles (sm_90, no GPU needed) and a real ``redis-server``; only the GPU's timings are
stood in for (test_autotune_cpu.py's ``FakeBench``), as in the autotuner's other CPU tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.basics import SM90, add_request
from support.redis_server import REDIS_SERVER, RedisServer
from triton_kiln import CompileRequest, settings

pytest.importorskip("redis", reason="redis-py (the tests' own view of the server) is not installed")
pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)"),
    pytest.mark.timeout(240),
]

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# The config set both machines compile: the add kernel over blocks and warps, a matmul over tiles.
ADD_CONFIGS = [(block, warps) for block in (64, 128, 256, 512) for warps in (2, 4)]
MM_CONFIGS = [(32, 32), (64, 32)]


def config_set() -> list[CompileRequest]:
    from support import kernels

    sig = {n: "i32" for n in kernels.matmul_kernel.arg_names if not n.startswith("BLOCK")}
    sig.update(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16")
    matmuls = [
        CompileRequest(
            kernels.matmul_kernel,
            sig,
            {"BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": bk},
            options={"num_warps": 4, "num_stages": 3},
            target=SM90,
        )
        for bm, bk in MM_CONFIGS
    ]
    return [add_request(block, warps) for block, warps in ADD_CONFIGS] + matmuls


MACHINE_B = """
import hashlib, json, sys
sys.path.insert(0, {tests!r})
import test_remote_machines as t
from triton_kiln import CompilePool, settings
with CompilePool(workers=2) as pool:  # KILN_CACHE_DIR and KILN_REMOTE_CACHE from the environment
    assert pool.store is not None and pool.store.remote is not None
    futures = [pool.submit(request) for request in t.config_set()]
    digests = [hashlib.sha256(f.result(timeout=120).binary).hexdigest() for f in futures]
    stats = pool.stats
    print(json.dumps({{"digests": digests, "dispatched": stats.dispatched, "compiled": stats.compiled,
                      "disk_hits": stats.disk_hits, "fetched": pool.store.remote.fetched}}))
"""


def remote_settings(url: str, cache_dir: Path, **changes: Any) -> settings.Settings:
    # a busy CI host can take longer than the default 0.5 s to answer; the deadline's own tests
    # pass theirs
    changes.setdefault("remote_timeout_s", 5.0)
    return settings.current().replace(remote_cache=url, cache_dir=cache_dir, **changes)


def test_a_second_machine_gets_every_artifact_with_zero_compiles(
    redis_server: RedisServer, make_pool: Any, tmp_path: Path
) -> None:
    requests = config_set()
    machine_a = make_pool(
        settings=remote_settings(redis_server.url, tmp_path / "a"), cache_dir=tmp_path / "a"
    )
    artifacts = [future.result(timeout=180) for future in [machine_a.submit(r) for r in requests]]
    assert machine_a.stats.compiled == len(requests)
    assert machine_a.store.remote.published == len(requests)
    client: Any = redis_server.client()
    assert len(client.keys("kiln:r1:artifact:*")) == len(requests)

    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(
        PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{TESTS}",
        KILN_CACHE_DIR=str(tmp_path / "b"),  # a fresh local cache: another machine
        KILN_REMOTE_CACHE=redis_server.url,
        TRITON_CACHE_DIR=str(tmp_path / "b-triton"),
    )
    script = MACHINE_B.format(tests=str(TESTS))
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert not _processes_with_cache(tmp_path / "b"), "machine B's pool left processes behind"
    machine_b = json.loads(out.stdout.strip().splitlines()[-1])
    assert machine_b["dispatched"] == 0  # nothing reached a worker...
    assert machine_b["compiled"] == 0  # ...nothing compiled
    assert machine_b["disk_hits"] == machine_b["fetched"] == len(requests)  # every one from Redis
    assert machine_b["digests"] == [hashlib.sha256(a.binary).hexdigest() for a in artifacts]
    # B's local cache now holds verified entries of its own
    assert len(list((tmp_path / "b" / "artifacts-v2").glob("*/*/artifact.json"))) == len(requests)


def test_a_second_machine_adopts_a_tuned_kernel_without_compiling_or_benchmarking(
    redis_server: RedisServer, make_pool: Any, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    import triton_kiln as kiln
    from test_autotune_cpu import FakeBench, by_block, configs, scale_kernel, tune

    def machine(name: str) -> tuple[Any, Any]:
        chosen = remote_settings(
            redis_server.url, tmp_path / name, tuning_db=tmp_path / name / "tuning.sqlite3"
        )
        pool = make_pool(settings=chosen, cache_dir=tmp_path / name, start=name == "a")
        with settings.scope(**{k: getattr(chosen, k) for k in ("cache_dir", "tuning_db", "remote_cache")}):
            tuner = kiln.autotune(configs(64, 128, 256), key=["n"], pool=pool, target=SM90)(scale_kernel)
        return tuner, pool

    FakeBench.instances.clear()
    tuner_a, pool_a = machine("a")
    tune(tuner_a, lambda t, a, k: FakeBench(t, a, k, by_block({64: 3.0, 128: 2.0, 256: 1.0})))
    assert tuner_a.loaded_from is None
    assert pool_a.stats.compiled == 3
    assert type(tuner_a._get_database()).__name__ == "RemoteTuningDatabase"
    assert tuner_a._get_database().published == 1
    best_a = pool_a.compile(tuner_a._candidate(tuner_a.best_config, *_call(torch, 4096)).request)

    tuner_b, pool_b = machine("b")  # a fresh cache directory and tuning database; same Redis
    tune(tuner_b, lambda t, a, k: FakeBench(t, a, k, by_block({64: 9.0, 128: 9.0, 256: 9.0})))
    assert tuner_b.loaded_from == "database"  # the run A finished, through Redis
    assert tuner_b.best_config.kwargs == {"BLOCK": 256}
    assert len(FakeBench.instances) == 1  # B benchmarked nothing
    assert tuner_b._get_database().imported == 1
    assert tuner_b._get_database().local.lookup(**_identity(tuner_a)) is not None  # now local too
    # the tuned kernel's binary: from Redis, verified, installed locally; no compile
    best_b = pool_b.compile(tuner_b._candidate(tuner_b.best_config, *_call(torch, 4096)).request)
    assert pool_b.stats.dispatched == 0
    assert pool_b.stats.compiled == 0
    assert pool_b.stats.disk_hits == 1
    assert best_b.binary == best_a.binary


def _processes_with_cache(cache_dir: Path, timeout: float = 10.0) -> list[Any]:
    """Live processes whose KILN_CACHE_DIR is ``cache_dir`` (a child's pool: zygote, workers)."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        found = []
        for proc in psutil.process_iter():
            try:
                ours = proc.environ().get("KILN_CACHE_DIR") == str(cache_dir)
                if ours and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.Error, OSError):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _call(torch: Any, n: int) -> tuple[list[Any], dict[str, Any]]:
    x = torch.randn(n, dtype=torch.float32)
    return [x, torch.empty_like(x), n], {}


def _identity(tuner: Any) -> dict[str, str]:
    run = tuner.last_run
    names = ("kernel_key", "key_repr", "device_name", "capability", "triton_version")
    return {name: getattr(run, name) for name in names}


def test_redis_stopped_mid_run_kiln_finishes_locally_with_one_warning(
    redis_server: RedisServer, make_pool: Any, tmp_path: Path
) -> None:
    from triton_kiln.remote import RemoteCacheWarning

    requests = config_set()
    chosen = remote_settings(redis_server.url, tmp_path / "a", remote_timeout_s=0.3, remote_retry_s=1.0)
    pool = make_pool(settings=chosen, cache_dir=tmp_path / "a")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = [pool.submit(r) for r in requests[:3]]
        for future in first:
            future.result(timeout=180)
        redis_server.stop()  # mid-run
        rest = [pool.submit(r) for r in requests[3:]]
        for future in rest:
            future.result(timeout=180)
    assert pool.stats.compiled == len(requests)
    assert pool.stats.failed == 0
    remote = pool.store.remote
    assert remote.published == 3  # what was written before the stop
    stopped = [w for w in caught if issubclass(w.category, RemoteCacheWarning)]
    assert len(stopped) == 1, [str(w.message) for w in caught]
    assert "goes on with its local cache" in str(stopped[0].message)

    # the server back on the same port: after KILN_REMOTE_RETRY_S kiln uses it again
    server = RedisServer(redis_server.directory, port=redis_server.port).start()
    try:
        time.sleep(1.1)
        again = make_pool(settings=chosen.replace(cache_dir=tmp_path / "c"), cache_dir=tmp_path / "c")
        again.compile(add_request(1024))
        assert remote.client.breaker.is_open is False
        client: Any = server.client()
        assert len(client.keys("kiln:r1:artifact:*")) == 1
    finally:
        server.stop()

"""Inductor's best configs shared through kiln's remote cache (``KILN_REMOTE_CACHE``).

Machines stand as processes with caches of their own (Inductor's, Triton's, kiln's) and one real
``redis-server``. The first loads a generated kernel with two configs, as Inductor loads it, and
saves the one its autotune chose, as Inductor does when the autotune (or coordinate descent)
ends; the second, on a fresh Inductor cache, loads the same kernel with only that config, so
its first call times nothing, and the same kernel of another backend hash (another GPU
architecture, CUDA toolchain or Triton) with both. An entry that is not a config Inductor wrote
is a miss with one warning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.redis_server import REDIS_SERVER, RedisServer
from support.remote_machine import run_machine
from support.shared_best_configs_child import FIXTURE_HASH

pytest.importorskip("torch._inductor.remote_cache")

from triton_kiln import settings
from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.inductor import shared_best_configs
from triton_kiln.remote.names import inductor_best_config_name

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)")

OTHER_HASH = "0" * 64


def machine(tmp_path: Path, name: str, remote: str, *hashes: str, save: bool = False) -> dict[str, Any]:
    """One process as a machine of its own (its caches under ``tmp_path/name``), loading the
    kernel once per backend hash."""
    args = [",".join(hashes), *(["save"] if save else [])]
    return run_machine(tmp_path, name, remote, "support.shared_best_configs_child", *args)


def test_a_second_machine_keeps_only_the_config_the_first_chose_and_another_gpu_tunes_again(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    first = machine(tmp_path, "a", redis_server.url, FIXTURE_HASH, save=True)
    assert first["setting"] is None, first  # Inductor's setting (and the generated code) unchanged
    [configs] = first["configs"]
    assert len(configs) == 2, first  # nothing shared yet: both configs to time
    assert first["shared"] == {"found": 0, "missed": 1, "published": 1}, first
    # the second machine loads the same kernel, then the same kernel of another backend hash
    # (another GPU architecture, CUDA toolchain or Triton)
    second = machine(tmp_path, "b", redis_server.url, FIXTURE_HASH, OTHER_HASH)
    assert second["configs"] == [[first["saved"]], configs], second  # one config: nothing timed
    assert second["shared"] == {"found": 1, "missed": 1, "published": 0}, second


def test_an_entry_that_is_not_a_config_inductor_wrote_is_a_miss_with_one_warning(
    redis_server: RedisServer,
) -> None:
    redis = pytest.importorskip("redis", reason="redis-py (the test's own view of the server)")

    from triton_kiln.remote import remote_inductor_best_configs

    good = {"XBLOCK": 512, "num_warps": 8, "num_stages": 1, "configs_hash": "h", "found_by_coordesc": False}
    with settings.scope(remote_cache=redis_server.url):
        remote = remote_inductor_best_configs(settings.current())
        assert remote.fetch("k") is None  # nothing there yet: a miss, no warning
        assert remote.publish("k", json.dumps(good).encode())
        assert json.loads(remote.fetch("k") or b"") == good
        assert remote.fetch("another key") is None
        assert not remote.publish("bad", b'{"num_warps": "eight"}')  # what kiln would refuse is not written
        raw = redis.Redis.from_url(redis_server.url)
        cases = [
            {**good, "num_warps": "8"},
            {**good, "XBLOCK": 1 << 30},  # no block size is that large
            {**good, "XBLOCK": -1},
            {k: v for k, v in good.items() if k != "configs_hash"},
            {**good, **{f"B{i}": 1 for i in range(64)}},  # over MAX_FIELDS
            [good],
        ]
        for value in [*(json.dumps(case).encode() for case in cases), b"\x80\x04not json"]:
            raw.set(inductor_best_config_name("k"), value)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert remote.fetch("k") is None, value
            assert [w.category for w in caught] == [CacheWarning], value
            assert "invalid Inductor config" in str(caught[0].message)


@pytest.mark.parametrize("chosen", [False, True])
def test_inductors_own_setting_chosen_by_the_user_is_left_alone(
    chosen: bool, redis_server: RedisServer
) -> None:
    from torch._inductor import config
    from torch._inductor.remote_cache import RemoteAutotuneCache
    from torch._inductor.runtime import autotune_cache

    should_use = autotune_cache._should_use_remote_autotune_cache
    # (Inductor's own patch: pytest's monkeypatch deletes a config it did not find in the
    # module's __dict__, which removes the setting from torch's config)
    with config.patch(autotune_remote_cache=chosen), settings.scope(remote_cache=redis_server.url):
        assert shared_best_configs.install(settings.current()) is None
        assert config.autotune_remote_cache is chosen
    assert RemoteAutotuneCache.backend_override_cls is None
    assert autotune_cache._should_use_remote_autotune_cache is should_use


def test_uninstall_gives_inductor_its_own_decision_and_backend_back(redis_server: RedisServer) -> None:
    from torch._inductor.remote_cache import RemoteAutotuneCache
    from torch._inductor.runtime import autotune_cache

    import triton_kiln.inductor as kiln_inductor

    should_use = autotune_cache._should_use_remote_autotune_cache
    with settings.scope(remote_cache=redis_server.url):
        kiln_inductor.install(sidecar=False)
        try:
            assert autotune_cache._should_use_remote_autotune_cache({"autotune_remote_cache": None})
            assert not autotune_cache._should_use_remote_autotune_cache({"autotune_remote_cache": False})
            assert RemoteAutotuneCache.backend_override_cls is not None
        finally:
            kiln_inductor.uninstall()
    assert autotune_cache._should_use_remote_autotune_cache is should_use
    assert not RemoteAutotuneCache.backend_override_cls

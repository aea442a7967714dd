"""Max-autotune's template timings shared through kiln's remote cache (``KILN_REMOTE_CACHE``).

Two machines stand as two processes with caches of their own (Inductor's, Triton's, kiln's) and
one real ``redis-server``: the first times the template choices and publishes their timings,
the second, on a fresh Inductor cache, times none (Inductor's autotune counter stays 0) and
compiles the same model. The CPU's choices (Inductor's C++ GEMM template) go through the same
``PersistentCache.lookup`` as a GPU's Triton template choices. An entry that is not kiln's is a
miss with one warning, and the choices are timed."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from support.redis_server import REDIS_SERVER, RedisServer
from support.remote_machine import run_machine

pytest.importorskip("torch._inductor.codecache")

from triton_kiln import settings
from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.remote.inductor_timings import MAX_CHOICES
from triton_kiln.remote.names import inductor_timings_name

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server (apt-get install redis-server)")


def machine(tmp_path: Path, name: str, remote: str) -> dict[str, Any]:
    """One process as a machine of its own (its caches under ``tmp_path/name``)."""
    return run_machine(tmp_path, name, remote, "support.shared_timings_child")


def test_a_second_machine_times_no_choice_the_first_timed(redis_server: RedisServer, tmp_path: Path) -> None:
    first = machine(tmp_path, "a", redis_server.url)
    assert first["autotunes"] >= 1, first  # the choices were timed, and published
    assert first["shared"] == {"from_remote": 0, "timed": first["autotunes"]}, first
    assert first["published"] == first["autotunes"], first
    second = machine(tmp_path, "b", redis_server.url)
    assert second["autotunes"] == 0, second  # nothing timed: every lookup from the remote cache
    assert second["shared"] == {"from_remote": first["autotunes"], "timed": 0}, second
    assert second["error"] < 1e-3, second


def test_the_key_is_inductors_own_system_operation_inputs_and_precision() -> None:
    import torch

    from triton_kiln.triton_compat import inductor as compat

    key = compat.template_timings_key("mm", "inputs", None)
    assert compat.template_timings_key("mm", "inputs", 8) != key  # a size hint of its own
    assert compat.template_timings_key("addmm", "inputs", None) != key
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium" if before != "medium" else "high")
        assert compat.template_timings_key("mm", "inputs", None) != key
    finally:
        torch.set_float32_matmul_precision(before)


def test_an_entry_that_is_not_kilns_is_a_miss_with_one_warning(redis_server: RedisServer) -> None:
    redis = pytest.importorskip("redis", reason="redis-py (the test's own view of the server)")

    from triton_kiln.remote import remote_inductor_timings

    with settings.scope(remote_cache=redis_server.url):
        remote = remote_inductor_timings(settings.current())
        assert remote.fetch("k") is None  # nothing there yet: a miss, no warning
        assert remote.publish("k", {"choice-a": 0.5, "choice-b": float("inf")})
        assert remote.fetch("k") == {"choice-a": 0.5, "choice-b": float("inf")}
        assert remote.fetch("another key") is None
        many = {f"choice-{i}": float(i) for i in range(MAX_CHOICES + 10)}
        assert remote.publish("many", many)
        assert remote.fetch("many") == dict(list(many.items())[-MAX_CHOICES:])  # the last ones given
        raw = redis.Redis.from_url(redis_server.url)
        cases = [
            b'{"format": 1, "key": "k", "timings": {"choice-a": -1.0}}',  # a negative time
            b'{"format": 1, "key": "k", "timings": {"choice-a": "fast"}}',
            b'{"format": 1, "key": "another key", "timings": {}}',  # stored under k's name
            b"\x80\x04not json",
        ]
        for value in cases:
            raw.set(inductor_timings_name("k"), value)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert remote.fetch("k") is None, value
            assert [w.category for w in caught] == [CacheWarning], value
            assert "invalid Inductor timings" in str(caught[0].message)

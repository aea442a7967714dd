"""A bad argument to the pool's API fails in the caller, naming it, and leaves the pool usable
(audit of the public API: submit's timeout_s and priority, the warm-up target, the
constructor's small arguments)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from support import kernels
from support.basics import SM90, add_request
from triton_kiln import CompilePool, CompileRequest, GPUTarget, SettingsError
from triton_kiln.errors import CacheDirError, TargetError

ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in os.environ:
        if var.startswith("KILN_"):
            monkeypatch.delenv(var)


# -- item 1: submit's timeout_s and priority ---------------------------------------------------

BAD_SUBMITS: list[tuple[dict[str, Any], str]] = [
    ({"timeout_s": "5"}, "timeout_s"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"timeout_s": -1}, "timeout_s"),
    ({"timeout_s": math.nan}, "timeout_s"),
    ({"timeout_s": math.inf}, "timeout_s"),
    ({"timeout_s": True}, "timeout_s"),
    ({"priority": "hi"}, "priority"),
    ({"priority": math.nan}, "priority"),
]


def test_bad_submit_arguments_fail_in_the_caller_and_the_pool_goes_on(make_pool: Any) -> None:
    pool = make_pool(workers=1)
    pool.submit(add_request(block=64), priority=1.0)  # another job queued: priorities compare
    for kwargs, name in BAD_SUBMITS:
        with pytest.raises(SettingsError, match=name):
            pool.submit(add_request(block=256), **kwargs)
        if "timeout_s" in kwargs:
            with pytest.raises(SettingsError, match=name):
                pool.compile(add_request(block=256), **kwargs)
    assert pool.compile(add_request(block=256), timeout_s=60).binary
    assert pool.submit(add_request(block=512), timeout_s=60.0, priority=2).result().binary


# -- item 2: targets the pool or a request cannot compile for ----------------------------------


def test_request_for_an_unknown_backend_is_refused() -> None:
    with pytest.raises(TargetError, match="unknown backend 'nvidia'; expected 'cuda' or 'hip'"):
        CompileRequest(kernels.add_kernel, ADD_SIGNATURE, {"BLOCK": 64}, target=GPUTarget("nvidia", 90, 32))


def test_bad_warmup_target_is_refused_by_the_constructor(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"GPUTarget\('cuda', 90, 32\)"):
        CompilePool(cache_dir=tmp_path, workers=1, warmup_target="cuda:90", start=False)  # type: ignore[arg-type]
    with pytest.raises(TargetError, match="unknown backend 'nvidia'; expected 'cuda' or 'hip'"):
        CompilePool(cache_dir=tmp_path, workers=1, warmup_target=GPUTarget("nvidia", 90, 32), start=False)
    # an arch is left to the warm-up itself, whose failure quotes ptxas (test_zygote.py)
    sm91 = GPUTarget("cuda", 91, 32)
    CompilePool(cache_dir=tmp_path, workers=1, warmup_target=sm91, start=False).shutdown()
    CompilePool(cache_dir=tmp_path, workers=1, warmup_target=None, start=False).shutdown()
    CompilePool(cache_dir=tmp_path, workers=1, warmup_target=SM90, start=False).shutdown()


# -- item 6: the constructor's small arguments -------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cache_dir": ""}, SettingsError, "cache_dir=''.*empty path"),
        ({"use_disk_cache": "no"}, TypeError, "use_disk_cache must be True or False"),
        ({"settings": "x"}, TypeError, "settings must be a kiln Settings"),
        ({"preload": 3}, TypeError, "preload"),
        ({"preload": ["numpy", 3]}, TypeError, "preload"),
    ],
)
def test_bad_constructor_arguments(tmp_path: Path, kwargs: dict[str, Any], error: type, message: str) -> None:
    kwargs.setdefault("cache_dir", tmp_path)
    with pytest.raises(error, match=message):
        CompilePool(workers=1, start=False, **kwargs)


def test_preload_as_one_module_name(tmp_path: Path) -> None:
    pool = CompilePool(cache_dir=tmp_path, workers=1, preload="numpy", start=False)
    try:
        assert pool._manager.supervisor.preload == ["numpy"]
    finally:
        pool.shutdown()


def test_uncreatable_cache_dir_names_the_argument() -> None:
    with pytest.raises(CacheDirError) as info:  # /proc takes no directories, even from root
        CompilePool(cache_dir="/proc/kiln-cache", workers=1, start=False)
    assert "cache_dir=" in str(info.value)
    assert "KILN_CACHE_DIR" not in str(info.value)


def test_one_jobs_bad_bookkeeping_fails_only_that_job(make_pool: Any) -> None:
    """Past submit()'s checks (a subclass, a caller of the manager): the manager thread survives."""
    import pickle
    from concurrent.futures import Future

    from triton_kiln.errors import KilnError
    from triton_kiln.pool.jobs import Job
    from triton_kiln.pool.manager import Submit

    pool = make_pool(workers=1)
    pool.submit(add_request(block=64))
    request = add_request(block=128)
    bad = Job(id=999, request=request, future=Future(), payload=pickle.dumps(request), timeout_s=60.0)
    bad.priority = "hi"  # type: ignore[assignment]
    pool._manager.send(Submit(bad))
    with pytest.raises(KilnError, match="could not queue this compile"):
        bad.future.result(timeout=60)
    assert pool.compile(add_request(block=256)).binary

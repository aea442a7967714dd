"""kiln's compile processes run below the caller's CPU priority (``KILN_WORKER_NICE``), so a
compile gives a shared core to the caller's own threads (Inductor's tracing and codegen, a
launch-bound model) while it takes every idle core."""

from __future__ import annotations

import os
from collections.abc import Callable

import psutil
import pytest

from triton_kiln import CompilePool, settings
from triton_kiln.errors import SettingsError


def test_compile_processes_run_below_the_callers_priority(make_pool: Callable[..., CompilePool]) -> None:
    pool = make_pool(settings=settings.current().replace(worker_nice=7), workers=2)
    assert pool.wait_ready(120)
    mine = os.nice(0)
    assert pool.zygote_pid is not None
    assert psutil.Process(pool.zygote_pid).nice() == min(19, mine + 7)
    workers = pool.worker_pids()
    assert len(workers) == 2
    assert [psutil.Process(pid).nice() for pid in workers] == [min(19, mine + 7)] * 2


def test_nice_zero_keeps_the_callers_priority(make_pool: Callable[..., CompilePool]) -> None:
    pool = make_pool(settings=settings.current().replace(worker_nice=0), workers=1)
    assert pool.wait_ready(120)
    assert pool.zygote_pid is not None
    assert psutil.Process(pool.zygote_pid).nice() == os.nice(0)


def test_kiln_worker_nice_is_read_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_WORKER_NICE", raising=False)
    assert settings.from_env({}).worker_nice == 10
    assert settings.from_env({"KILN_WORKER_NICE": "0"}).worker_nice == 0
    for bad in ("-1", "20", "low"):
        with pytest.raises(SettingsError, match="KILN_WORKER_NICE"):
            settings.from_env({"KILN_WORKER_NICE": bad})

"""Settings: KILN_* variables, malformed values, and scope() overrides."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from triton_kiln import CompilePool, Settings, SettingsError, settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # every setting's variable, whatever the test run set (conftest.py sets some for every test)
    for var in settings.variables().values():
        monkeypatch.delenv(var, raising=False)


def test_defaults_without_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    current = settings.current()
    assert current == Settings()
    assert current.workers == len(os.sched_getaffinity(0))
    assert current.cache_dir == tmp_path / "kiln"
    assert current.use_disk_cache is True
    assert current.memory_limit_mb is None
    assert current.progress is None


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to pin a process to fewer")
def test_the_default_workers_are_the_cores_the_process_may_run_on() -> None:
    """A process pinned to one core (taskset, a cpuset, a launcher pinning a rank to its GPU's
    cores) gets one worker by default, not one per core of the machine."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from triton_kiln import settings; print(settings.current().workers, os.cpu_count())"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=environ, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    workers, machine = (int(word) for word in done.stdout.split())
    assert (workers, machine > 1) == (1, True)


def test_every_variable_parses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {
        "KILN_WORKERS": "3",
        "KILN_JOB_TIMEOUT_S": "2.5",
        "KILN_MEMORY_LIMIT_MB": "1024",
        "KILN_MEMORY_POLL_S": "0.2",
        "KILN_CACHE_DIR": "~/kiln-cache",
        "KILN_DISK_CACHE": "0",
        "KILN_MEMORY_CACHE_MB": "64",
        "KILN_KEEP_IR": "1",
        "KILN_ZYGOTE_START_TIMEOUT_S": "30",
        "KILN_ZYGOTE_RESTARTS": "5",
        "KILN_STDERR_TAIL_LINES": " 7 ",
        "KILN_WORKER_NICE": "4",
        "KILN_PROGRESS": "yes",
        "KILN_DEBUG": "1",
        "KILN_TUNING_DB": "~/tuning.sqlite3",
        "KILN_USE_TUNING_DB": "0",
        "KILN_SANDBOX": "off",
        "KILN_NATIVE_SANDBOX": "0",
        "KILN_BENCH_TIMEOUT_S": "12",
        "KILN_IDLE_S": "0",
        "KILN_FAST_LAUNCH": "0",
        "KILN_AUTOTUNE": "1",
        "KILN_INDUCTOR": "1",
        "KILN_INDUCTOR_SANDBOX": "1",
        "KILN_INDUCTOR_SIDECAR": "0",
        "KILN_INDUCTOR_QUIET_BENCHMARKS": "0",
        "KILN_HELION_SANDBOX": "0",
        "KILN_HELION_STREAM": "0",
        "KILN_HELION_VERIFY_AHEAD": "0",
        "KILN_HELION_FINAL_ROUND": "0",
        "KILN_HELION_SCREEN_MS": "10",
        "KILN_ROUTE_JIT": "0",
        "KILN_PREBUILD_LAUNCHERS": "0",
        "KILN_PREWARM": "1",
        "KILN_CACHE_MAX_MB": "500",
        "KILN_REMOTE_CACHE": "redis://127.0.0.1:6379/2",
        "KILN_REMOTE_MAX_ENTRY_MB": "4",
        "KILN_REMOTE_TTL_DAYS": "7",
        "KILN_REMOTE_TIMEOUT_S": "0.1",
        "KILN_REMOTE_RETRY_S": "5",
        "KILN_REMOTE_KEY_FILE": "~/kiln.key",
        "KILN_FARM_STANDING": "1",
        "KILN_NODE": "0",
        "KILN_NODE_SLOTS": "3",
        "KILN_NODE_POLL_S": "0.2",
        "KILN_NODE_WAIT_S": "60",
        "KILN_NODE_SHARE": "0",
        "KILN_NODE_SHARE_WAIT_S": "5",
        "KILN_PROGRAM_RECORD": "0",
        "KILN_PROGRAM": "train",
        "KILN_PROGRAM_RECORD_MAX": "16",
    }
    assert set(env) == set(settings.variables().values()), "a setting this test does not set"
    (tmp_path / "kiln.key").write_bytes(b"k" * 32)
    (tmp_path / "kiln.key").chmod(0o600)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    current = settings.current()
    assert current == settings.from_env(env)
    assert current.workers == 3
    assert (current.program_record, current.program, current.program_record_max) == (False, "train", 16)
    assert current.job_timeout_s == 2.5
    helion = (
        current.helion_sandbox,
        current.helion_stream,
        current.helion_verify_ahead,
        current.helion_final_round,
    )
    assert helion == (False, False, False, False)
    assert current.helion_screen_ms == 10
    assert current.debug is True
    assert current.memory_limit_mb == 1024
    assert current.memory_poll_s == 0.2
    assert current.cache_dir == tmp_path / "kiln-cache"  # ~ expanded
    assert current.use_disk_cache is False
    assert current.memory_cache_mb == 64
    assert current.keep_ir is True
    assert current.zygote_start_timeout_s == 30.0
    assert current.zygote_restarts == 5
    assert current.stderr_tail_lines == 7
    assert current.worker_nice == 4
    assert current.progress is True
    assert current.tuning_db == tmp_path / "tuning.sqlite3"
    assert current.use_tuning_db is False
    assert current.sandbox is False
    assert current.native_sandbox is False
    assert current.bench_timeout_s == 12.0
    assert current.fast_launch is False
    assert current.autotune is True
    assert current.inductor is True
    assert current.inductor_sandbox is True
    assert current.inductor_sidecar is False
    assert current.route_jit is False
    assert current.prebuild_launchers is False
    assert current.prewarm is True
    assert current.cache_max_mb == 500
    assert current.remote_cache == "redis://127.0.0.1:6379/2"
    assert (current.remote_max_entry_mb, current.remote_ttl_days) == (4, 7.0)
    assert (current.remote_timeout_s, current.remote_retry_s) == (0.1, 5.0)
    assert current.remote_key_file == tmp_path / "kiln.key"
    assert current.farm_standing is True
    assert (current.node, current.node_slots, current.node_poll_s, current.node_wait_s) == (
        False,
        3,
        0.2,
        60.0,
    )
    assert (current.node_share, current.node_share_wait_s) == (False, 5.0)
    # Each variable moved its field away from the default.
    defaults = Settings()
    fields = [f.name for f in dataclasses.fields(Settings)]
    changed = [name for name in fields if getattr(current, name) != getattr(defaults, name)]
    assert len(changed) == len(env) == len(fields)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("true", True),
        ("ON", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
    ],
)
def test_boolean_spellings(value: str, expected: bool) -> None:
    assert settings.from_env({"KILN_DISK_CACHE": value}).use_disk_cache is expected
    assert settings.from_env({"KILN_PROGRESS": value}).progress is expected


def test_empty_variable_keeps_default() -> None:
    assert settings.from_env({"KILN_WORKERS": "", "KILN_JOB_TIMEOUT_S": "   "}) == settings.from_env({})


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("KILN_WORKERS", "abc"),
        ("KILN_WORKERS", "0"),
        ("KILN_WORKERS", "-2"),
        ("KILN_WORKERS", "2.5"),
        ("KILN_JOB_TIMEOUT_S", "-1"),
        ("KILN_JOB_TIMEOUT_S", "0"),
        ("KILN_JOB_TIMEOUT_S", "nan"),
        ("KILN_JOB_TIMEOUT_S", "soon"),
        ("KILN_MEMORY_LIMIT_MB", "1.5G"),
        ("KILN_DISK_CACHE", "maybe"),
        ("KILN_PROGRESS", "2"),
        ("KILN_ZYGOTE_RESTARTS", "0"),
    ],
)
def test_malformed_variable_names_itself(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as info:
        settings.current()
    text = str(info.value)
    assert var in text
    assert repr(value) in text
    assert "expected" in text
    assert isinstance(info.value, ValueError)
    # A pool reads its settings from the same place and fails the same way, before starting anything.
    with pytest.raises(SettingsError, match=var):
        CompilePool(start=False)


def test_pool_reads_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KILN_WORKERS", "3")
    monkeypatch.setenv("KILN_JOB_TIMEOUT_S", "12")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "c"))
    pool = CompilePool(start=False)
    assert (pool.settings.workers, pool.settings.job_timeout_s) == (3, 12.0)
    assert pool.store is not None
    assert pool.store.root.parent == tmp_path / "c"
    explicit = CompilePool(workers=2, start=False)  # an argument beats the variable
    assert explicit.settings.workers == 2
    for p in (pool, explicit):
        p.shutdown()


# ---------------------------------------------------------------------------- scope()


def test_scope_overrides_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_JOB_TIMEOUT_S", "30")
    assert settings.current().job_timeout_s == 30.0
    with settings.scope(job_timeout_s=5.0, workers=2) as inside:
        assert inside.job_timeout_s == 5.0
        assert inside.workers == 2
        assert settings.current().job_timeout_s == 5.0
        pool = CompilePool(start=False)
        assert pool.settings.job_timeout_s == 5.0
        assert pool.settings.workers == 2
        pool.shutdown()
        with settings.scope(job_timeout_s=1.0):
            assert settings.current().job_timeout_s == 1.0
            assert settings.current().workers == 2  # outer layer still applies
        assert settings.current().job_timeout_s == 5.0
    assert settings.current().job_timeout_s == 30.0
    assert settings.current().workers == Settings().workers


def test_scope_restores_after_exception() -> None:
    default = settings.current().zygote_restarts
    seen: list[int] = []

    def failing_block() -> None:
        with settings.scope(zygote_restarts=9):
            seen.append(settings.current().zygote_restarts)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing_block()
    assert seen == [9]
    assert settings.current().zygote_restarts == default


def test_scope_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with settings.scope(workers=4):
        monkeypatch.setenv("KILN_WORKERS", "6")
        assert settings.current().workers == 4
    assert settings.current().workers == 6


def test_scope_unknown_setting_raises() -> None:
    with pytest.raises(SettingsError, match="worker_count") as info, settings.scope(worker_count=2):
        pass  # pragma: no cover
    assert "workers" in str(info.value)  # lists the known ones
    assert settings.current() == settings.from_env()  # nothing was left applied


def test_nested_equal_scopes_restore_in_order() -> None:
    with settings.scope(workers=2):
        with settings.scope(workers=3):
            with settings.scope(workers=2):
                assert settings.current().workers == 2
            assert settings.current().workers == 3
        assert settings.current().workers == 2


def test_every_variable_is_in_the_settings_page() -> None:
    # docs/SETTINGS.md is where users look; a variable missing there is undocumented
    page = (Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md").read_text()
    missing = [var for var in settings.variables().values() if f"| `{var}` |" not in page]
    assert not missing, f"regenerate docs/SETTINGS.md (python -m triton_kiln.settings_page): {missing}"

"""Nothing of kiln's is held where nothing tunes, and what a tuning started goes once idle.

Each case runs in a fresh process (tests/support/footprint_child.py) on a machine kiln is told has a GPU
(the only fake, with the benchmark's timings); compiles are real (``sm_90``), the pool and its
zygote are real, and every process the child starts is recorded through Python's audit hooks
(``subprocess.Popen``, ``os.fork``, ``os.posix_spawn``) and counted with psutil.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import triton_kiln as kiln
from support.basics import SM90, add_request, pool_processes, wait_no_processes
from support.kernels import scale_kernel
from triton_kiln import settings
from triton_kiln.pool import CompilePool
from triton_kiln.sandbox import registry

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

pytestmark = pytest.mark.timeout(300)


def child(mode: str, tmp_path: Path, db: Path | None = None, **env: str) -> dict[str, Any]:
    """Run footprint_child.py ``mode`` on a cache of ``tmp_path``; its report."""
    environ = dict(os.environ)
    environ.update(
        PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS)]),
        KILN_CACHE_DIR=str(tmp_path / "cache"),
        TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
        KILN_WORKERS="2",
        KILN_PROGRESS="0",
        **env,
    )
    db = db or tmp_path / "tuning.sqlite3"
    environ.setdefault("KILN_TUNING_DB", str(db))  # install()'s database is the kernel's
    out = subprocess.run(
        [sys.executable, str(TESTS / "support" / "footprint_child.py"), mode, str(db)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
        check=False,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, f"{mode}: no report (exit {out.returncode}):\n{out.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(line[len("REPORT ") :])
    return report


def test_a_database_only_process_starts_no_process(tmp_path: Path) -> None:
    tuned = child("tune", tmp_path)
    assert tuned["loaded_from"] is None
    assert tuned["best"] == {"BLOCK": 128}
    assert tuned["pool_started"], "the tuning's first miss did not start the pool"
    served = child("db", tmp_path)
    assert served["loaded_from"] == "database"
    assert served["best"] == {"BLOCK": 128}
    assert served["children"] == [], f"a process served from the database started {served['children']}"
    assert served["started"] == [], f"a process served from the database ran {served['started']}"
    assert not served["pool_started"]
    assert served["sandboxes"] == 0


def test_with_the_program_record_a_database_only_process_still_starts_no_process(tmp_path: Path) -> None:
    record = {"KILN_TEST_INSTALL": "1", "KILN_PROGRAM_RECORD": "1"}
    tuned = child("tune", tmp_path, **record)
    assert tuned["loaded_from"] is None
    assert list((tmp_path / "cache" / "programs").glob("*.json")), "install() kept no program record"
    served = child("db", tmp_path, **record)  # every recorded compile is cached: nothing to start
    assert served["loaded_from"] == "database"
    assert served["children"] == [], f"a process served from the database started {served['children']}"
    assert served["started"] == [], f"a process served from the database ran {served['started']}"
    assert not served["pool_started"]
    assert served["sandboxes"] == 0


def test_idle_release_then_a_later_tuning_still_works(tmp_path: Path) -> None:
    report = child("idle", tmp_path, KILN_IDLE_S="0.5")
    assert report["children_after_call"], "the tuning ran no process: nothing to release"
    assert report["children_after_idle"] == [], "the pool's processes outlived KILN_IDLE_S"
    assert report["idle_releases"] >= 1
    assert report["second_loaded_from"] is None
    assert report["second_best"] == {"BLOCK": 128}
    assert report["idle_restarts"] == 1  # the second tuning's compiles started a new zygote
    assert len(report["zygote_ready_s"]) == 2  # the restart's cost: its zygote's start-up


def test_install_and_decorating_liger_and_fla_start_nothing(tmp_path: Path) -> None:
    """On a cache that has tuned (the state of every process after a machine's first), whatever
    the database holds for these kernels."""
    if importlib.util.find_spec("liger_kernel") is None and importlib.util.find_spec("fla") is None:
        pytest.skip("neither liger-kernel nor fla-core is installed")
    record_a_run(tmp_path / "tuning.sqlite3")
    report = child("decorate", tmp_path)
    assert report["modules"], "no library module imported"
    assert report["kernels"] > 50, report
    assert report["started"] == [], f"install() and decorating ran {report['started']}"
    assert report["children"] == []
    assert not report["launcher_loaded"], "decorating loaded (or built) kiln's C launcher"
    assert report["sandboxes"] == 0


def test_install_computes_a_missing_triton_key_in_a_thread_and_only_once(tmp_path: Path) -> None:
    """A fresh cache has no Triton key: install() has it computed while the caller imports (a
    thread, no process), so a tuning's first miss does not wait for it; a later process finds
    it kept and starts nothing."""
    first = child("decorate", tmp_path, KILN_PREWARM="0")
    assert first["key_ahead"][0] == "kiln-key", first["key_ahead"]
    assert all(t is None for t in first["key_ahead"][1:]), "the key was looked up more than once"
    assert first["key_kept"]
    assert first["started"] == []
    assert first["children"] == []
    later = child("decorate", tmp_path, KILN_PREWARM="0")
    assert later["key_ahead"]
    assert all(t is None for t in later["key_ahead"]), later["key_ahead"]
    assert later["started"] == []


def record_a_run(path: Path) -> None:
    """A tuning database at ``path`` holding one finished run: a cache that has tuned."""
    from triton_kiln.tuning import TuningDatabase

    with TuningDatabase(path) as database:
        run = database.begin_run("k", "0" * 64, "[]", "NVIDIA H100", "9.0", "3.6.0", None)
        database.finish_run(run, None, 1.0, 0.5)


@pytest.mark.parametrize(
    ("prewarm", "cache", "started"),
    [
        ("1", "tuned", True),  # asked for: a process that will tune
        (None, "fresh", True),  # auto: nothing kiln could read holds a result, the first call tunes
        (None, "empty database", True),
        (None, "tuned", False),  # auto: results may serve every call, so nothing starts
        (None, "fresh, remote cache", False),  # results may come from the remote store
        (None, "compiled before, nothing tuned", False),  # torch.compile's kernels through kiln
        ("0", "fresh", False),
    ],
)
def test_the_pool_starts_at_install_where_kiln_prewarm_says(
    tmp_path: Path, prewarm: str | None, cache: str, started: bool, make_pool: Callable[..., CompilePool]
) -> None:
    """Where a tuning is expected the pool and the sandbox start at install (the sandbox, which
    holds GPU memory, closes when idle if none comes); elsewhere nothing starts."""
    env = {"FOOTPRINT_LIBRARIES": "0"}  # install() decides; the libraries' import is another test's
    if prewarm is not None:
        env["KILN_PREWARM"] = prewarm
    if cache == "tuned":
        record_a_run(tmp_path / "tuning.sqlite3")
    elif cache == "empty database":
        from triton_kiln.tuning import TuningDatabase

        TuningDatabase(tmp_path / "tuning.sqlite3").close()
    elif cache == "compiled before, nothing tuned":
        make_pool(cache_dir=tmp_path / "cache", workers=1).compile(add_request(block=64))
    elif cache == "fresh, remote cache":
        env["KILN_REMOTE_CACHE"] = "redis://127.0.0.1:9/0"  # never reached: install() connects nowhere
    report = child("decorate", tmp_path, **env)
    assert report["prewarm_started"] is started
    assert report["sandboxes"] == int(started)
    if started:
        assert report["pool_ready"]
        assert report["children_prewarmed"], "the prewarmed pool started no process"
        assert report["launcher_loaded"], "the first call would load (or build) kiln's launcher itself"
    else:
        assert report["children"] == [], f"install() started {report['children']}"
        assert report["started"] == []


def test_nothing_tuned_reads_the_kernels_database_without_changing_it(tmp_path: Path) -> None:
    from triton_kiln.autotuner.prewarm import nothing_tuned
    from triton_kiln.tuning import TuningDatabase

    path = tmp_path / "tuning.sqlite3"
    with settings.scope(cache_dir=tmp_path, tuning_db=path, remote_cache=None):
        current = settings.current()
        assert nothing_tuned(current)
        assert not path.exists()  # looked, created nothing
        assert nothing_tuned(current, database=False)  # no database: every process tunes
        TuningDatabase(path).close()
        assert nothing_tuned(current)
        record_a_run(path)
        assert not nothing_tuned(current)
        other = tmp_path / "other.sqlite3"
        assert nothing_tuned(current, database=TuningDatabase(other))  # the kernel's own
        assert not nothing_tuned(current, database=object())  # a database of no file: cannot tell
    with settings.scope(cache_dir=tmp_path, tuning_db=tmp_path / "garbage.sqlite3"):
        (tmp_path / "garbage.sqlite3").write_bytes(b"not a database" * 100)
        assert not nothing_tuned(settings.current())  # cannot look inside: counts as tuned


def test_the_pool_gives_back_its_processes_when_idle(tmp_path: Path) -> None:
    with settings.scope(idle_s=0.3):
        pool = CompilePool(workers=1, cache_dir=tmp_path / "cache", use_disk_cache=False)
    try:
        pool.submit(add_request(64)).result(timeout=180)
        assert not wait_no_processes(pool.pool_id, timeout=30), "the zygote outlived KILN_IDLE_S"
        deadline = time.monotonic() + 30
        while pool.zygote_pid is not None and time.monotonic() < deadline:  # the manager's bookkeeping
            time.sleep(0.05)
        assert pool.stats.idle_releases == 1
        assert pool.zygote_pid is None
        artifact = pool.submit(add_request(128)).result(timeout=180)  # a real compile again
        assert artifact.binary[:4] == b"\x7fELF"
        assert pool.stats.idle_restarts == 1
        assert len(pool.stats.zygote_ready_s) == 2
        assert pool.wait_ready(timeout=120)  # after a release too: it starts again
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    assert not wait_no_processes(pool.pool_id)


def test_a_busy_pool_is_not_released(tmp_path: Path) -> None:
    """Idle means no job queued or running: a compile longer than KILN_IDLE_S keeps its zygote."""
    with settings.scope(idle_s=0.05):
        pool = CompilePool(workers=1, cache_dir=tmp_path / "cache", use_disk_cache=False)
    try:
        futures = [pool.submit(add_request(b, target=SM90)) for b in (32, 64, 128, 256)]
        for future in futures:
            future.result(timeout=180)
        assert pool.stats.compiled == 4
        assert pool.stats.worker_deaths == 0
        assert pool.stats.idle_restarts == 0  # no release while jobs waited
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def test_idle_zero_releases_at_once_and_the_default_keeps_the_pool(tmp_path: Path) -> None:
    assert settings.current().idle_s == 30.0
    with settings.scope(idle_s=0.0):
        pool = CompilePool(workers=1, cache_dir=tmp_path / "cache", use_disk_cache=False)
    try:
        pool.submit(add_request(64)).result(timeout=180)
        assert not wait_no_processes(pool.pool_id, timeout=10)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    kept = CompilePool(workers=1, cache_dir=tmp_path / "cache2", use_disk_cache=False)
    try:
        kept.submit(add_request(64)).result(timeout=180)
        time.sleep(1.5)
        assert pool_processes(kept.pool_id), "the default KILN_IDLE_S released the pool at once"
    finally:
        kept.shutdown(wait=True, cancel_futures=True)


class _Sandbox:
    """Stands in for the GPU's sandbox process in the registry (its pid, its close)."""

    def __init__(self) -> None:
        self.pid: int | None = 1
        self.closed = 0

    def close(self) -> None:
        self.pid = None
        self.closed += 1


def test_the_sandbox_closes_once_no_run_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = _Sandbox()
    monkeypatch.setitem(registry._SANDBOXES, 7, sandbox)
    registry.hold(7)
    registry.hold(7)  # two runs on device 7
    registry.release_later(7, 0.2)
    time.sleep(0.5)
    assert sandbox.closed == 0, "closed while a run still held it"
    registry.release_later(7, 0.2)
    deadline = time.monotonic() + 10
    while not sandbox.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.closed == 1
    sandbox.pid = 2  # a later run started it again; it holds it, then a run starts before the timer
    registry.hold(7)
    registry.release_later(7, 0.3)
    registry.hold(7)
    time.sleep(0.6)
    assert sandbox.closed == 1, "a run that started within KILN_IDLE_S lost its sandbox"
    registry.release_later(7, 0.0)  # 0: at once
    assert sandbox.closed == 2


def _ahead_on(monkeypatch: pytest.MonkeyPatch, device: int, sandbox: _Sandbox) -> None:
    """``prestart_ahead`` on a machine that says it has a GPU, torch's CUDA not initialized, and
    ``sandbox`` standing in for ``device``'s (started: ``prestart`` returns it)."""
    monkeypatch.setitem(registry._SANDBOXES, device, sandbox)
    monkeypatch.setattr(registry, "default_device", lambda: device)
    monkeypatch.setattr(registry, "prestart", lambda device=None: sandbox)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def test_a_sandbox_started_ahead_closes_when_no_run_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = _Sandbox()
    _ahead_on(monkeypatch, 8, sandbox)
    with settings.scope(idle_s=0.2):
        assert registry.prestart_ahead() is sandbox
    deadline = time.monotonic() + 10
    while not sandbox.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.closed == 1, "a sandbox started ahead stayed with no run to use it"


def test_a_run_keeps_the_sandbox_started_ahead_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = _Sandbox()
    _ahead_on(monkeypatch, 9, sandbox)
    with settings.scope(idle_s=0.3):
        registry.prestart_ahead()
    registry.hold(9)  # the first miss: its run takes the warm sandbox
    time.sleep(0.6)
    assert sandbox.closed == 0, "the run lost the sandbox started ahead of it"
    registry.release_later(9, 0.0)
    assert sandbox.closed == 1


def test_no_sandbox_starts_ahead_for_a_rank_before_its_device_is_chosen_or_with_idle_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sandbox = _Sandbox()
    _ahead_on(monkeypatch, 10, sandbox)
    monkeypatch.setenv("LOCAL_RANK", "3")  # torchrun's rank 3 will pick its device later
    assert registry.prestart_ahead() is None
    monkeypatch.delenv("LOCAL_RANK")
    with settings.scope(idle_s=0.0):  # 0: nothing held that no run asked for
        assert registry.prestart_ahead() is None
    assert 10 not in registry._RELEASES


def test_a_sandbox_that_fails_to_start_is_not_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose sandbox cannot start has no bencher to end: the hold it took is given back
    at once, so the device's sandbox can still be released when idle."""
    torch = pytest.importorskip("torch")
    from triton_kiln.autotuner import bench

    def no_sandbox(device: int) -> Any:
        raise RuntimeError("the sandbox could not start")

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 7)
    monkeypatch.setattr(bench, "shared_sandbox", no_sandbox)
    monkeypatch.setitem(registry._RUNS, 7, 0)
    tuner = kiln.autotune([kiln.Config({"BLOCK": 64})], key=["n"], target="cuda:90")(scale_kernel)
    with pytest.raises(RuntimeError, match="could not start"):
        bench.SandboxBencher(tuner._plan, tuner._services, (), {})
    assert registry._RUNS[7] == 0, "the failed run still holds the device's sandbox"


BENCH = TESTS.parent / "bench"


def test_bench_footprint_plans_without_a_gpu_and_writes_nothing_without_one(tmp_path: Path) -> None:
    plan = subprocess.run(
        [sys.executable, str(BENCH / "footprint.py"), "--dry-run"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert plan.returncode == 0, plan.stderr
    assert "kiln inductor_warm" in plan.stdout
    out = tmp_path / "footprint.json"
    refused = subprocess.run(
        [sys.executable, str(BENCH / "footprint.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "needs a GPU" in refused.stderr
    assert not out.exists()


def test_bench_import_cost_figures(tmp_path: Path) -> None:
    """The import and decoration cost, with kiln and without (figures, not a timing assertion)."""
    out = tmp_path / "import_cost.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "import_cost.py"), "--repeats", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    kiln, stock = result["arms"]["kiln"], result["arms"]["triton"]
    assert kiln["started"] == []
    assert kiln["launcher_loaded"] is False
    assert kiln["import_s"] > 0
    assert stock["import_s"] > 0
    if kiln["modules"]:
        assert kiln["kiln_kernels"] > 0
    print(done.stderr.strip().splitlines()[-1])  # the figures, in the test's output


def test_kiln_report_shows_the_gpu_memory_a_run_held(tmp_path: Path) -> None:
    from triton_kiln.tuning import TuningDatabase, format_table
    from triton_kiln.tuning.results import ConfigResult

    with TuningDatabase(tmp_path / "tuning.sqlite3") as db:
        identity = {"kernel_key": "k" * 64, "key_repr": "{}", "device_name": "GPU", "capability": "9.0"}
        run_id = db.begin_run(kernel="dyt", default_label="A", triton_version="3.6.0", **identity)
        db.record(run_id, ConfigResult(label="A", config={}, status="ok", runtime_ms=1.0))
        db.finish_run(run_id, "A", 2.0, 0.5, gpu_peak_bytes=1700 << 20)
        run = db.runs("dyt")[0]
    assert run.gpu_peak_bytes == 1700 << 20
    assert "kiln's GPU memory: at most 1,700 MiB in its sandbox" in format_table(run)

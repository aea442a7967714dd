"""The tuning database and its records: round trips, lookup rules, resuming, a SIGKILLed writer,
concurrent processes and threads, and the schema version.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from triton_kiln import settings
from triton_kiln.errors import KilnError
from triton_kiln.tuning import (
    SCHEMA_VERSION,
    STATUSES,
    ConfigResult,
    TuningDatabase,
    TuningDatabaseError,
    TuningRun,
    default_database_path,
)

pytestmark = pytest.mark.timeout(60)

IDENTITY: dict[str, str] = {
    "kernel_key": "a" * 64,
    "key_repr": '{"M": 4096, "N": 4096}',
    "device_name": "NVIDIA H100 80GB HBM3",
    "capability": "9.0",
    "triton_version": "3.6.0",
}


def config(block: int = 64, warps: int = 4) -> dict[str, Any]:
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": 3, "num_ctas": 1, "maxnreg": None}


def ok(label: str, runtime_ms: float = 1.0, **kwargs: Any) -> ConfigResult:
    fields: dict[str, Any] = {
        "compile_s": 1.5,
        "runtime_ms": runtime_ms,
        "runtime_ms_p20": runtime_ms * 0.9,
        "runtime_ms_p80": runtime_ms * 1.1,
        "max_abs_diff": 0.0,
        "artifact_key": "b" * 64,
    }
    fields.update(kwargs)
    return ConfigResult(label, config(), "ok", **fields)


def begin(db: TuningDatabase, kernel: str = "matmul", default_label: str | None = "A", **changes: str) -> int:
    return db.begin_run(kernel=kernel, default_label=default_label, **{**IDENTITY, **changes})


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "tuning.sqlite3"


@pytest.fixture
def db(db_path: Path) -> Any:
    with TuningDatabase(db_path) as database:
        yield database


# ---------------------------------------------------------------------------- records


def test_config_result_json_round_trip() -> None:
    results = [
        ok("A", 2.0),
        ConfigResult("B", config(128), "compile_error", reason="out of shared memory", compile_s=0.3),
        ConfigResult("C", config(), "wrong_output", runtime_ms=1.0, max_abs_diff=math.inf),
        ConfigResult("D", config(), "pruned"),
    ]
    for result in results:
        text = json.dumps(result.to_json(), allow_nan=False)  # strict JSON, even with inf
        assert ConfigResult.from_json(json.loads(text)) == result
    assert ConfigResult.from_json(results[2].to_json()).max_abs_diff == math.inf


def test_status_is_validated() -> None:
    for status in STATUSES:
        ConfigResult("A", config(), status)
    with pytest.raises(ValueError, match="unknown status 'exploded'") as info:
        ConfigResult("A", config(), "exploded")
    for status in STATUSES:
        assert status in str(info.value)


def test_unstorable_values_are_refused_or_normalised() -> None:
    with pytest.raises(ValueError, match="JSON-serialisable"):
        ConfigResult("A", {"kwargs": {"dtype": object()}}, "ok")
    with pytest.raises(ValueError, match="runtime_ms is NaN"):
        ConfigResult("A", config(), "ok", runtime_ms=math.nan)
    # Outputs with NaN give a NaN difference: kept as inf (SQLite would turn NaN into NULL).
    assert ConfigResult("A", config(), "wrong_output", max_abs_diff=math.nan).max_abs_diff == math.inf
    with pytest.raises(ValueError, match="not a ConfigResult record: the key 'status' is missing"):
        ConfigResult.from_json({"label": "A", "config": {}})


def test_tuning_run_round_trip_and_properties() -> None:
    run = TuningRun(
        kernel="matmul",
        results=(ok("A", 2.0), ok("B", 1.0), ConfigResult("C", config(), "timeout", reason="10 s")),
        best_label="B",
        default_label="A",
        started_at=1700000000.5,
        wall_s=12.5,
        first_result_s=0.25,
        **IDENTITY,
    )
    assert run.best == ok("B", 1.0)
    assert run.default == ok("A", 2.0)
    assert [r.label for r in run.ok_results] == ["A", "B"]
    assert TuningRun.from_json(json.loads(json.dumps(run.to_json(), allow_nan=False))) == run
    with pytest.raises(ValueError, match="appears twice"):
        TuningRun(
            kernel="k", results=(ok("A"), ok("A")), best_label=None, default_label=None, started_at=0.0,
            **IDENTITY,
        )  # fmt: skip
    with pytest.raises(ValueError, match="best_label 'Z'"):
        TuningRun(
            kernel="k", results=(ok("A"),), best_label="Z", default_label=None, started_at=0, **IDENTITY
        )


# ---------------------------------------------------------------------------- database basics


def test_database_round_trip(db: TuningDatabase, db_path: Path) -> None:
    results = [
        ok("A", 2.0),
        ok("B", 1.0, max_abs_diff=1e-6),
        ConfigResult("C", config(256, 8), "out_of_resources", reason="shared memory 300000 > 232448"),
        ConfigResult("D", config(), "wrong_output", compile_s=2.0, runtime_ms=0.5, max_abs_diff=math.inf),
        ConfigResult("E", config(), "pruned", reason="estimated slower"),
    ]
    before = time.time()
    run_id = begin(db)
    for result in results:
        db.record(run_id, result)
    db.finish_run(run_id, "B", wall_s=12.5, first_result_s=0.75)

    for database in (db, TuningDatabase(db_path)):  # and a fresh connection, as another process would
        run = database.lookup(**IDENTITY)
        assert run is not None
        assert run.results == tuple(results)  # every field, in recorded order
        assert (run.kernel, run.best_label, run.default_label) == ("matmul", "B", "A")
        assert (run.wall_s, run.first_result_s, run.run_id) == (12.5, 0.75, run_id)
        assert {k: getattr(run, k) for k in IDENTITY} == IDENTITY
        assert before <= run.started_at <= run.finished_at <= time.time()  # type: ignore[operator]
        assert run.best == results[1]
    assert integrity(db_path) == "ok"


def test_lookup_returns_latest_finished_run_only(db: TuningDatabase) -> None:
    first = begin(db)
    db.record(first, ok("A", 2.0))
    db.finish_run(first, "A", 1.0, 0.1)
    second = begin(db)
    db.record(second, ok("A", 2.0))
    db.record(second, ok("B", 1.0))
    db.finish_run(second, "B", 1.0, 0.1)
    third = begin(db)  # unfinished, newer than both: never returned
    db.record(third, ok("C", 0.1))

    run = db.lookup(**IDENTITY)
    assert run is not None
    assert run.run_id == second
    assert run.best_label == "B"
    assert [r.label for r in run.results] == ["A", "B"]


def test_unfinished_run_alone_is_not_returned(db: TuningDatabase) -> None:
    run_id = begin(db)
    db.record(run_id, ok("A"))
    assert db.lookup(**IDENTITY) is None
    db.finish_run(run_id, "A", 1.0, 0.1)
    assert db.lookup(**IDENTITY) is not None


@pytest.mark.parametrize("field", list(IDENTITY))
def test_lookup_needs_the_exact_identity(db: TuningDatabase, field: str) -> None:
    run_id = begin(db)
    db.record(run_id, ok("A"))
    db.finish_run(run_id, "A", 1.0, 0.1)
    assert db.lookup(**IDENTITY) is not None
    other = {**IDENTITY, field: IDENTITY[field] + "-other"}
    assert db.lookup(**other) is None


def test_record_replaces_a_label_and_guards_runs(db: TuningDatabase) -> None:
    run_id = begin(db)
    db.record(run_id, ok("A", 2.0))
    db.record(run_id, ok("B", 3.0))
    db.record(run_id, ok("A", 1.5))  # measured again: replaced, keeps its place
    assert [(r.label, r.runtime_ms) for r in db.runs()[0].results] == [("A", 1.5), ("B", 3.0)]
    assert len(db.runs()[0].results) == 2
    with pytest.raises(TuningDatabaseError, match="no result with that label"):
        db.finish_run(run_id, "Z", 1.0, 0.1)
    db.finish_run(run_id, "A", 1.0, 0.1)
    with pytest.raises(TuningDatabaseError, match="already finished"):
        db.record(run_id, ok("C"))
    with pytest.raises(TuningDatabaseError, match="already finished"):
        db.finish_run(run_id, "A", 1.0, 0.1)
    with pytest.raises(TuningDatabaseError, match="run 999 does not exist"):
        db.record(999, ok("C"))
    run = db.lookup(**IDENTITY)
    assert run is not None
    assert [(r.label, r.runtime_ms) for r in run.results] == [("A", 1.5), ("B", 3.0)]


def test_runs_lists_newest_first(db: TuningDatabase) -> None:
    ids = []
    for kernel in ("matmul", "softmax", "matmul", "softmax"):
        run_id = begin(db, kernel=kernel)
        db.record(run_id, ok("A"))
        ids.append(run_id)
    db.finish_run(ids[0], "A", 1.0, 0.1)
    assert [r.run_id for r in db.runs()] == ids[::-1]
    assert [r.run_id for r in db.runs(limit=2)] == ids[:1:-1]
    matmul = db.runs("matmul")
    assert [r.run_id for r in matmul] == [ids[2], ids[0]]
    assert [r.finished for r in matmul] == [False, True]
    assert all(len(r.results) == 1 for r in matmul)
    assert db.runs("nothing") == []


def test_default_path_and_closing(tmp_path: Path) -> None:
    assert default_database_path(settings.Settings(cache_dir=tmp_path)) == tmp_path / "tuning.sqlite3"
    with settings.scope(cache_dir=tmp_path / "scoped"):
        with TuningDatabase() as database:
            assert database.path == tmp_path / "scoped" / "tuning.sqlite3"
            begin(database)
        assert (tmp_path / "scoped" / "tuning.sqlite3").is_file()
    with pytest.raises(TuningDatabaseError, match="is closed"):
        database.runs()
    database.close()  # idempotent


def test_database_uses_wal(db: TuningDatabase, db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


# ---------------------------------------------------------------------------- schema version


def test_newer_schema_version_is_refused(db_path: Path) -> None:
    TuningDatabase(db_path).close()
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    with pytest.raises(TuningDatabaseError) as info:
        TuningDatabase(db_path)
    message = str(info.value)
    assert isinstance(info.value, KilnError)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert "newer kiln" in message
    assert "Upgrade kiln" in message
    assert str(db_path) in message


# The tables exactly as schema version 1 (kiln before the time split) created them.
_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kernel TEXT NOT NULL, kernel_key TEXT NOT NULL,
    key_repr TEXT NOT NULL, device_name TEXT NOT NULL, capability TEXT NOT NULL,
    triton_version TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL, wall_s REAL,
    first_result_s REAL, best_label TEXT, default_label TEXT
);
CREATE INDEX runs_identity
    ON runs (kernel_key, key_repr, device_name, capability, triton_version, finished_at);
CREATE INDEX runs_kernel ON runs (kernel);
CREATE TABLE configs (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, label TEXT NOT NULL,
    config_json TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, compile_s REAL, runtime_ms REAL,
    runtime_ms_p20 REAL, runtime_ms_p80 REAL, max_abs_diff REAL, artifact_key TEXT,
    recorded_at REAL NOT NULL, UNIQUE (run_id, label)
);
INSERT INTO meta (key, value) VALUES ('schema_version', '1');
"""


def write_v1_database(path: Path) -> None:
    """A version-1 file with one finished run (A and B, B best), as the old kiln wrote it."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(_V1_SCHEMA)
        conn.execute("PRAGMA journal_mode = WAL")
        with conn:
            conn.execute(
                "INSERT INTO runs (kernel, kernel_key, key_repr, device_name, capability, triton_version, "
                "started_at, finished_at, wall_s, first_result_s, best_label, default_label) "
                "VALUES ('matmul', ?, ?, ?, ?, ?, 1700000000.0, 1700000012.5, 12.5, 0.75, 'B', 'A')",
                tuple(IDENTITY.values()),
            )
            for label, ms in (("A", 2.0), ("B", 1.0)):
                conn.execute(
                    "INSERT INTO configs (run_id, label, config_json, status, compile_s, runtime_ms, "
                    "recorded_at) VALUES (1, ?, ?, 'ok', 1.5, ?, 1700000001.0)",
                    (label, json.dumps(config()), ms),
                )
    finally:
        conn.close()


def schema_version_of(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    finally:
        conn.close()


def test_split_round_trips_and_older_runs_have_none(db: TuningDatabase, db_path: Path) -> None:
    split = {"sandbox_wait_s": 0.0, "compile_s": 1.1, "bench_s": 3.2, "final_s": 1.8, "other_s": 1.3}
    without = begin(db, kernel="without")
    db.record(without, ok("A"))
    db.finish_run(without, "A", 1.0, 0.1)
    with_split = begin(db, kernel="with")
    db.record(with_split, ok("A"))
    db.finish_run(with_split, "A", 7.4, 0.1, split=split)
    with TuningDatabase(db_path) as fresh:
        assert fresh.runs("with")[0].split == split
        assert fresh.runs("without")[0].split is None
    run = db.runs("with")[0]
    assert TuningRun.from_json(json.loads(json.dumps(run.to_json(), allow_nan=False))) == run
    for bad in ({"bench_s": math.nan}, {"bench_s": "fast"}, {"bench_s": True}, [1.0]):
        with pytest.raises(ValueError, match="split"):
            dataclasses.replace(run, split=bad)  # type: ignore[arg-type]


def test_version_1_database_is_migrated_and_stays_readable(db_path: Path) -> None:
    write_v1_database(db_path)
    assert schema_version_of(db_path) == 1
    with TuningDatabase(db_path) as db:
        old = db.lookup(**IDENTITY)
        assert old is not None  # the old run is still found, with everything it had
        assert (old.best_label, old.default_label, old.wall_s, old.first_result_s) == ("B", "A", 12.5, 0.75)
        assert [(r.label, r.runtime_ms) for r in old.results] == [("A", 2.0), ("B", 1.0)]
        assert old.split is None
        assert old.gpu_peak_bytes is None
        assert schema_version_of(db_path) == SCHEMA_VERSION == 5
        run_id = begin(db, kernel="new")  # and new runs store their split in the migrated file
        db.record(run_id, ok("A"))
        db.finish_run(run_id, "A", 2.0, 0.5, split={"bench_s": 1.0}, gpu_peak_bytes=3 << 30)
    with TuningDatabase(db_path) as db:  # opening it again: already current, nothing to do
        assert db.runs("new")[0].split == {"bench_s": 1.0}
        assert db.runs("new")[0].gpu_peak_bytes == 3 << 30
        assert db.lookup(**IDENTITY) is not None
    assert integrity(db_path) == "ok"

    conn = sqlite3.connect(db_path)  # a newer version than this kiln's is still refused
    with conn:
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(TuningDatabaseError, match=r"schema version 6.*newer kiln"):
        TuningDatabase(db_path)


def test_a_read_only_database_reads_and_never_writes(db_path: Path) -> None:
    """``read_only=True`` (``kiln report``): a version-1 file is read as migrated, in memory, and
    left as it was; writes are refused in words; a missing file is not created."""
    write_v1_database(db_path)
    before = db_path.read_bytes()
    with TuningDatabase(db_path, read_only=True) as db:
        assert "read-only" in repr(db)
        old = db.lookup(**IDENTITY)
        assert old is not None
        assert (old.best_label, old.split) == ("B", None)
        with pytest.raises(TuningDatabaseError, match=r"opened with read_only=True; open a TuningDatabase"):
            begin(db)
    assert db_path.read_bytes() == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]  # no -wal / -shm left
    assert schema_version_of(db_path) == 1
    missing = db_path.with_name("missing.sqlite3")
    with pytest.raises(TuningDatabaseError, match="no tuning database at"):
        TuningDatabase(missing, read_only=True)
    assert not missing.exists()


def test_migration_runs_once_when_many_open_a_version_1_file(db_path: Path) -> None:
    # Every opener sees version 1 at first; the write lock lets exactly one migrate (a second
    # ALTER TABLE would fail with "duplicate column name").
    write_v1_database(db_path)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            with TuningDatabase(db_path) as db:
                assert db.lookup(**IDENTITY) is not None
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert schema_version_of(db_path) == SCHEMA_VERSION


def test_a_version_without_migration_is_refused(db_path: Path) -> None:
    write_v1_database(db_path)
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(TuningDatabaseError, match="schema version 0, older than 5, and no migration"):
        TuningDatabase(db_path)
    assert schema_version_of(db_path) == 0  # left as it was


def test_damaged_schema_version_is_refused(db_path: Path) -> None:
    TuningDatabase(db_path).close()
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("UPDATE meta SET value = 'garbage' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(TuningDatabaseError, match=r"no valid schema_version.*'garbage'.*delete it"):
        TuningDatabase(db_path)


def test_files_that_are_not_tuning_databases_are_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not an SQLite file, not at all" * 100)
    with pytest.raises(TuningDatabaseError, match="not a kiln tuning database") as info:
        TuningDatabase(garbage)
    assert "delete" not in str(info.value)  # it may not be kiln's to delete
    other = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(other)
    with conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(TuningDatabaseError, match="not a kiln tuning database"):
        TuningDatabase(other)


# ---------------------------------------------------------------------------- durability

_KILLED_WRITER = """
import sys
from triton_kiln.tuning import ConfigResult, TuningDatabase

identity = {identity!r}
db = TuningDatabase(sys.argv[1])
run_id = db.begin_run(kernel="matmul", default_label="cfg0", **identity)
print("run", run_id, flush=True)
for i in range(1_000_000):
    config = {{"kwargs": {{"BLOCK": i}}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}}
    db.record(run_id, ConfigResult(f"cfg{{i}}", config, "ok", reason="x" * 2000, runtime_ms=1.0 + i))
    print("committed", i, flush=True)
"""


@pytest.mark.timeout(120)
def test_sigkilled_writer_loses_at_most_the_config_in_progress(db_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER.format(identity=IDENTITY), str(db_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    committed: list[int] = []
    try:
        first = child.stdout.readline()
        assert first.startswith("run "), first + child.stderr.read()  # type: ignore[union-attr]
        while len(committed) < 200:
            line = child.stdout.readline()
            assert line, "the writer exited early: " + child.stderr.read()  # type: ignore[union-attr]
            committed.append(int(line.split()[1]))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        rest = child.stdout.read()  # lines already in the pipe or in the reader's buffer
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    # only whole lines: the kill can cut the writer's last print short ("committed" with no number)
    whole = rest.split("\n")[:-1]
    committed += [int(line.split()[1]) for line in whole if line.startswith("committed ")]
    assert committed == list(range(len(committed)))

    assert integrity(db_path) == "ok"
    with TuningDatabase(db_path) as database:
        assert database.lookup(**IDENTITY) is None  # the run never finished
        (unfinished,) = database.runs()
        present = {r.label: r for r in unfinished.results}
        labels = {f"cfg{i}" for i in committed}
        assert labels <= set(present), f"committed but lost: {sorted(labels - set(present))}"
        assert set(present) - labels <= {f"cfg{len(committed)}"}  # at most the one in progress
        assert present["cfg7"].runtime_ms == 8.0
        # The file is fully usable afterwards.
        run_id = begin(database)
        database.record(run_id, ok("A"))
        database.finish_run(run_id, "A", 1.0, 0.1)
        assert database.lookup(**IDENTITY) is not None
    assert integrity(db_path) == "ok"


# ---------------------------------------------------------------------------- concurrency

_CONCURRENT_WRITER = """
import sys
from triton_kiln.tuning import ConfigResult, TuningDatabase

identity = {identity!r}
writer = int(sys.argv[2])
db = TuningDatabase(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
run_id = db.begin_run(kernel=f"kernel{{writer}}", default_label="cfg0", **identity)
for i in range(50):
    config = {{"kwargs": {{"BLOCK": i}}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}}
    db.record(run_id, ConfigResult(f"cfg{{i}}", config, "ok", runtime_ms=1.0 + i + writer / 10))
    # A reader between writes, as a tuner checking for a finished run would.
    db.lookup(**identity)
db.finish_run(run_id, "cfg0", 1.0, 0.1)
print("done", run_id, flush=True)
"""


@pytest.mark.timeout(120)
def test_concurrent_writer_processes(db_path: Path) -> None:
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT_WRITER.format(identity=IDENTITY), str(db_path), str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]  # all four create the fresh file at once
    try:
        for writer in writers:
            assert writer.stdout is not None
            assert writer.stdout.readline() == "ready\n", writer.communicate()[1]
        for writer in writers:  # then write all at once
            assert writer.stdin is not None
            writer.stdin.write("go\n")
            writer.stdin.flush()
        outputs = [writer.communicate(timeout=90) for writer in writers]
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert "locked" not in err
        assert writer.returncode == 0, err
        assert out.startswith("done"), err

    assert integrity(db_path) == "ok"
    with TuningDatabase(db_path) as database:
        runs = database.runs()
        assert len(runs) == 4
        assert sorted(r.kernel for r in runs) == [f"kernel{n}" for n in range(4)]
        for run in runs:
            n = int(run.kernel.removeprefix("kernel"))
            assert run.finished
            assert [r.label for r in run.results] == [f"cfg{i}" for i in range(50)]
            assert [r.runtime_ms for r in run.results] == [1.0 + i + n / 10 for i in range(50)]
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT count(*) FROM configs").fetchone()[0] == 200
    finally:
        conn.close()


def test_threads_share_one_database(db: TuningDatabase) -> None:
    errors: list[BaseException] = []
    run_ids: list[int] = []
    start = threading.Barrier(8)

    def work(n: int) -> None:
        try:
            start.wait()
            run_id = begin(db, kernel=f"kernel{n}")
            run_ids.append(run_id)
            for i in range(25):
                db.record(run_id, ok(f"cfg{i}", 1.0 + i))
                db.lookup(**IDENTITY)
            db.finish_run(run_id, "cfg0", 1.0, 0.1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    runs = db.runs()
    assert sorted(r.run_id for r in runs) == sorted(run_ids)  # type: ignore[type-var]
    assert all(r.finished and len(r.results) == 25 for r in runs)


def _forked_child(db: TuningDatabase, run_id: int, result: Any) -> None:
    inherited = db._conn
    db.record(run_id, ok("from-child"))
    result.value = 1 if db._conn is not inherited and db._conn is not None else 2


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_forked_child_opens_its_own_connection(db: TuningDatabase) -> None:
    run_id = begin(db)
    db.record(run_id, ok("A"))
    context = multiprocessing.get_context("fork")
    result = context.Value("i", 0)
    child = context.Process(target=_forked_child, args=(db, run_id, result))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert result.value == 1  # the child did not use the parent's SQLite connection
    assert [r.label for r in db.runs()[0].results] == ["A", "from-child"]


def test_screen_ms_round_trips_and_a_version_2_file_gains_it(db_path: Path) -> None:
    """Schema 3 keeps a finalist's screening time; a version-2 file (kiln before it) is migrated
    and its results read back with ``screen_ms=None``."""
    write_v1_database(db_path)
    with TuningDatabase(db_path) as db:  # 1 -> 5; now make it look as a version-2 kiln left it
        pass
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("ALTER TABLE configs DROP COLUMN screen_ms")
        conn.execute("DROP TABLE adoptions")
        conn.execute("ALTER TABLE runs DROP COLUMN gpu_peak_bytes")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.close()
    with TuningDatabase(db_path) as db:
        assert schema_version_of(db_path) == SCHEMA_VERSION == 5
        old = db.lookup(**IDENTITY)
        assert old is not None
        assert [r.screen_ms for r in old.results] == [None, None]
        run_id = begin(db, kernel="raced")
        db.record(run_id, ok("A", 1.2))
        db.record(run_id, dataclasses.replace(ok("A", 1.1), screen_ms=0.9))  # re-recorded after the race
        db.finish_run(run_id, "A", 2.0, 0.5)
    with TuningDatabase(db_path) as db:
        [result] = db.runs("raced")[0].results
        assert (result.runtime_ms, result.screen_ms) == (1.1, 0.9)
        assert ConfigResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert integrity(db_path) == "ok"

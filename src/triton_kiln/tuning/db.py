"""The tuning database: every autotuning run and every config it measured, in one SQLite file.

Default location: ``Settings.cache_dir / "tuning.sqlite3"`` (:func:`default_database_path`).

A run is written as it goes::

    with TuningDatabase(path) as db:
        run_id = db.begin_run(kernel, kernel_key, key_repr, device, "9.0", triton_version, default_label)
        for config in configs:
            db.record(run_id, measure(config))      # committed at once
        db.finish_run(run_id, best_label, wall_s, first_result_s, split={"bench_s": 3.2, ...})

and read back with :meth:`TuningDatabase.lookup`, which only ever returns a *finished* run
for exactly the same kernel identity, key, device, compute capability and Triton version.
``TuningDatabase(path, read_only=True)`` reads an existing file and never writes it (``kiln
report``): it works in a directory the user cannot write, leaves no -wal/-shm file behind, and
reads a file of an older schema as migrated without migrating the file
(:func:`~triton_kiln.tuning.schema.open_read_only`).

Crashes and restarts
    Each :meth:`~TuningDatabase.record` is its own committed transaction, so a process killed
    with SIGKILL loses at most the config it was measuring. Its run stays unfinished and is
    never returned by :meth:`~TuningDatabase.lookup` (:meth:`~TuningDatabase.runs` lists it).

    Commits use ``synchronous=NORMAL`` in WAL mode: a committed record survives the process
    being killed; after a power loss the last few commits may be lost, but the file is never
    corrupt.

Concurrency
    Several processes may use the same file at once: SQLite's file locks serialise writers,
    ``journal_mode=WAL`` lets readers go on while one writes, and every write transaction
    starts with ``BEGIN IMMEDIATE`` under a ``busy_timeout`` (30 s by default), so a writer
    waits for the lock instead of failing with "database is locked". WAL needs a local file
    system (not NFS).

    Within a process, a :class:`TuningDatabase` holds one connection shared by all threads,
    guarded by a lock: each method runs alone, so one thread's transaction never interleaves
    with another's. (Operations are short; a tuning run writes a row per config measured.) A
    process forked from one that had the database open gets a fresh connection on first use
    (SQLite connections must not cross ``fork``).

Schema
    Versioned by ``meta.schema_version`` (:data:`SCHEMA_VERSION`). A file written by an older
    kiln is migrated when opened (version 1 -> 2 adds ``runs.split_json``, the time split; its
    runs read back with ``split=None``; 2 -> 3 adds ``configs.screen_ms``, a finalist's
    screening time; older results read back with ``screen_ms=None``; 3 -> 4 adds ``adoptions``;
    4 -> 5 adds ``runs.gpu_peak_bytes``, older runs read back with ``None``); one written by a newer kiln
    raises :class:`TuningDatabaseError` instead of being misread.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from triton_kiln.settings import Settings, current
from triton_kiln.tuning.results import ConfigResult, TuningRun
from triton_kiln.tuning.schema import (
    DEFAULT_BUSY_TIMEOUT_S,
    SCHEMA_VERSION,
    TuningDatabaseError,
    database_error,
    open_connection,
    open_read_only,
    path_source,
    transaction,
)
from triton_kiln.tuning.writes import CONFIG_COLUMNS
from triton_kiln.tuning.writes import finish as _finish
from triton_kiln.tuning.writes import insert_result as _insert_result
from triton_kiln.tuning.writes import insert_run as _insert_run

__all__ = ["SCHEMA_VERSION", "TuningDatabase", "TuningDatabaseError", "default_database_path"]

DATABASE_FILENAME = "tuning.sqlite3"

_RUN_COLUMNS = (
    "id, kernel, kernel_key, key_repr, device_name, capability, triton_version, "
    "started_at, finished_at, wall_s, first_result_s, best_label, default_label, split_json, gpu_peak_bytes"
)
_CONFIG_COLUMNS = CONFIG_COLUMNS
_IDENTITY = "kernel_key = ? AND key_repr = ? AND device_name = ? AND capability = ? AND triton_version = ?"

# Connections inherited through fork() are abandoned, never closed or finalised in the child
# (closing would touch locks and shared memory that belong to the parent's connection).
_abandoned: list[sqlite3.Connection] = []


def default_database_path(settings: Settings | None = None) -> Path:
    """``KILN_TUNING_DB``, else ``cache_dir / "tuning.sqlite3"`` (of the settings in force by default)."""
    chosen = current() if settings is None else settings
    return chosen.tuning_db or chosen.cache_dir / DATABASE_FILENAME


def holds_runs(path: Path) -> bool | None:
    """Whether the database at ``path`` holds a finished tuning run; ``None`` where it cannot
    be read (missing, locked past a short wait, not a kiln database). Opens it read-only and
    creates nothing: a caller deciding whether to start work looks without side effects."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=0.2)
    except (sqlite3.Error, OSError, ValueError):
        return None
    try:
        row = conn.execute("SELECT EXISTS (SELECT 1 FROM runs WHERE finished_at IS NOT NULL)").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return bool(row[0])


class TuningDatabase:
    """Autotuning results in one SQLite file, safe for many threads and processes at once.

    ``path`` defaults to :func:`default_database_path`. Use as a context manager, or call
    :meth:`close`. See the module's documentation for the guarantees. ``read_only``: open an
    existing file for reading only (its writing methods raise :class:`TuningDatabaseError`).
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        read_only: bool = False,
    ):
        self.path = Path(path) if path is not None else default_database_path()
        self.source = path_source(self.path, given=path is not None)  # for messages: where it came from
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._closed = False
        with self._lock:
            self._conn = self._open()

    def _open(self) -> sqlite3.Connection:
        if self.read_only:
            return open_read_only(self.path, self.busy_timeout_s, self.source)
        return open_connection(self.path, self.busy_timeout_s, self.source)

    # -- connection ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self, action: str, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with SQLite errors turned into TuningDatabaseError."""
        with self._lock:
            if self._closed:
                raise TuningDatabaseError(
                    f"the tuning database {self.path} is closed; open a new TuningDatabase to {action}."
                )
            if write and self.read_only:
                raise TuningDatabaseError(
                    f"cannot {action} the tuning database {self.path}: it was opened with "
                    f"read_only=True; open a TuningDatabase without it to write."
                )
            if self._pid != os.getpid():  # forked: never use the parent's connection
                if self._conn is not None:
                    _abandoned.append(self._conn)
                self._conn = None
                self._pid = os.getpid()
            if self._conn is None:
                self._conn = self._open()
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise database_error(self.path, self.busy_timeout_s, action, exc, self.source) from exc

    def close(self) -> None:
        """Close the connection (idempotent). Later calls raise :class:`TuningDatabaseError`."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()
            elif conn is not None:
                _abandoned.append(conn)

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"TuningDatabase({str(self.path)!r}, {state}{', read-only' if self.read_only else ''})"

    # -- writing ------------------------------------------------------------------------------

    def begin_run(
        self,
        kernel: str,
        kernel_key: str,
        key_repr: str,
        device_name: str,
        capability: str,
        triton_version: str,
        default_label: str | None,
    ) -> int:
        """Start a run; returns its id, for :meth:`record` and :meth:`finish_run`."""
        identity = (kernel, kernel_key, key_repr, device_name, capability, triton_version)
        with self._connection("begin a run in", write=True) as conn, transaction(conn, immediate=True):
            return _insert_run(conn, identity, default_label)

    def record(self, run_id: int, result: ConfigResult) -> None:
        """Store one config's result, committed before returning.

        Recording a label twice in a run replaces the earlier result (keeping its place in
        the run's order). A finished run cannot be changed.
        """
        with self._connection("record a result in", write=True) as conn, transaction(conn, immediate=True):
            self._check_open_run(conn, run_id, f"record config {result.label!r}")
            _insert_result(conn, run_id, result)

    def finish_run(
        self,
        run_id: int,
        best_label: str | None,
        wall_s: float | None,
        first_result_s: float | None,
        *,
        split: Mapping[str, float] | None = None,
        gpu_peak_bytes: int | None = None,
    ) -> None:
        """Mark a run finished: from now on :meth:`lookup` may return it. ``best_label`` must be
        the label of a recorded result (or ``None`` when no config worked); ``split`` is
        :attr:`TuningRun.split` (where the wall time went), ``gpu_peak_bytes``
        :attr:`TuningRun.gpu_peak_bytes`."""
        with self._connection("finish a run in", write=True) as conn, transaction(conn, immediate=True):
            self._check_open_run(conn, run_id, "finish it")
            _finish(conn, run_id, best_label, wall_s, first_result_s, split, gpu_peak_bytes)

    def import_run(self, run: TuningRun) -> None:
        """Record ``run`` (finished elsewhere: a remote cache's) in one transaction, so a run that
        fails part-way (a bad best label, a full disk) leaves nothing behind, finished or not."""
        identity = (
            run.kernel,
            run.kernel_key,
            run.key_repr,
            run.device_name,
            run.capability,
            run.triton_version,
        )
        with self._connection("import a run into", write=True) as conn, transaction(conn, immediate=True):
            run_id = _insert_run(conn, identity, run.default_label)
            for result in run.results:
                _insert_result(conn, run_id, result)
            _finish(
                conn, run_id, run.best_label, run.wall_s, run.first_result_s, run.split, run.gpu_peak_bytes
            )

    def record_adoption(self, run_id: int, waited_s: float) -> None:
        """This process adopted finished run ``run_id`` after waiting ``waited_s`` for another
        process of the node to tune it (:mod:`triton_kiln.autotuner.node_tuning`); ``kiln report`` counts
        them."""
        with self._connection("record an adoption in", write=True) as conn, transaction(conn, immediate=True):
            conn.execute(
                "INSERT INTO adoptions (run_id, pid, host, waited_s, adopted_at) VALUES (?, ?, ?, ?, ?)",
                (run_id, os.getpid(), socket.gethostname(), waited_s, time.time()),
            )

    def _check_open_run(self, conn: sqlite3.Connection, run_id: int, what: str) -> None:
        row = conn.execute("SELECT finished_at FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise TuningDatabaseError(
                f"cannot {what}: run {run_id} does not exist in {self.path}; use the id that "
                f"begin_run() returned."
            )
        if row[0] is not None:
            raise TuningDatabaseError(
                f"cannot {what}: run {run_id} is already finished; begin a new run to measure again."
            )

    # -- reading ------------------------------------------------------------------------------

    def lookup(
        self, kernel_key: str, key_repr: str, device_name: str, capability: str, triton_version: str
    ) -> TuningRun | None:
        """The most recently finished run for exactly this identity, or ``None``.

        Unfinished runs (still going, or left by a process that died) are never returned.
        """
        identity = (kernel_key, key_repr, device_name, capability, triton_version)
        with self._connection("look up a run in") as conn, transaction(conn):
            row = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE {_IDENTITY} AND finished_at IS NOT NULL "
                "ORDER BY finished_at DESC, id DESC LIMIT 1",
                identity,
            ).fetchone()
            return None if row is None else self._run_from_row(conn, row)

    def runs(self, kernel: str | None = None, limit: int = 100) -> list[TuningRun]:
        """Runs, newest first (finished or not; see :attr:`TuningRun.finished`), optionally of one
        kernel; at most ``limit`` of them (a negative ``limit``: every one)."""
        with self._connection("list the runs in") as conn, transaction(conn):
            if kernel is None:
                rows = conn.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT ?", (limit,)
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE kernel = ? ORDER BY id DESC LIMIT ?",
                    (kernel, limit),
                ).fetchall()
            return [self._run_from_row(conn, row) for row in rows]

    def _results(self, conn: sqlite3.Connection, run_id: int) -> list[ConfigResult]:
        rows = conn.execute(
            f"SELECT {_CONFIG_COLUMNS} FROM configs WHERE run_id = ? ORDER BY rowid", (run_id,)
        ).fetchall()
        return [self._result_from_row(row, f"run {run_id}") for row in rows]

    def _result_from_row(self, row: tuple[Any, ...], where: str) -> ConfigResult:
        try:
            return ConfigResult(
                label=row[0],
                config=json.loads(row[1]),
                status=row[2],
                reason=row[3],
                compile_s=row[4],
                runtime_ms=row[5],
                runtime_ms_p20=row[6],
                runtime_ms_p80=row[7],
                max_abs_diff=row[8],
                artifact_key=row[9],
                screen_ms=row[10],
            )
        except ValueError as exc:  # bad JSON, an unknown status (a newer kiln's?)
            raise TuningDatabaseError(
                f"{where} in the tuning database {self.path} holds an unreadable result for config "
                f"{row[0]!r}: {exc}"
            ) from exc

    def _run_from_row(self, conn: sqlite3.Connection, row: tuple[Any, ...]) -> TuningRun:
        results = self._results(conn, row[0])
        adopted, waited = conn.execute(
            "SELECT count(*), max(waited_s) FROM adoptions WHERE run_id = ?", (row[0],)
        ).fetchone()
        try:
            return TuningRun(
                kernel=row[1],
                kernel_key=row[2],
                key_repr=row[3],
                device_name=row[4],
                capability=row[5],
                triton_version=row[6],
                results=tuple(results),
                best_label=row[11],
                default_label=row[12],
                started_at=row[7],
                wall_s=row[9],
                first_result_s=row[10],
                split=None if row[13] is None else json.loads(row[13]),
                gpu_peak_bytes=row[14],
                finished_at=row[8],
                run_id=row[0],
                adoptions=int(adopted),
                adoption_wait_s=waited,
            )
        except ValueError as exc:  # bad split JSON too (json.JSONDecodeError is a ValueError)
            raise TuningDatabaseError(
                f"run {row[0]} in the tuning database {self.path} is invalid: {exc}"
            ) from exc

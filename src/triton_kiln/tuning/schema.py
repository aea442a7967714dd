"""The tuning database's SQLite file: its tables, how it is opened, and its transactions.

:func:`open_connection` opens (or creates) the file: WAL journaling (retried while another
process switches it), ``synchronous=NORMAL``, foreign keys, and the schema created once or its
version checked (:data:`SCHEMA_VERSION`; an older file is migrated in place (:data:`MIGRATIONS`),
a newer one refused, never misread). :func:`open_read_only` opens an existing file without ever
writing it (``kiln report``), so it works in a directory the user cannot write (:func:`connect_read_only`).
:func:`transaction` is every read's and write's transaction (writers ``BEGIN IMMEDIATE``).
:func:`database_error` turns SQLite's errors into :class:`TuningDatabaseError` messages that say
what to do. The queries themselves live in :mod:`triton_kiln.tuning.db`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from triton_kiln.errors import KilnError

SCHEMA_VERSION = 5
"""Version of the tables below; bump it (with a migration in :data:`MIGRATIONS`) whenever they change."""

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE runs ADD COLUMN split_json TEXT",),  # 1 -> 2: a run's time split
    2: ("ALTER TABLE configs ADD COLUMN screen_ms REAL",),  # 2 -> 3: a finalist's screening time
    3: (  # 3 -> 4: processes of the node that adopted a run another process was tuning
        "CREATE TABLE adoptions (run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE, "
        "pid INTEGER NOT NULL, host TEXT NOT NULL, waited_s REAL NOT NULL, adopted_at REAL NOT NULL)",
        "CREATE INDEX adoptions_run ON adoptions (run_id)",
    ),
    4: ("ALTER TABLE runs ADD COLUMN gpu_peak_bytes INTEGER",),  # 4 -> 5: kiln's GPU memory in a run
}
"""The statements that bring a file of version ``v`` to ``v + 1``, keyed by ``v``. Opening an
older file runs them, in order, in one write transaction with the version update."""

DEFAULT_BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel         TEXT NOT NULL,
    kernel_key     TEXT NOT NULL,
    key_repr       TEXT NOT NULL,
    device_name    TEXT NOT NULL,
    capability     TEXT NOT NULL,
    triton_version TEXT NOT NULL,
    started_at     REAL NOT NULL,
    finished_at    REAL,
    wall_s         REAL,
    first_result_s REAL,
    best_label     TEXT,
    default_label  TEXT,
    split_json     TEXT,
    gpu_peak_bytes INTEGER
);
CREATE INDEX runs_identity
    ON runs (kernel_key, key_repr, device_name, capability, triton_version, finished_at);
CREATE INDEX runs_kernel ON runs (kernel);
CREATE TABLE configs (
    run_id         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    label          TEXT NOT NULL,
    config_json    TEXT NOT NULL,
    status         TEXT NOT NULL,
    reason         TEXT,
    compile_s      REAL,
    runtime_ms     REAL,
    runtime_ms_p20 REAL,
    runtime_ms_p80 REAL,
    max_abs_diff   REAL,
    artifact_key   TEXT,
    recorded_at    REAL NOT NULL,
    screen_ms      REAL,
    UNIQUE (run_id, label)
);
CREATE TABLE adoptions (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    pid        INTEGER NOT NULL,
    host       TEXT NOT NULL,
    waited_s   REAL NOT NULL,
    adopted_at REAL NOT NULL
);
CREATE INDEX adoptions_run ON adoptions (run_id);
"""


class TuningDatabaseError(KilnError):
    """The tuning database cannot be opened, read or written (or was asked for something invalid)."""


def open_connection(path: Path, busy_timeout_s: float, source: str = "argument") -> sqlite3.Connection:
    """A connection to the database at ``path``: WAL, foreign keys, the schema checked or created."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TuningDatabaseError(
            f"cannot create the directory of the tuning database {path}{_SOURCES[source][0]}: {exc}. "
            f"Name a file in a writable directory ({_SOURCES[source][1]})."
        ) from exc
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(
            path,
            timeout=busy_timeout_s,
            isolation_level=None,  # autocommit: transactions are explicit (BEGIN IMMEDIATE)
            check_same_thread=False,  # shared by threads, serialised by TuningDatabase._lock
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        _set_wal(conn, path, busy_timeout_s)
        conn.execute("PRAGMA synchronous = NORMAL")
        _ensure_schema(conn, path)
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise database_error(path, busy_timeout_s, "open", exc, source) from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn


class _ReadOnlyConnection(sqlite3.Connection):
    """A connection of :func:`connect_read_only`: at :meth:`close`, the -wal and -shm files that
    opening it made are removed (see there)."""

    tidy: Path | None = None

    def close(self) -> None:
        super().close()
        path, self.tidy = self.tidy, None
        if path is not None and any(os.path.lexists(f"{path}{end}") for end in _SIDECARS):
            _remove_sidecars(path)


_SIDECARS = ("-wal", "-shm")
_NO_SHARED_MEMORY = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)
"""SQLite's primary error codes when ``mode=ro`` cannot use a WAL file's -shm (it cannot be made:
``SQLITE_READONLY_DIRECTORY``, ``SQLITE_READONLY_CANTINIT``; or cannot be opened)."""


def connect_read_only(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection that never writes the database at ``path`` (an existing file), its first read
    done (the schema's table list), so a file that is not a database fails here.

    It opens ``mode=ro``. A file in WAL mode (kiln's) needs its -shm file, which SQLite makes
    beside it: where it cannot (a directory the user cannot write), it opens ``immutable=1``
    instead, which reads the file alone; a commit still in another process's -wal file is then
    not seen. Where the -wal and -shm files did not exist before, closing the connection has
    SQLite remove them as it does at a last connection's close (never from under another's),
    so a read leaves nothing behind.
    """
    uri = path.resolve().as_uri()
    tidy = None if any(os.path.lexists(f"{path}{end}") for end in _SIDECARS) else path
    try:
        return _read_only(f"{uri}?mode=ro", busy_timeout_s, tidy)
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _NO_SHARED_MEMORY or not path.is_file():
            raise
    return _read_only(f"{uri}?immutable=1", busy_timeout_s, None)


def _read_only(uri: str, busy_timeout_s: float, tidy: Path | None) -> sqlite3.Connection:
    conn = sqlite3.connect(
        uri, uri=True, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False,
        factory=_ReadOnlyConnection,
    )  # fmt: skip
    conn.tidy = tidy
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _remove_sidecars(path: Path) -> None:
    """Open ``path`` for writing, read it and close it: the last connection to close removes the
    -wal and -shm files (after a checkpoint of an empty -wal: the file is not changed). Where
    another process has the file open, or this one may not write it, they stay (SQLite's rule)."""
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None)
        try:
            conn.execute("PRAGMA query_only = 1")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()


def open_read_only(path: Path, busy_timeout_s: float, source: str = "argument") -> sqlite3.Connection:
    """A connection to the existing database at ``path`` that never writes it
    (:func:`connect_read_only`), its schema version checked. A file of an older schema is copied
    into memory and migrated there: the file is read as this kiln reads it, and left as it was."""
    if not path.is_file():
        raise TuningDatabaseError(
            f"no tuning database at {path}; a read-only open needs an existing file (TuningDatabase "
            f"without read_only=True creates one)."
        )
    try:
        conn = connect_read_only(path, busy_timeout_s)
    except sqlite3.Error as exc:
        raise database_error(path, busy_timeout_s, "open", exc, source) from exc
    try:
        with transaction(conn):
            if not _has_meta(conn):
                raise _not_a_tuning_database(path)
            version = _check_version(conn, path)
        if version == SCHEMA_VERSION:
            return conn
        memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.backup(memory)
        conn.close()
        with transaction(memory, immediate=True):
            _migrate(memory, path, version)
        return memory
    except sqlite3.Error as exc:
        conn.close()
        raise database_error(path, busy_timeout_s, "open", exc, source) from exc
    except BaseException:
        conn.close()
        raise


def _not_a_tuning_database(path: Path) -> TuningDatabaseError:
    return TuningDatabaseError(
        f"{path} is an SQLite database but not a kiln tuning database (it has no 'meta' table). "
        f"Pass another path, or delete the file if it is yours to remove."
    )


def _set_wal(conn: sqlite3.Connection, path: Path, busy_timeout_s: float) -> None:
    # Switching a new file to WAL takes an exclusive lock; retry while other openers hold it.
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    if str(mode).lower() != "wal":
        warnings.warn(
            f"the tuning database {path} could not use WAL journaling (got {mode!r}); "
            f"readers will wait for writers. Keep it on a local file system.",
            RuntimeWarning,
            stacklevel=4,
        )


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    with transaction(conn):  # the usual case, a current database: no write lock needed
        if _has_meta(conn) and _check_version(conn, path) == SCHEMA_VERSION:
            return
    with transaction(conn, immediate=True):  # a new file (create the tables) or an old one (migrate)
        if not _has_meta(conn):
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise _not_a_tuning_database(path)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            return
        _migrate(conn, path, _check_version(conn, path))  # another opener may have migrated it meanwhile


def _migrate(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Bring a file of schema ``version`` to :data:`SCHEMA_VERSION` (inside the caller's transaction)."""
    while version < SCHEMA_VERSION:
        statements = MIGRATIONS.get(version)
        if statements is None:
            raise TuningDatabaseError(
                f"the tuning database {path} has schema version {version}, older than "
                f"{SCHEMA_VERSION}, and no migration exists for it. It only caches tuning results: "
                f"delete it (with its -wal and -shm files) to start over."
            )
        for statement in statements:
            conn.execute(statement)
        version += 1
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))


def _check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; :class:`TuningDatabaseError` if it is damaged or newer than ours."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row else None
    except ValueError:
        version = None
    if version is None:
        raise TuningDatabaseError(
            f"the tuning database {path} has no valid schema_version in its meta table "
            f"({row[0] if row else 'missing'!r}); it is damaged or was not written by kiln. It only "
            f"caches tuning results: delete it (with its -wal and -shm files) to start over."
        )
    if version > SCHEMA_VERSION:
        raise TuningDatabaseError(
            f"the tuning database {path} has schema version {version}, but this kiln "
            f"understands versions up to {SCHEMA_VERSION}: it was written by a newer kiln. "
            f"Upgrade kiln, or use another file (TuningDatabase(path=...)); deleting the file "
            f"discards the newer kiln's tuning results."
        )
    return version


_SOURCES = {  # where a database's path came from: (how the message says so, how to change it)
    "setting": (" (set by KILN_TUNING_DB)", "point KILN_TUNING_DB at another file"),
    "argument": (" (the path given to TuningDatabase(path=...))", "pass another path"),
    "default": (" (the default, <cache_dir>/tuning.sqlite3)", "set KILN_TUNING_DB to another file"),
}


def path_source(path: Path, *, given: bool) -> str:
    """Where ``path`` came from (a key of :data:`_SOURCES`), for messages only."""
    from triton_kiln.settings import current

    with contextlib.suppress(Exception):  # a message's detail: never an error of its own
        if current().tuning_db == path:
            return "setting"
    return "argument" if given else "default"


def database_error(
    path: Path, busy_timeout_s: float, action: str, exc: sqlite3.Error, source: str = "argument"
) -> TuningDatabaseError:
    """The TuningDatabaseError for an SQLite error while doing ``action``, saying where ``path``
    came from (``source``, see :func:`path_source`) and advising deletion only of kiln's own file."""
    origin, fix = _SOURCES.get(source, _SOURCES["argument"])
    where = f"the tuning database {path}{origin}"
    if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
        return TuningDatabaseError(
            f"could not {action} {where}: another process held its lock "
            f"for more than {busy_timeout_s:g} s ({exc}). Retry, or raise busy_timeout_s."
        )
    if isinstance(exc, sqlite3.IntegrityError):
        return TuningDatabaseError(f"could not {action} {where}: {exc}.")
    if path.is_dir() or (path.exists() and not path.is_file()):
        kind = "a directory" if path.is_dir() else "not a regular file (a device or other special file)"
        return TuningDatabaseError(
            f"could not {action} {where}: it is {kind}, not a file ({exc}). "
            f"Name a database file ({fix}); kiln creates it."
        )
    if not _is_kilns(path):
        return TuningDatabaseError(
            f"could not {action} {where} ({type(exc).__name__}: {exc}): it is not a kiln tuning "
            f"database. Name another file ({fix}); kiln creates it."
        )
    return TuningDatabaseError(
        f"could not {action} {where} ({type(exc).__name__}: {exc}). It only "
        f"caches tuning results: if this repeats, delete it (with its -wal and -shm files)."
    )


def _is_kilns(path: Path) -> bool:
    """Whether ``path`` is recognisably a kiln tuning database (an SQLite file with kiln's tables)."""
    query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'runs')"
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return len(conn.execute(query).fetchall()) == 2
    except (sqlite3.Error, OSError, ValueError):
        return False


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, *, immediate: bool = False) -> Iterator[None]:
    """One transaction: committed on success, rolled back on any exception.

    Writers use ``BEGIN IMMEDIATE``: they take the write lock up front (waiting up to the busy
    timeout), so they never fail half-way when upgrading a read lock. Readers use a deferred
    transaction, so several statements see one snapshot.
    """
    conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _has_meta(conn: sqlite3.Connection) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    return conn.execute(query).fetchone() is not None


def is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text

"""The SQL that writes a tuning run: its row, each config's result, and its finish.

Shared by :class:`~triton_kiln.tuning.db.TuningDatabase`'s writes, each its own transaction
(``begin_run``, ``record``, ``finish_run``), and by ``import_run``, which does all three in one
transaction for a run finished elsewhere. Callers hold the connection and the transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping

from triton_kiln.tuning.results import ConfigResult
from triton_kiln.tuning.schema import TuningDatabaseError

CONFIG_COLUMNS = (
    "label, config_json, status, reason, compile_s, runtime_ms, runtime_ms_p20, runtime_ms_p80, "
    "max_abs_diff, artifact_key, screen_ms"
)


def insert_run(conn: sqlite3.Connection, identity: tuple[str, ...], default_label: str | None) -> int:
    cursor = conn.execute(
        "INSERT INTO runs (kernel, kernel_key, key_repr, device_name, capability, triton_version, "
        "started_at, default_label) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (*identity, time.time(), default_label),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def insert_result(conn: sqlite3.Connection, run_id: int, result: ConfigResult) -> None:
    """Insert or replace (keeping its place in the run's order) the result of ``result.label``."""
    updates = ", ".join(f"{column} = excluded.{column}" for column in CONFIG_COLUMNS.split(", ")[1:])
    conn.execute(
        f"INSERT INTO configs (run_id, {CONFIG_COLUMNS}, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        f"ON CONFLICT (run_id, label) DO UPDATE SET {updates}, recorded_at = excluded.recorded_at",
        (run_id, result.label, json.dumps(result.config, allow_nan=False), result.status, result.reason,
         result.compile_s, result.runtime_ms, result.runtime_ms_p20, result.runtime_ms_p80,
         result.max_abs_diff, result.artifact_key, result.screen_ms, time.time()),
    )  # fmt: skip


def finish(
    conn: sqlite3.Connection,
    run_id: int,
    best_label: str | None,
    wall_s: float | None,
    first_result_s: float | None,
    split: Mapping[str, float] | None,
    gpu_peak_bytes: int | None = None,
) -> None:
    if (
        best_label is not None
        and not conn.execute(
            "SELECT 1 FROM configs WHERE run_id = ? AND label = ?", (run_id, best_label)
        ).fetchone()
    ):
        raise TuningDatabaseError(
            f"cannot finish run {run_id} with best config {best_label!r}: no result with that "
            f"label was recorded in it. record() the best config's result first."
        )
    conn.execute(
        "UPDATE runs SET finished_at = ?, best_label = ?, wall_s = ?, first_result_s = ?, split_json = ?, "
        "gpu_peak_bytes = ? WHERE id = ?",
        (time.time(), best_label, wall_s, first_result_s,
         None if split is None else json.dumps(dict(split), allow_nan=False), gpu_peak_bytes, run_id),
    )  # fmt: skip

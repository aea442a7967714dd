"""A tuning database that cannot be opened says where its path came from (KILN_TUNING_DB or the
argument), advises deleting it only when it is recognisably kiln's, and says when the path is
not a file at all (audit of the public API, item 4)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from triton_kiln import settings
from triton_kiln.tuning import TuningDatabase
from triton_kiln.tuning.db import default_database_path
from triton_kiln.tuning.schema import TuningDatabaseError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in os.environ:
        if var.startswith("KILN_"):
            monkeypatch.delenv(var)


def _text_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, and not kiln's\n" * 100)
    return path


def test_text_file_from_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _text_file(tmp_path)
    monkeypatch.setenv("KILN_TUNING_DB", str(path))
    with pytest.raises(TuningDatabaseError) as info:
        TuningDatabase(default_database_path(settings.current()))
    message = str(info.value)
    assert "KILN_TUNING_DB" in message
    assert "delete" not in message
    assert "not a kiln tuning database" in message
    with pytest.raises(TuningDatabaseError, match="KILN_TUNING_DB"):
        TuningDatabase()


def test_text_file_from_the_argument(tmp_path: Path) -> None:
    with pytest.raises(TuningDatabaseError) as info:
        TuningDatabase(_text_file(tmp_path))
    assert "TuningDatabase(path" in str(info.value)
    assert "delete" not in str(info.value)


def test_directory_and_device_are_not_files(tmp_path: Path) -> None:
    with pytest.raises(TuningDatabaseError, match="is a directory, not a file") as info:
        TuningDatabase(tmp_path)
    assert "delete" not in str(info.value)
    with pytest.raises(TuningDatabaseError, match="not a regular file") as info:
        TuningDatabase("/dev/null")
    assert "delete" not in str(info.value)


def test_a_damaged_kiln_database_may_be_deleted(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite3"
    TuningDatabase(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = 'x' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(TuningDatabaseError, match="delete it"):
        TuningDatabase(path)

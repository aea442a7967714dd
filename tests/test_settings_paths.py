"""Path settings given as strings are kept as Paths, wherever Settings are built or replaced
(audit of the public API, item 5: a str cache_dir failed later with ``'str' / 'str'``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from triton_kiln import SettingsError, settings
from triton_kiln.settings import Settings
from triton_kiln.tuning.db import default_database_path


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in os.environ:
        if var.startswith("KILN_"):
            monkeypatch.delenv(var)


def test_str_paths_become_paths(tmp_path: Path) -> None:
    built = Settings(cache_dir=str(tmp_path / "c"), tuning_db=str(tmp_path / "t.sqlite3"))  # type: ignore[arg-type]
    assert built.cache_dir == tmp_path / "c"
    assert isinstance(built.cache_dir, Path)
    assert isinstance(built.tuning_db, Path)
    replaced = Settings().replace(cache_dir=str(tmp_path / "d"))
    assert isinstance(replaced.cache_dir, Path)
    with settings.scope(cache_dir=str(tmp_path / "e")) as scoped:
        assert isinstance(scoped.cache_dir, Path)
        assert default_database_path() == tmp_path / "e" / "tuning.sqlite3"
    assert Settings(cache_dir="~/kiln-x").cache_dir == Path("~/kiln-x").expanduser()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"), [("cache_dir", 3), ("cache_dir", ""), ("tuning_db", b"x"), ("remote_key_file", 1.5)]
)
def test_bad_path_settings_are_refused(name: str, value: object) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings(**{name: value})  # type: ignore[arg-type]

"""The command line as a new user meets it: a machine with no tuning runs, an import that cannot
find the module, the traceback behind an error line (``--debug``, ``KILN_DEBUG``), a second
compile of the same kernels (cache hits said as such), and ``kiln bundle save`` agreeing with
``kiln cache info`` on what the cache holds."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from triton_kiln.cli import main

SCALE_SIGNATURE = "x_ptr=*fp32,out_ptr=*fp32,n=i32"


# ---------------------------------------------------------------------------- kiln report


def test_report_with_no_tuning_database_says_there_are_no_runs_yet(tmp_path: Path) -> None:
    missing = tmp_path / "tuning.sqlite3"
    result = CliRunner().invoke(main, ["report", "--db", str(missing)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("no tuning runs yet")
    assert "Error" not in result.output
    assert not missing.exists()  # only read, never made


def test_report_on_a_fresh_machine_says_there_are_no_runs_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KILN_TUNING_DB", raising=False)
    result = CliRunner().invoke(main, ["report"])
    assert result.exit_code == 0, result.output
    assert "no tuning runs yet" in result.output
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------- imports


def test_a_module_not_importable_from_here_suggests_the_file_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "mykern_elsewhere.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compile", "mykern_elsewhere:scale", "--signature", "n=i32"])
    assert result.exit_code == 1, result.output
    [line] = result.output.splitlines()
    assert line.startswith("Error: cannot import 'mykern_elsewhere'")
    assert "path/to/mykern_elsewhere.py:NAME" in line
    assert str(tmp_path) in line  # where it looked
    assert "__init__.py" not in line  # the import machinery's own line is not the user's


def test_a_missing_dependency_of_the_users_module_is_not_taken_for_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "needs_missing_dep.py").write_text("import no_such_dependency_here\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compile", "needs_missing_dep:k", "--signature", "n=i32"])
    assert result.exit_code == 1, result.output
    assert "No module named 'no_such_dependency_here'" in result.output
    assert "(needs_missing_dep.py:1)" in result.output
    assert "path/to/" not in result.output


# ---------------------------------------------------------------------------- --debug, KILN_DEBUG


def _failing_module(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            """\
            def helper():
                raise RuntimeError("boom at import")


            helper()
            """
        )
    )
    return path


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback_behind_the_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    path = _failing_module(tmp_path, f"boom_{how}")
    args = ["compile", f"{path}:k", "--signature", "n=i32"]
    quiet = CliRunner().invoke(main, args)
    assert quiet.exit_code == 1
    assert "Traceback" not in quiet.output
    assert quiet.output.splitlines()[-1].startswith(f"Error: importing 'boom_{how}' raised RuntimeError")

    _failing_module(tmp_path, f"boom_{how}_2")
    args = ["compile", f"{tmp_path / f'boom_{how}_2.py'}:k", "--signature", "n=i32"]
    if how == "flag":
        result = CliRunner().invoke(main, ["--debug", *args])
    else:
        monkeypatch.setenv("KILN_DEBUG", "1")
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert f'boom_{how}_2.py", line 2, in helper' in result.stderr  # the user's own frame
    assert "RuntimeError: boom at import" in result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"Error: importing 'boom_{how}_2' raised")


def test_debug_shows_the_traceback_of_a_kiln_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text('{"format": 1}')
    monkeypatch.setenv("KILN_DEBUG", "1")
    result = CliRunner().invoke(main, ["bundle", "show", str(tmp_path / "b")])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "BundleError" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("Error: ")


def test_kiln_debug_is_a_setting() -> None:
    from triton_kiln import settings

    assert settings.variables()["debug"] == "KILN_DEBUG"
    assert settings.from_env({"KILN_DEBUG": "1"}).debug is True
    assert settings.from_env({}).debug is False

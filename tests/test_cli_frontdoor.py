"""The command line as a new user meets it: a machine with no tuning runs, an import that cannot
find the module, the traceback behind an error line (``--debug``, ``KILN_DEBUG``), a second
compile of the same kernels (cache hits said as such), and ``kiln bundle save`` agreeing with
``kiln cache info`` on what the cache holds."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

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


# ---------------------------------------------------------------------------- compiled, cached, tuned


@pytest.fixture(scope="module")
def compiled_twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, dict[str, Any]]:
    """``kiln compile`` of farm_kernels.tuned_scale's three configs into a fresh cache, twice."""
    base = tmp_path_factory.mktemp("compiled")
    cache = base / "cache"
    args = ["compile", "farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--workers", "2",
            "--cache-dir", str(cache)]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
        first = CliRunner().invoke(main, args)
        second = CliRunner().invoke(main, [*args, "--json", str(base / "second.json")])
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    return cache, first.output, second.output, json.loads((base / "second.json").read_text())


@pytest.mark.timeout(300)
def test_a_second_compile_says_its_results_were_cache_hits(
    compiled_twice: tuple[Path, str, str, dict[str, Any]],
) -> None:
    _, first, second, summary = compiled_twice
    assert first.startswith("3 of 3 compiled on the local pool in ")
    assert "found in the cache" not in first
    assert second.startswith("3 of 3 ready on the local pool in ")
    assert ": 0 compiled, 3 found in the cache (compiled before, not compiled again)" in second
    assert (summary["compiled"], summary["from_cache"], summary["requests"]) == (0, 3, 3)


@pytest.mark.timeout(300)
def test_bundle_save_and_cache_info_count_the_same_compiled_kernels(
    compiled_twice: tuple[Path, str, str, dict[str, Any]], tmp_path: Path
) -> None:
    """``kiln cache info`` said "compiled: 6 entries" while ``kiln bundle save`` said "no compiled
    kernels": a bundle takes tuned variants (bundle records), which compiling alone records none of."""
    cache = compiled_twice[0]
    shown = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(cache)])
    assert shown.exit_code == 0, shown.output
    assert "compiled:        3 kernels" in shown.output
    assert "tuned variants:  0 recorded" in shown.output
    saved = CliRunner().invoke(main, ["bundle", "save", str(tmp_path / "b.tgz"), "--cache-dir", str(cache)])
    assert saved.exit_code == 1
    [line] = saved.output.splitlines()
    assert line.startswith(f"Error: no tuned variants recorded in {cache} ")
    assert "the cache holds 3 compiled kernels, but a bundle takes tuned variants only" in line
    assert "no compiled kernels" not in line
    assert not (tmp_path / "b.tgz").exists()

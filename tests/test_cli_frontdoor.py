"""The command line as a new user meets it: a machine with no tuning runs, an import that cannot
find the module, the traceback behind an error line (``--debug``, ``KILN_DEBUG``), a second
compile of the same kernels (cache hits said as such), and ``kiln bundle save`` agreeing with
``kiln cache info`` on what the cache holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    args = ["compile", "support.farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--workers", "2",
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


# ---------------------------------------------------------------------------- the terminal's width


def _help_lines(args: list[str], columns: int) -> list[str]:
    """``kiln ... --help`` in a terminal ``columns`` wide (a real process: click's test runner
    forces 80 columns on help)."""
    import triton_kiln

    src = str(Path(triton_kiln.__file__).resolve().parents[1])
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-m", "triton_kiln", *args, "--help"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


GROUPS = [[], ["cache"], ["bundle"], ["farm"]]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: " ".join(["kiln", *g]))
def test_help_fits_80_columns_and_cuts_no_summary(group: list[str]) -> None:
    lines = _help_lines(group, 80)
    assert max(map(len, lines)) <= 80, lines
    commands = lines[lines.index("Commands:") + 1 :]
    assert commands
    for line in commands:
        assert not line.rstrip().endswith("..."), line  # click cut it: it had no short help
        assert line.startswith("  "), line
        assert line.split()[0].isidentifier(), line  # one line each: no wrapped summary


def test_help_follows_a_wide_terminal_and_says_what_kiln_is() -> None:
    narrow, wide = _help_lines([], 80), _help_lines([], 200)
    assert len(wide) < len(narrow)  # the description wraps later
    assert max(map(len, wide)) > 80
    assert max(map(len, wide)) <= 100  # prose stops at 100 columns
    text = " ".join(" ".join(narrow).split())
    assert "crash-proof, fast compiling and autotuning of Triton kernels" in text


def _settings_lines(columns: int) -> list[str]:
    result = CliRunner().invoke(main, ["settings"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_settings_fit_80_columns_with_each_settings_meaning_under_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from triton_kiln import settings

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "c"))
    lines = _settings_lines(80)
    assert lines[0].split() == ["VARIABLE", "VALUE", "SOURCE"]
    short = [line for line in lines if str(tmp_path) not in line]  # a path is never broken
    assert max(map(len, short)) <= 80, [line for line in short if len(line) > 80]
    for var in settings.variables().values():
        [row] = [n for n, line in enumerate(lines) if line.split()[:1] == [var]]
        assert lines[row + 1].startswith("    "), (var, lines[row + 1])
        assert len(lines[row + 1].split()) >= 3, (var, lines[row + 1])
    # the longest name and a long value stay in their columns
    [quiet] = [line for line in lines if line.startswith("KILN_INDUCTOR_QUIET_BENCHMARKS ")]
    assert quiet.split() == ["KILN_INDUCTOR_QUIET_BENCHMARKS", "1", "default"]
    [slots] = [line for line in lines if line.startswith("KILN_NODE_SLOTS ")]
    assert slots.split()[-1] == "default"
    assert lines[lines.index(slots) + 1].startswith("    compiles running at once")


def test_settings_on_a_wide_terminal_have_a_meaning_column() -> None:
    from triton_kiln import settings

    lines = _settings_lines(200)
    assert lines[0].split() == ["VARIABLE", "VALUE", "SOURCE", "MEANING"]
    assert max(map(len, lines)) <= 200
    column = lines[0].index("MEANING")
    rows = {line.split()[0]: line for line in lines[1:] if line.startswith("KILN_")}
    assert set(rows) == set(settings.variables().values())
    assert rows["KILN_WORKERS"][column:].startswith("compile worker processes")
    assert rows["KILN_DEBUG"][column:].startswith("1 makes the kiln command print the traceback")

"""Settings from the environment as a new user meets them: a bad ``KILN_*`` value never
breaks ``import triton_kiln`` nor ``kiln --help``, is one ``Error:`` line in every command that
needs settings and a SettingsError naming it where a kiln object is made; an unknown ``KILN_*``
name is reported once with the closest setting; ``kiln settings`` shows where each value came from.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import triton_kiln as kiln
from triton_kiln import SettingsError, child_env, settings, unknown_names
from triton_kiln.cli import main
from triton_kiln.routing import autotune as routing

ROOT = Path(__file__).resolve().parents[1]

BAD_ENVIRONMENTS = [
    {"KILN_AUTOTUNE": "abc"},
    {"KILN_AUTOTUNE": "1", "KILN_WORKERS": "abc"},
    {"KILN_WORKERS": "abc"},
]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_clean_env(**env),
        timeout=120,
        check=False,
    )


def _kiln(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triton_kiln", *args],
        capture_output=True,
        text=True,
        env=_clean_env(**env),
        timeout=120,
        check=False,
    )


@pytest.fixture(autouse=True)
def _no_kiln_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("KILN_")]:
        monkeypatch.delenv(var)
    monkeypatch.setattr(unknown_names, "_warned", set())


# ---------------------------------------------------------------------------- import


@pytest.mark.parametrize("env", BAD_ENVIRONMENTS, ids=lambda e: " ".join(f"{k}={v}" for k, v in e.items()))
def test_import_never_raises_on_a_bad_setting(env: dict[str, str]) -> None:
    result = _python("import triton_kiln; print('imported')", env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip() == "imported"
    lines = result.stderr.strip().splitlines()
    if env.get("KILN_AUTOTUNE") == "abc":  # routing was asked for and is not done: one line says why
        assert lines == ["kiln: KILN_AUTOTUNE='abc' is not valid: expected 0 or 1. triton.autotune is not "
                         "routed through kiln."]  # fmt: skip
    else:
        assert lines == []


def test_routing_with_a_bad_setting_raises_at_first_use(tmp_path: Path) -> None:
    """KILN_AUTOTUNE=1 routes at import; the bad KILN_WORKERS is a SettingsError naming it when a
    kernel is decorated (its kiln Autotuner is made), and when a pool is made."""
    code = textwrap.dedent(
        """
        import triton, triton.language as tl
        import triton_kiln as kiln
        from triton_kiln.routing import autotune as routing
        assert routing.installed()
        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
        for make in (lambda: triton.autotune([triton.Config({"BLOCK": 64})], key=[])(k),
                     lambda: kiln.CompilePool(start=False)):
            try:
                make()
            except kiln.SettingsError as exc:
                print("SettingsError:", exc)
        """
    )
    script = tmp_path / "use.py"  # @triton.jit needs a source file
    script.write_text(code)
    result = _python(
        f"import runpy; runpy.run_path({str(script)!r})", {"KILN_AUTOTUNE": "1", "KILN_WORKERS": "abc"}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("SettingsError: KILN_WORKERS='abc' is not valid") == 2, result.stdout


def test_explicit_install_with_a_bad_setting_raises_and_routes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KILN_WORKERS", "abc")
    assert not routing.installed()
    try:
        with pytest.raises(SettingsError, match="KILN_WORKERS"):
            kiln.install()
        assert not routing.installed()
    finally:
        kiln.uninstall()


# ---------------------------------------------------------------------------- unknown names


@pytest.mark.parametrize(
    ("typo", "closest"),
    [
        ("KILN_JOBS", "KILN_WORKERS"),
        ("KILN_AUTOTUNED", "KILN_AUTOTUNE"),
        ("KILN_CACHEDIR", "KILN_CACHE_DIR"),
        ("KILN_JOB_TIMEOUT", "KILN_JOB_TIMEOUT_S"),
        ("KILN_CACHE_MAX_GB", "KILN_CACHE_MAX_MB"),
    ],
)
def test_an_unknown_name_is_reported_once_with_the_closest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, typo: str, closest: str
) -> None:
    monkeypatch.setenv(typo, "3")
    with caplog.at_level(logging.WARNING, logger="kiln.settings"):
        settings.current()
        settings.current()
        kiln.CompilePool(start=False).shutdown()
    messages = [r.getMessage() for r in caplog.records if r.name == "kiln.settings"]
    assert messages == [f"kiln: {typo} is not a kiln setting; did you mean {closest}? (it is ignored)"]


def test_an_unknown_name_is_one_line_at_import() -> None:
    result = _python("import triton_kiln", {"KILN_JOBS": "4"})
    assert result.returncode == 0
    assert result.stderr.strip().splitlines() == [
        "kiln: KILN_JOBS is not a kiln setting; did you mean KILN_WORKERS? (it is ignored)"
    ]


def test_kiln_children_do_not_report_again() -> None:
    """The sandboxes are fresh interpreters that import kiln: their parent has said it already."""
    result = _python("import triton_kiln", {"KILN_JOBS": "4", "KILN_SANDBOX_FD": "5"})
    assert result.returncode == 0
    assert result.stderr == ""


def test_names_kiln_and_its_tests_set_are_not_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for var in ["KILN_TEST_SLOW_S", "KILN_CI_OTHER_TRITONS"]:
        monkeypatch.setenv(var, "1")
    with caplog.at_level(logging.WARNING, logger="kiln.settings"):
        settings.current()
    assert not [r for r in caplog.records if r.name == "kiln.settings"]
    assert settings.unknown_variables(dict.fromkeys(child_env.INTERNAL_VARIABLES, "1")) == {}


def test_every_kiln_name_in_the_tree_is_a_setting_or_allow_listed() -> None:
    """A KILN_* variable added to src/, tests/, bench/ or .ci/ must be a setting or on the list of
    names that are not settings, or every user running it would be told it is a typo."""
    not_variables = {
        "KILN_ARMS",  # bench/realworld_child.py: a Python constant, not a variable
        "KILN_MODULE",  # bench/inductor_child.py: likewise
        "KILN_JOBS",  # the typo the docstrings give as an example
        "KILN_TEST",  # the prefixes themselves, in unknown_names.py
        "KILN_CI",
    }
    known = set(settings.variables().values()) | child_env.INTERNAL_VARIABLES | not_variables
    found: dict[str, str] = {}
    for folder in ("src", "tests", "bench", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.name == Path(__file__).name:
                continue  # this file's typos are on purpose
            if path.is_file() and path.suffix in ("", ".py", ".sh", ".c", ".toml", ".yml", ".yaml"):
                for name in re.findall(r"KILN_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")):
                    found.setdefault(name, str(path.relative_to(ROOT)))
    strays = {
        name: where
        for name, where in found.items()
        if name not in known and not name.startswith(unknown_names.INTERNAL_PREFIXES)
    }
    assert strays == {}
    assert {"KILN_POOL_ID", "KILN_ZYGOTE_FD", "KILN_SANDBOX_FD", "KILN_TEST_SLOW_S"} <= set(found)


# ---------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("env", BAD_ENVIRONMENTS, ids=lambda e: " ".join(f"{k}={v}" for k, v in e.items()))
def test_kiln_help_and_commands_with_a_bad_setting(env: dict[str, str], tmp_path: Path) -> None:
    """``kiln --help`` prints help (at most one warning line); a command that needs settings says
    what is wrong in one ``Error:`` line; no traceback anywhere."""
    bad = "KILN_AUTOTUNE" if env.get("KILN_AUTOTUNE") == "abc" else "KILN_WORKERS"
    helped = _kiln("--help", env={**env, "HOME": str(tmp_path)})
    assert helped.returncode == 0, helped.stderr
    assert "Usage:" in helped.stdout
    assert "settings" in helped.stdout
    assert "cache" in helped.stdout
    assert "Traceback" not in helped.stderr
    assert len(helped.stderr.strip().splitlines()) <= 1
    cached = _kiln("cache", "info", env={**env, "HOME": str(tmp_path)})
    assert cached.returncode == 0, cached.stderr  # it reads only the cache's own settings
    for command in (["report"], ["settings"]):
        result = _kiln(*command, env={**env, "HOME": str(tmp_path)})
        assert result.returncode == 1, (command, result.stderr)
        assert "Traceback" not in result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
        others = [line for line in result.stderr.splitlines() if not line.startswith("Error: ")]
        assert len(errors) == 1, (command, result.stderr)
        assert f"{bad}='abc' is not valid" in errors[0], (command, result.stderr)
        assert len(others) <= 1, (command, result.stderr)  # KILN_AUTOTUNE=abc: its import warning
    assert not (tmp_path / ".cache").exists()  # no command made a cache


COMMANDS_NEEDING_SETTINGS = [
    ["report"],
    ["demo"],
    ["bundle", "save", "out"],
    ["settings"],
]
"""(``kiln cache`` reads only the settings it uses, so these do not stop it: tests/test_cache.py.)"""


@pytest.mark.parametrize("command", COMMANDS_NEEDING_SETTINGS, ids=" ".join)
@pytest.mark.parametrize("var", ["KILN_WORKERS", "KILN_AUTOTUNE"])
def test_every_command_reports_a_bad_setting_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str], var: str
) -> None:
    monkeypatch.setenv(var, "abc")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, SettingsError)  # handled: no traceback
    assert result.output.splitlines()[-1] == f"Error: {var}='abc' is not valid: expected " + (
        "a positive integer." if var == "KILN_WORKERS" else "0 or 1."
    )
    assert not (tmp_path / "out").exists()


def test_bundle_show_needs_no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KILN_WORKERS", "abc")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text('{"format": 1}')
    result = CliRunner().invoke(main, ["bundle", "show", str(tmp_path / "b")])
    assert result.output.startswith("Error: ")
    assert "'kernels' is missing" in result.output


# ---------------------------------------------------------------------------- kiln settings


def test_kiln_settings_shows_every_value_and_its_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KILN_WORKERS", "3")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "unlimited")
    monkeypatch.setenv("KILN_JOBS", "2")
    with settings.scope(job_timeout_s=5.0):
        result = CliRunner().invoke(main, ["settings"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["VARIABLE", "VALUE", "SOURCE"]
    rows = {line.split()[0]: line for line in lines[1:] if line.startswith("KILN_") and "  " in line}
    assert set(rows) == set(settings.variables().values())
    assert rows["KILN_WORKERS"].split() == ["KILN_WORKERS", "3", "environment"]
    assert rows["KILN_CACHE_DIR"].split() == ["KILN_CACHE_DIR", str(tmp_path / "c"), "environment"]
    assert rows["KILN_CACHE_MAX_MB"].split() == ["KILN_CACHE_MAX_MB", "unlimited", "environment"]
    assert rows["KILN_JOB_TIMEOUT_S"].split() == ["KILN_JOB_TIMEOUT_S", "5.0", "scope"]
    assert rows["KILN_MEMORY_CACHE_MB"].split() == ["KILN_MEMORY_CACHE_MB", "512", "default"]
    assert rows["KILN_AUTOTUNE"].split() == ["KILN_AUTOTUNE", "0", "default"]
    assert "KILN_JOBS is not a kiln setting; did you mean KILN_WORKERS? (it is ignored)" in lines
    short = [line for line in lines if str(tmp_path) not in line]
    assert max(len(line) for line in short) <= 100


def test_kiln_settings_shows_a_bad_value_and_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_MEMORY_POLL_S", "inf")
    result = CliRunner().invoke(main, ["settings"])
    assert result.exit_code == 1
    [row] = [line for line in result.output.splitlines() if line.startswith("KILN_MEMORY_POLL_S")]
    assert row.split() == ["KILN_MEMORY_POLL_S", "'inf'", "not", "valid", "(environment)"]
    assert result.output.splitlines()[-1].startswith("Error: KILN_MEMORY_POLL_S='inf' is not valid")


# ---------------------------------------------------------------------------- the cache cap setting


def test_cache_cap_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert settings.from_env({}).cache_max_mb == settings.DEFAULT_CACHE_MAX_MB == 10240
    for unlimited in ("0", "unlimited", "NONE"):
        assert settings.from_env({"KILN_CACHE_MAX_MB": unlimited}).cache_max_mb is None
    assert settings.from_env({"KILN_CACHE_MAX_MB": "500"}).cache_max_mb == 500
    for bad in ("-1", "1.5", "10G", str((1 << 30) + 1)):
        with pytest.raises(SettingsError, match="KILN_CACHE_MAX_MB"):
            settings.from_env({"KILN_CACHE_MAX_MB": bad})
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "5")
    pool = kiln.CompilePool(cache_dir=tmp_path, start=False)
    assert pool.store is not None
    assert pool.store.max_bytes == 5 << 20
    pool.shutdown()

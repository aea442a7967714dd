"""The command line: every kiln error is one ``Error:`` line on stderr and a non-zero exit,
never a traceback; ``kiln report --db`` never advises deleting a file it did not write;
``kiln demo`` refuses unknown archs up front and honours KILN_WORKERS / KILN_JOB_TIMEOUT_S."""

from __future__ import annotations

import gzip
import io
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from triton_kiln import settings
from triton_kiln.cli import main
from triton_kiln.demo.run import demo_settings


def _kiln(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``kiln ...`` in a real process (what a user sees on a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "triton_kiln", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0]


def test_a_bad_setting_is_one_error_line() -> None:
    line = _one_error_line(_kiln("report", env={"KILN_WORKERS": "abc"}))
    assert "KILN_WORKERS='abc' is not valid" in line


def test_an_out_of_range_setting_is_one_error_line() -> None:
    line = _one_error_line(_kiln("report", env={"KILN_MEMORY_POLL_S": "inf"}))
    assert "KILN_MEMORY_POLL_S='inf'" in line


def test_report_on_a_foreign_file_never_advises_deleting_it(tmp_path: Path) -> None:
    archive = tmp_path / "some.tgz"
    archive.write_bytes(gzip.compress(b"the user's own data" * 100))
    before = archive.read_bytes()
    line = _one_error_line(_kiln("report", "--db", str(archive)))
    assert "is not a kiln tuning database (not an SQLite file)" in line
    assert "delete" not in line.lower()
    assert archive.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["some.tgz"]  # no -wal / -shm


@pytest.mark.parametrize("kind", ["foreign-sqlite", "header-only", "damaged"])
def test_report_on_other_databases_is_one_error_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "data.db"
    if kind == "foreign-sqlite":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE photos (name TEXT)")
    elif kind == "header-only":
        path.write_bytes(b"SQLite format 3\x00" + b"\0" * 84)  # a header and nothing else
    else:
        damaged = bytearray(b"SQLite format 3\x00" + os.urandom(4096))
        # Header bytes 18-19 (write/read version) say "rollback journal": random ones are 2 (WAL)
        # one run in 256, and SQLite then puts -wal and -shm files beside the file even when it
        # opens it read-only (SQLite's doing, not a write of kiln's).
        damaged[18:20] = b"\x01\x01"
        path.write_bytes(bytes(damaged))
    before = path.read_bytes()
    line = _one_error_line(_kiln("report", "--db", str(path)))
    assert "not a readable kiln tuning database" in line
    assert "delete" not in line.lower()
    assert path.read_bytes() == before  # opened read-only: no kiln tables written into it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.db"]


def test_bundle_show_on_bad_bundles_is_one_error_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"not an archive")
    assert "is not a readable bundle archive" in _one_error_line(_kiln("bundle", "show", str(junk)))

    hostile = tmp_path / "hostile.tgz"
    with tarfile.open(hostile, "w:gz") as tar:
        data = b'{"format": 1, "kernels": 5}'
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert "kernels: expected a list" in _one_error_line(_kiln("bundle", "show", str(hostile)))

    missing_field = tmp_path / "dir-bundle"
    missing_field.mkdir()
    (missing_field / "manifest.json").write_text('{"format": 1}')
    assert "the field 'kernels' is missing" in _one_error_line(_kiln("bundle", "show", str(missing_field)))


def test_demo_refuses_an_unknown_arch_up_front() -> None:
    result = CliRunner().invoke(main, ["demo", "--arch", "12"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: kiln demo: GPUTarget arch 12 is not a CUDA compute capability")
    assert "supported: 70, 72, 75, 80" in result.output
    assert "LLVM" not in result.output
    assert "compiling" not in result.output  # nothing was started


def test_demo_refuses_out_of_range_workers_up_front() -> None:
    result = CliRunner().invoke(main, ["demo", "--workers", "100000"])
    assert result.exit_code == 1
    assert "workers=100000 (KILN_WORKERS) is not valid" in result.output
    assert "compiling" not in result.output


def test_demo_honours_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KILN_WORKERS", raising=False)
    monkeypatch.delenv("KILN_JOB_TIMEOUT_S", raising=False)
    workers, timeout = demo_settings(None, None)
    assert (workers, timeout) == (min(8, settings.current().workers), 5.0)  # the demo's defaults
    monkeypatch.setenv("KILN_WORKERS", "3")
    monkeypatch.setenv("KILN_JOB_TIMEOUT_S", "7.5")
    assert demo_settings(None, None) == (3, 7.5)
    assert demo_settings(2, 4.0) == (2, 4.0)  # --workers / --timeout beat the variables
    with settings.scope(job_timeout_s=9.0):
        assert demo_settings(None, None) == (3, 9.0)


# --- `kiln compile`'s arguments (an audit's cases; each failed before) ---

ADD_SIGNATURE = "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n=i32"
ADD_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("raise RuntimeError('boom at import')\n",
         "importing 'raising' raised RuntimeError: boom at import (raising.py:1)"),
        ("import helper_of_raising\n",
         "importing 'raising' raised ValueError: deep (helper_of_raising.py:3)"),
        ("x = = 1\n", "importing 'raising' raised SyntaxError: invalid syntax (raising.py, line 1)"),
        ("import sys\n\nsys.exit(3)\n", "importing 'raising' raised SystemExit: 3 (raising.py:3)"),
    ],
    ids=["runtime-error", "in-a-module-it-imports", "syntax-error", "sys-exit"],
)  # fmt: skip
def test_a_module_that_fails_at_import_is_one_error_line(tmp_path: Path, source: str, expected: str) -> None:
    (tmp_path / "raising.py").write_text(source)
    (tmp_path / "helper_of_raising.py").write_text("def f():\n    pass\nraise ValueError('deep')\n")
    result = _kiln("compile", "raising:add_kernel", "--signature", ADD_SIGNATURE, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    line = _one_error_line(result)
    assert expected in line, line


def test_a_py_path_that_is_missing_or_shadowed_is_one_error_line(tmp_path: Path) -> None:
    work1, work2 = tmp_path / "work1", tmp_path / "work2"
    work1.mkdir()
    work2.mkdir()
    (work2 / "copy.py").write_text(ADD_KERNEL)
    missing = _one_error_line(_kiln("compile", "./nofile.py:k", "--signature", ADD_SIGNATURE, cwd=work1))
    assert "./nofile.py: no such file" in missing, missing
    shadowed = _one_error_line(
        _kiln("compile", "../work2/copy.py:add_kernel", "--signature", ADD_SIGNATURE, cwd=work1)
    )
    assert "../work2/copy.py is shadowed by the module 'copy'" in shadowed, shadowed
    assert "rename" in shadowed, shadowed
    assert "has no 'add_kernel'" not in shadowed


@pytest.mark.timeout(300)
def test_a_py_path_in_another_folder_compiles(tmp_path: Path) -> None:
    work1, work2 = tmp_path / "work1", tmp_path / "work2"
    work1.mkdir()
    work2.mkdir()
    (work2 / "kern_by_path.py").write_text(ADD_KERNEL)
    result = _kiln(
        "compile", "../work2/kern_by_path.py:add_kernel", "--signature", ADD_SIGNATURE, "--constexpr",
        "BLOCK=64", "--workers", "1", "--cache-dir", str(tmp_path / "cache"), cwd=work1,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "1 of 1 compiled" in result.stdout


@pytest.mark.parametrize(
    ("flag", "expected", "variable"),
    [
        (["--workers", "0"], "--workers 0: expected 1 to ", "KILN_WORKERS"),
        (["--workers", "100000"], "--workers 100000: expected 1 to ", "KILN_WORKERS"),
        (["--timeout", "0"], "--timeout 0: expected", "KILN_JOB_TIMEOUT_S"),
        (["--timeout", "nan"], "--timeout nan: expected", "KILN_JOB_TIMEOUT_S"),
    ],
    ids=["workers-0", "workers-too-many", "timeout-0", "timeout-nan"],
)
def test_compile_flags_errors_name_the_flag(flag: list[str], expected: str, variable: str) -> None:
    args = [
        "compile",
        "support.kernels:add_kernel",
        "--signature",
        ADD_SIGNATURE,
        "--constexpr",
        "BLOCK=64",
        *flag,
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert expected in result.output, result.output
    assert variable not in result.output
    assert "compiled on" not in result.output

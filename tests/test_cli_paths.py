"""What ``kiln report`` and ``kiln bundle`` read and write, as a user without write access meets
them (an audit's cases; each failed before): a report is read from a database in a directory the
user cannot write, and leaves no -wal/-shm file behind; an output path kiln cannot write is one
``Error:`` line naming the user's path and its option (never a hidden temporary file or a bare
errno), said before any work; ``bundle show`` names a bundle once.

Tests run as root here, and root writes everywhere: a command runs in a real process whose
capability bounding set lacks CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (``setpriv``), so a
directory of mode 0555 is one it cannot write. (Run as another user, the command needs no
``setpriv``.) Without either, the tests that need it skip, saying why.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_tuning_db import write_v1_database
from triton_kiln.tuning import ConfigResult, TuningDatabase

ROOT = Path(__file__).resolve().parents[1]
_DROP = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def _result(label: str, ms: float) -> ConfigResult:
    return ConfigResult(
        label=label,
        config={"kwargs": {}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None},
        status="ok",
        reason=None,
        compile_s=0.5,
        runtime_ms=ms,
        runtime_ms_p20=ms,
        runtime_ms_p80=ms,
        max_abs_diff=None,
        artifact_key=None,
    )


def _add_run(db: TuningDatabase, kernel: str) -> None:
    run = db.begin_run(kernel, "k" * 64, '["4096"]', "NVIDIA H200", "9.0", "3.6.0", default_label="A")
    db.record(run, _result("A", 2.0))
    db.record(run, _result("B", 1.0))
    db.finish_run(run, "B", 3.0, 1.0)


def _database(path: Path, *kernels: str) -> Path:
    """A real tuning database, written by kiln and closed (so no -wal/-shm beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with TuningDatabase(path) as db:
        for kernel in kernels:
            _add_run(db, kernel)
    return path


def _kiln(*args: str, cwd: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "triton_kiln", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """``tmp_path/ro`` (mode 0555) and the command prefix under which it cannot be written."""
    ro = tmp_path / "ro"
    ro.mkdir()
    yield ro, _no_write_prefix(ro)
    ro.chmod(0o755)


def _no_write_prefix(ro: Path) -> list[str]:
    ro.chmod(0o555)
    prefix = _DROP if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv is missing: no way to take away write access")
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", f"open({str(ro / 'probe')!r}, 'w')"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode == 0:
        os.unlink(ro / "probe")
        pytest.skip(f"{ro} (mode 0555) is still writable under {prefix or 'this user'}: cannot test")
    return prefix


def _snapshot(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


# ---------------------------------------------------------------------------- reading a database


def test_report_reads_a_database_in_a_directory_it_cannot_write(
    tmp_path: Path, read_only_dir: tuple[Path, list[str]]
) -> None:
    """Audit: ``Error: ro/good.db is an SQLite file but not a readable kiln tuning database
    (attempt to write a readonly database)``."""
    ro, prefix = read_only_dir
    ro.chmod(0o755)
    _database(ro / "good.db", "matmul", "softmax")
    ro.chmod(0o555)
    before = _snapshot(ro)
    result = _kiln("report", "--db", "ro/good.db", cwd=tmp_path, prefix=prefix)
    assert result.returncode == 0, result.stderr
    assert "kernel softmax" in result.stdout
    assert "kernel matmul" in result.stdout
    assert "* B" in result.stdout
    assert _snapshot(ro) == before  # nothing written, no -wal / -shm


def test_report_reads_a_version_1_database_it_cannot_write_without_changing_it(
    tmp_path: Path, read_only_dir: tuple[Path, list[str]]
) -> None:
    ro, prefix = read_only_dir
    ro.chmod(0o755)
    write_v1_database(ro / "old.db")
    ro.chmod(0o555)
    before = _snapshot(ro)
    result = _kiln("report", "--db", "ro/old.db", cwd=tmp_path, prefix=prefix)
    assert result.returncode == 0, result.stderr
    assert "* B" in result.stdout
    assert _snapshot(ro) == before


def test_report_sees_what_a_live_writer_committed(
    tmp_path: Path, read_only_dir: tuple[Path, list[str]]
) -> None:
    """With another process's connection open (its -wal holds commits not yet in the file), the
    report reads through the -wal: it is not an outdated copy."""
    ro, prefix = read_only_dir
    ro.chmod(0o755)
    db = TuningDatabase(_database(ro / "live.db", "matmul"))
    try:
        _add_run(db, "committed_in_the_wal")
        ro.chmod(0o555)
        result = _kiln("report", "--db", "ro/live.db", cwd=tmp_path, prefix=prefix)
        assert result.returncode == 0, result.stderr
        assert "kernel committed_in_the_wal" in result.stdout
    finally:
        db.close()


@pytest.mark.parametrize(
    "extra", [[], ["--html", "page.html"], ["--json", "out"]], ids=["table", "html", "json"]
)
def test_report_leaves_no_wal_or_shm_files_and_the_database_unchanged(
    tmp_path: Path, extra: list[str]
) -> None:
    path = _database(tmp_path / "db" / "good.db", "matmul")
    before = _snapshot(path.parent)
    assert sorted(before) == ["good.db"]
    result = _kiln("report", "--db", str(path), *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _snapshot(path.parent) == before


# ---------------------------------------------------------------------------- output paths


@pytest.mark.parametrize(
    ("args", "shown"),
    [(["--html", "ro/x.html"], "--html ro/x.html"), (["--json", "ro"], "--json ro"),
     (["--json", "ro/runs/new"], "--json ro/runs/new")],
    ids=["html", "json-dir", "json-new-dir"],
)  # fmt: skip
def test_report_output_in_a_directory_it_cannot_write(
    tmp_path: Path, read_only_dir: tuple[Path, list[str]], args: list[str], shown: str
) -> None:
    """Audit: ``Permission denied: '.../ro/.x.html.550fod6i.tmp'``."""
    ro, prefix = read_only_dir
    _database(tmp_path / "good.db", "matmul")
    line = _one_error_line(_kiln("report", "--db", "good.db", *args, cwd=tmp_path, prefix=prefix))
    assert line == f"Error: cannot write {shown}: the directory ro is not writable", line
    assert list(ro.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "shown"),
    [(["--html", "afile/x.html"], "--html afile/x.html"), (["--json", "afile/out"], "--json afile/out"),
     (["--html", "afile/deeper/x.html"], "--html afile/deeper/x.html")],
    ids=["html", "json", "html-deeper"],
)  # fmt: skip
def test_report_output_under_a_file(tmp_path: Path, args: list[str], shown: str) -> None:
    _database(tmp_path / "good.db", "matmul")
    (tmp_path / "afile").write_text("mine")
    line = _one_error_line(_kiln("report", "--db", "good.db", *args, cwd=tmp_path))
    assert line == f"Error: cannot write {shown}: afile is a file, not a directory", line
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.fixture(scope="module")
def recorded_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kiln cache holding one recorded, tuned variant (a real sm_90 compile of add_kernel)."""
    from support.bundle_maker import compile_parts
    from triton_kiln.artifacts.store import ArtifactStore
    from triton_kiln.bundle.index import write_record

    base = tmp_path_factory.mktemp("recorded")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
        record, artifact = compile_parts(base / "pool-cache")
    cache = base / "cache"
    ArtifactStore(cache).put(artifact)
    write_record(cache, record, record.entries[0])
    return cache


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["x.tgz", "bundle-dir"])
def test_bundle_save_in_a_directory_it_cannot_write(
    tmp_path: Path, read_only_dir: tuple[Path, list[str]], recorded_cache: Path, name: str
) -> None:
    ro, prefix = read_only_dir
    args = ("bundle", "save", f"ro/{name}", "--cache-dir", str(recorded_cache))
    line = _one_error_line(_kiln(*args, cwd=tmp_path, prefix=prefix))
    assert line == f"Error: cannot write the bundle ro/{name}: the directory ro is not writable", line
    assert list(ro.iterdir()) == []


@pytest.mark.timeout(300)
def test_bundle_save_under_a_file(tmp_path: Path, recorded_cache: Path) -> None:
    """Audit: ``bundle save /etc/passwd/x.tgz`` printed ``[Errno 17] File exists: '/etc/passwd'``."""
    (tmp_path / "passwd").write_text("root:x:0:0")
    line = _one_error_line(
        _kiln("bundle", "save", "passwd/x.tgz", "--cache-dir", str(recorded_cache), cwd=tmp_path)
    )
    assert line == "Error: cannot write the bundle passwd/x.tgz: passwd is a file, not a directory", line
    assert (tmp_path / "passwd").read_text() == "root:x:0:0"
    ok = _kiln("bundle", "save", "fine/x.tgz", "--cache-dir", str(recorded_cache), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr  # a directory that does not exist yet is made
    assert "add_kernel: 1 variant(s)" in ok.stdout


# ---------------------------------------------------------------------------- bundle show


def test_bundle_show_names_a_directory_without_a_manifest_once(tmp_path: Path) -> None:
    """Audit: ``bundle show d`` said ``d: d: manifest.json is missing``."""
    (tmp_path / "d").mkdir()
    line = _one_error_line(_kiln("bundle", "show", "d", cwd=tmp_path))
    assert line == "Error: d: manifest.json is missing from the bundle", line


def test_sqlite_sees_the_database_the_tests_write(tmp_path: Path) -> None:
    """The fixture's database is in WAL mode, as kiln writes it (the case of the -shm file)."""
    path = _database(tmp_path / "good.db", "matmul")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()

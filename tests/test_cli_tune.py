"""``kiln tune MODULE:FUNCTION`` on the CPU: its refusals, and its report of a real tuning database.

The GPU is the one thing faked here (``torch.cuda.is_available``), and only where a test needs the
command to get past its GPU check; without a GPU (CI) the refusal itself runs for real. The tuning
runs are written through the database's API, as the autotuner writes them (``tune_workloads``);
``tests/test_cli_tune_gpu.py`` tunes real kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from triton_kiln.cli import main
from triton_kiln.cli.tune import format_report
from triton_kiln.tuning import ConfigResult, TuningDatabase
from triton_kiln.tuning.recent import RunOutcome, runs_since

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The one fake: torch says a GPU is there (the command's checks after it are what is tested).

    The command takes the process's pool (``kiln.get_pool()``) on the test's cache: a pool of its
    own here, shut down after, so later tests get a fresh one."""
    from triton_kiln.pool import pool as pool_mod

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pool_mod, "_DEFAULT_POOL", None)
    yield
    made = pool_mod._DEFAULT_POOL
    if made is not None:
        made.shutdown(wait=True, cancel_futures=True)


def _tune(*args: str) -> object:
    return CliRunner().invoke(main, ["tune", *args])


def test_compile_bundle_points_to_kiln_tune(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "compile",
            "support.farm_kernels:tuned_scale",
            "--signature",
            "x_ptr=*fp32",
            "--bundle",
            str(tmp_path / "b"),
        ],
    )
    assert result.exit_code == 1
    assert "kiln tune MODULE:FUNCTION --bundle PATH" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the machine without a GPU")
def test_without_a_gpu_one_clear_error_line_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "called"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}",
        "KILN_CACHE_DIR": str(tmp_path / "cache"),
        "TUNE_MARKER": str(marker),
    }
    result = subprocess.run(
        [sys.executable, "-m", "triton_kiln", "tune", "support.tune_workloads:touch"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: kiln tune needs a GPU"), lines[0]
    assert "torch.cuda.is_available() is False" in lines[0]
    assert "`kiln compile MODULE:KERNEL --target cuda:90` fills the kiln cache without one" in lines[0]
    assert not marker.exists()  # the workload was never called
    assert not (tmp_path / "cache").exists()  # nor anything started that makes the cache


def test_a_spec_that_is_not_module_function_is_refused_before_the_gpu_check() -> None:
    result = _tune("no_colon_here")
    assert result.exit_code == 2
    assert "'no_colon_here' is not MODULE:FUNCTION" in result.output


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_module_here:warm_up", "cannot import 'no_such_module_here'"),
        ("support.tune_workloads:no_such_function", "'support.tune_workloads' has no 'no_such_function'"),
        (
            "support.tune_workloads:NOT_CALLABLE",
            "support.tune_workloads:NOT_CALLABLE is an int, not a function",
        ),
        ("support.tune_workloads:needs_arguments", "takes arguments (n); FUNCTION is called with none"),
    ],
)
def test_a_workload_that_cannot_be_called_is_one_error(spec: str, expected: str, tmp_path: Path) -> None:
    result = _tune(spec, "--no-install", "--cache-dir", str(tmp_path / "cache"))
    assert result.exit_code == 1, result.output
    assert expected in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("fake_gpu")
def test_the_report_lists_each_run_and_strict_fails_on_one_without_a_config(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = [
        "support.tune_workloads:write_runs",
        "--no-install",
        "--cache-dir",
        str(cache),
        "--json",
        str(tmp_path / "s.json"),
    ]
    result = _tune(*args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "tuned 2 key(s) of 2 kernel(s)" in out
    assert "on NVIDIA H100 80GB HBM3 (capability 9.0); 1 without a working config" in out
    assert 'scale_kernel  key {"n": 4096}: BLOCK=128  (0.0125 ms; 4 tried, 2 ok, 1 pruned; 2.5 s)' in out
    assert "1 failed: compile crashed: SIGABRT" in out
    assert "1 failed: wrong output" in out
    assert 'norm_kernel  key {"n": 8}: no config worked  (1 tried; 1.0 s)' in out
    assert "1 failed: out of resources" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert [run["kernel"] for run in summary["runs"]] == ["scale_kernel", "norm_kernel"]
    assert summary["runs"][0]["best_config"]["kwargs"] == {"BLOCK": 128}
    assert summary["runs"][0]["failed"] == {"compile crashed: SIGABRT": 1, "wrong output": 1}
    assert summary["error"] is None
    # --strict: a run without a working config fails the exit; the earlier runs are not reported again.
    strict = _tune(*args, "--strict")
    assert strict.exit_code == 1, strict.output
    assert strict.output.count("scale_kernel  key") == 1


@pytest.mark.usefixtures("fake_gpu")
def test_a_workload_that_raises_is_an_error_and_what_it_tuned_is_still_reported(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = _tune("support.tune_workloads:write_then_fail", "--no-install", "--cache-dir", str(cache),
                   "--bundle", str(tmp_path / "b.tgz"))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert (
        "Error: support.tune_workloads:write_then_fail raised RuntimeError: the workload's third shape ran "
        "out of memory (at tune_workloads.py:" in result.output
    )
    assert 'scale_kernel  key {"n": 64}: BLOCK=64' in result.output
    # no variant of it was launched through kiln here (the run was written by hand): no bundle, said so
    assert "Error: no bundle written to" in result.output
    assert "no tuned variants recorded in" in result.output
    assert not (tmp_path / "b.tgz").exists()


@pytest.mark.usefixtures("fake_gpu")
def test_nothing_tuned_says_why_and_a_bundle_needs_a_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "called"
    monkeypatch.setenv("TUNE_MARKER", str(marker))
    result = _tune("support.tune_workloads:touch", "--no-install", "--cache-dir", str(tmp_path / "c"),
                   "--bundle", str(tmp_path / "b"))  # fmt: skip
    assert marker.read_text() == "called"
    assert result.exit_code == 1, result.output
    assert "nothing was tuned in" in result.output
    assert "nothing was tuned in this run; pass --kernel NAME" in result.output
    lone = _tune("support.tune_workloads:touch", "--kernel", "scale_kernel")
    assert lone.exit_code == 2
    assert "give --bundle PATH too" in lone.output


def test_runs_since_reads_only_the_runs_begun_after_the_start(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite3") as db:
        for index in range(5):  # before the session: never listed
            old = db.begin_run("old_kernel", "c" * 64, f'{{"n": {index}}}', "GPU", "9.0", "3.6.0", None)
            db.record(old, ConfigResult("BLOCK=64", {"kwargs": {"BLOCK": 64}}, "ok", runtime_ms=1.0))
            db.finish_run(old, "BLOCK=64", 1.0, 1.0)
        started = time.time()
        ids = []
        for index in range(3):
            run = db.begin_run("new_kernel", "d" * 64, f'{{"n": {index}}}', "GPU", "9.0", "3.6.0", None)
            db.record(run, ConfigResult("BLOCK=64", {"kwargs": {"BLOCK": 64}}, "ok", runtime_ms=1.0))
            ids.append(run)
        for run in ids[:2]:
            db.finish_run(run, "BLOCK=64", 1.0, 1.0)
        for page in (1, 2, 64):  # a page at a time, doubling: the same runs
            recent = runs_since(db, started, page=page)
            assert [run.run_id for run in recent] == ids
        outcomes = [RunOutcome.of(run) for run in recent]
    assert [o.succeeded for o in outcomes] == [True, True, False]
    assert outcomes[2].lines() == ['new_kernel  key {"n": 2}: did not finish  (1 measured before it stopped)']
    text = format_report(outcomes, 3.0, tmp_path / "t.sqlite3")
    assert text.splitlines()[0] == (
        "tuned 3 key(s) of 1 kernel(s) in 3.0 s on GPU (capability 9.0); 1 without a working config"
    )


@pytest.mark.timeout(300)
def test_kiln_compiles_binaries_are_the_ones_the_autotuner_looks_up(tmp_path: Path) -> None:
    """`kiln compile` then `kiln tune` on the same cache compiles nothing: the autotuner's requests
    carry Triton's specialization of the real call (``tt.divisibility`` 16 on aligned pointers and
    on integers that are multiples of 16), and so do ``kiln compile``'s, built through the
    autotuner's own ``request_for`` from stand-in arguments (``--value n=4096``: the call's size)."""
    from support.farm_kernels import tuned_scale
    from triton_kiln.artifacts.store import ArtifactStore
    from triton_kiln.autotuner.compile_requests import request_for
    from triton_kiln.triton_compat import GPUTarget

    cache = tmp_path / "cache"
    result = CliRunner().invoke(
        main,
        ["compile", "support.farm_kernels:tuned_scale", "--signature", "x_ptr=*fp32,out_ptr=*fp32,n=i32",
         "--value", "n=4096", "--target", "cuda:90", "--workers", "2", "--cache-dir", str(cache)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "3 of 3 compiled" in result.output
    x, out = torch.randn(4096), torch.zeros(4096)  # a real call's arguments (the GPU is not needed)
    store = ArtifactStore(cache)
    wanted = [
        request_for(tuned_scale.fn, c, (x, out, 4096), {}, GPUTarget("cuda", 90, 32))[0]
        for c in tuned_scale.configs
    ]
    missing = [r for r in wanted if store.get(r.key, quiet=True) is None]
    assert not missing, f"{len(missing)} of {len(wanted)}; a real call's attrs: {dict(missing[0].attrs)}"


@pytest.mark.usefixtures("fake_gpu")
def test_with_a_remote_cache_the_output_says_runs_go_there_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_REMOTE_CACHE", "redis://kiln:s3cret@127.0.0.1:1/0")
    result = _tune(
        "support.tune_workloads:write_runs", "--no-install", "--cache-dir", str(tmp_path / "cache")
    )
    assert result.exit_code == 0, result.output
    assert "tuning results also in the remote cache redis://kiln:***@127.0.0.1:1/0" in result.output
    assert "s3cret" not in result.output


@pytest.mark.usefixtures("fake_gpu")
def test_a_remote_cache_needs_no_redis_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kiln speaks RESP2 itself: ``KILN_REMOTE_CACHE`` works on a machine without redis-py."""
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis: ModuleNotFoundError
    monkeypatch.setenv("KILN_REMOTE_CACHE", "redis://kiln:s3cret@127.0.0.1:1/0")
    result = _tune(
        "support.tune_workloads:write_runs", "--no-install", "--cache-dir", str(tmp_path / "cache")
    )
    assert result.exit_code == 0, result.output
    assert "tuning results also in the remote cache redis://kiln:***@127.0.0.1:1/0" in result.output
    assert "s3cret" not in result.output


# ------------------------------------------------ --bundle and --json checked before the workload runs
# Found by an audit: an unwritable --bundle passed the early check and failed only after the workload
# (minutes of tuning on a GPU), and the --json summary was then never written either.

UNDER_A_FILE = "/etc/passwd is"  # a path under a regular file: refused even for root
PROC = "/proc"  # procfs: no new file, even for root (whose permission bits say it may write)


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.parametrize(
    ("option", "path", "why"),
    [
        ("--bundle", "/etc/passwd/x.tgz", UNDER_A_FILE),
        ("--bundle", "/etc/passwd/sub/bundle-dir", UNDER_A_FILE),
        ("--bundle", "/proc/x.tgz", PROC),
        ("--json", "/etc/passwd/s.json", UNDER_A_FILE),
        ("--json", "/proc/s.json", PROC),
    ],
)
def test_an_unwritable_bundle_or_json_path_is_refused_before_the_workload_runs(
    option: str, path: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "called"
    monkeypatch.setenv("TUNE_MARKER", str(marker))
    result = _tune(
        "support.tune_workloads:touch", "--no-install", "--cache-dir", str(tmp_path / "c"), option, path
    )
    assert result.exit_code != 0, result.output
    assert not marker.exists(), "the workload ran before the path was checked"
    error = next(line for line in result.output.splitlines() if line.startswith("Error: "))
    assert option in error, error  # the option, and the part of its path that is wrong
    assert why in error, error
    assert "Traceback" not in result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's override of file modes (setpriv)")
@pytest.mark.parametrize("option", ["--bundle", "--json"])
def test_a_read_only_directory_is_refused_before_the_workload_runs(option: str, tmp_path: Path) -> None:
    """A 0555 directory, with the command run as its owner without root's override of modes (as
    any user but root runs it); the GPU faked in that process as ``fake_gpu`` fakes it here."""
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o555)
    read_only.chmod(0o555)
    marker = tmp_path / "called"
    path = read_only / ("b.tgz" if option == "--bundle" else "s.json")
    args = [
        "tune",
        "support.tune_workloads:touch",
        "--no-install",
        "--cache-dir",
        str(tmp_path / "c"),
        option,
        str(path),
    ]
    code = (
        "import sys, torch; torch.cuda.is_available = lambda: True\n"
        "from triton_kiln.cli import main; main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}", "TUNE_MARKER": str(marker)}
    result = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c", code, *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert not marker.exists(), "the workload ran before the path was checked"
    error = next(line for line in result.stderr.splitlines() if line.startswith("Error: "))
    assert option in error, error
    assert f"{read_only} is not writable" in error, error


@pytest.mark.usefixtures("fake_gpu")
@pytest.mark.timeout(300)
def test_a_bundle_that_fails_after_tuning_still_writes_the_json_and_says_where_the_results_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "out"  # free when checked; the workload puts a regular file there
    monkeypatch.setenv("TUNE_BLOCK", str(blocked))
    cache = tmp_path / "cache"
    result = _tune("support.tune_workloads:tune_then_block_the_bundle", "--no-install",
                   "--cache-dir", str(cache), "--kernel", "add_kernel", "--bundle", str(blocked / "b.tgz"),
                   "--json", str(tmp_path / "s.json"))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert 'add_kernel  key {"n": 4096}: BLOCK=1024' in result.output
    bundle = blocked / "b.tgz"
    assert (
        f"Error: cannot write --bundle {bundle}: {blocked} is a file, not a directory; no bundle was "
        f"written; the tuning results are in the tuning database {cache / 'tuning.sqlite3'}" in result.output
    )
    assert f"`kiln bundle save PATH --cache-dir {cache}`" in result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["bundle"] is None
    assert [run["kernel"] for run in summary["runs"]] == ["add_kernel"]

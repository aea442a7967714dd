"""The pool's folder in TMPDIR (``kiln-pool-*``): removed at every normal exit of a process that
used the process-wide pool, and swept by the next pool when its process was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import triton_kiln

TESTS = Path(__file__).resolve().parent
SRC = Path(triton_kiln.__file__).resolve().parents[1]  # the children import the kiln under test

_USE_THE_DEFAULT_POOL = """\
import sys
import triton_kiln
from triton_kiln.compile.request import CompileRequest
from triton_kiln.triton_compat import GPUTarget
from support import kernels

request = CompileRequest(
    kernels.add_kernel,
    {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    {"BLOCK": 64},
    options={"num_warps": 4},
    target=GPUTarget("cuda", 90, 32),
)
pool = triton_kiln.get_pool()
assert pool.submit(request).result(timeout=120).binary
print("compiled", flush=True)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    return {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
        "KILN_DISK_CACHE": "0",  # every run starts its pool: nothing comes from a cache
        "KILN_CACHE_DIR": str(tmp_path / "cache"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        "KILN_WORKERS": "1",
    }


def _pool_folders(tmp_path: Path) -> list[str]:
    return sorted(name for name in os.listdir(tmp_path / "tmp") if name.startswith("kiln-pool-"))


ENDINGS = {
    "the script ends": "",
    "sys.exit(3)": "sys.exit(3)",
    "an uncaught exception": "raise RuntimeError('the script fails')",
}


@pytest.mark.timeout(600)
def test_three_normal_exits_leave_no_pool_folder(tmp_path: Path) -> None:
    env = _env(tmp_path)
    for ending, code in ENDINGS.items():
        script = _USE_THE_DEFAULT_POOL + code + "\n"
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert "compiled" in done.stdout, (ending, done.stderr)
        assert done.returncode in (0, 1, 3), (ending, done.stderr)
        assert _pool_folders(tmp_path) == [], ending


@pytest.mark.timeout(600)
def test_a_killed_processs_folder_is_swept_by_the_next_pool(tmp_path: Path) -> None:
    env = _env(tmp_path)
    script = _USE_THE_DEFAULT_POOL + "import time\ntime.sleep(600)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the zygote is killed with it
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "compiled"
        [left] = _pool_folders(tmp_path)
        os.killpg(child.pid, signal.SIGKILL)  # nothing of it runs an exit handler
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    deadline = time.monotonic() + 10
    while (
        any(p.pid != os.getpid() and _holds(p, left) for p in psutil.process_iter())
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert _pool_folders(tmp_path) == [left]  # the killed process left its folder

    done = subprocess.run(
        [sys.executable, "-c", _USE_THE_DEFAULT_POOL], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _pool_folders(tmp_path) == []  # swept when the next pool started; its own removed at exit


def _holds(process: psutil.Process, folder: str) -> bool:
    """Whether ``process`` (a worker of the killed pool, say) still has the folder in its TMPDIR."""
    try:
        return folder in process.environ().get("TMPDIR", "")
    except psutil.Error:
        return False


# ---------------------------------------------------------------------------- the sweep itself


def _folder(root: Path, pid: int, start_ms: int) -> Path:
    path = root / f"kiln-pool-{pid}-{start_ms}-abc123"
    (path / "worker-0-x").mkdir(parents=True)
    (path / "worker-0-x" / "f.txt").write_text("left")
    return path


def test_the_sweep_removes_only_folders_whose_owner_is_gone(tmp_path: Path) -> None:
    from triton_kiln.pool import temp_root

    me = psutil.Process()
    started = round(me.create_time() * 1000)
    mine = _folder(tmp_path, os.getpid(), started)  # a live owner
    reused = _folder(tmp_path, os.getpid(), started - 3_600_000)  # this pid, but another process's
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = _folder(tmp_path, dead.pid, started)
    unnamed = tmp_path / "kiln-pool-abcdef"  # no owner in its name: not known to be orphaned
    unnamed.mkdir()
    outside = tmp_path / "precious"
    outside.mkdir()
    link = tmp_path / f"kiln-pool-{dead.pid}-1-link"
    link.symlink_to(outside)
    removed = temp_root.sweep(str(tmp_path))
    assert sorted(removed) == sorted([reused, gone])
    for kept in (mine, unnamed, outside):
        assert kept.is_dir(), kept
    assert link.is_symlink()


def test_a_pool_folder_names_its_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    from triton_kiln.pool import temp_root

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    made = Path(temp_root.make())
    assert made.parent == tmp_path
    assert made.name.startswith(f"kiln-pool-{os.getpid()}-")
    assert oct(made.stat().st_mode & 0o777) == "0o700"
    assert temp_root.sweep(str(tmp_path)) == []  # its owner (this process) runs

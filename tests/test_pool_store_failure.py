"""A kiln cache that cannot be written: the compile still succeeds, and the user is told, once.

Found by an audit: ``kiln compile ... --cache-dir RO`` (``RO`` a 0555 directory of the user's)
printed ``1 of 1 compiled`` and ``--json`` said ``"compiled": 1`` while the directory stayed empty;
the pool logged "could not store artifact" on the ``kiln.pool`` logger, which has only a
``NullHandler``, so nobody saw it. The caller got its binary, so the job still counts as compiled;
the warning (a :class:`~kiln.artifacts.store.CacheWarning`) names the directory, the system's
reason, and what to do, once per pool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request, is_cubin
from triton_kiln.artifacts.store import CacheWarning

ROOT = Path(__file__).resolve().parents[1]
SIGNATURE = "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n=i32"


def store_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


@pytest.mark.timeout(120)
def test_a_pool_whose_cache_cannot_be_written_compiles_and_warns_once(make_pool: Any, tmp_path: Path) -> None:
    """The store's directory taken by a regular file (a cache damaged from outside): every write
    fails, even for root."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "artifacts-v2").write_text("not a directory")
    pool = make_pool(workers=1, cache_dir=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the default filter would hide a repeat: count them all
        artifacts = [pool.compile(add_request(block)) for block in (64, 128)]
    assert all(is_cubin(artifact.binary) for artifact in artifacts)
    assert pool.stats.compiled == 2  # the callers got their binaries
    said = store_warnings(caught)
    assert len(said) == 1, said
    assert f"could not write compiled kernels to its cache {cache}" in said[0], said[0]
    assert "Not a directory" in said[0] or "File exists" in said[0], said[0]
    assert "KILN_CACHE_DIR" in said[0], said[0]


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's override of file modes (setpriv)")
def test_kiln_compile_into_a_read_only_cache_says_so_on_stderr_once(tmp_path: Path) -> None:
    """The audit's case: a 0555 cache directory of the user's, ``kiln compile`` run as its owner
    without root's override of file modes (as any other user runs it), two configs."""
    cache = tmp_path / "ro"
    cache.mkdir(mode=0o555)
    cache.chmod(0o555)
    command = [
        "setpriv", "--bounding-set=-dac_override,-dac_read_search",
        sys.executable, "-m", "triton_kiln", "compile", "support.kernels:add_kernel",
        "--signature", SIGNATURE, "--config", "BLOCK=64", "--config", "BLOCK=128", "--target", "cuda:90",
        "--workers", "1", "--cache-dir", str(cache), "--json", str(tmp_path / "s.json"),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
    }
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=110, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "2 of 2 compiled" in done.stdout
    assert json.loads((tmp_path / "s.json").read_text())["compiled"] == 2
    assert not any(cache.iterdir())
    lines = [line for line in done.stderr.splitlines() if "could not write compiled kernels" in line]
    assert len(lines) == 1, done.stderr
    assert f"its cache {cache}" in lines[0], lines[0]
    assert "Permission denied" in lines[0], lines[0]

"""Bundles on a real GPU: save after tuning, run in a fresh process with Triton blocked, adopt."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _tuned(pool: Any) -> Any:
    import triton_kiln as kiln
    from support import kernels

    configs = [kiln.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]
    return kiln.autotune(configs, key=["n"], pool=pool)(kernels.add_kernel)


_BLOCKED_RUN = """
import sys
import torch
torch.zeros(1, device="cuda")  # CUDA init: torch >= 2.11 imports Triton here itself (kernel registration)

def triton_modules():
    return {{m for m in sys.modules if m.split(".")[0] == "triton"}}

before = triton_modules()
calls = []
if "triton" in sys.modules:  # instrument every way into Triton's compiler
    import triton, triton.compiler.compiler as tcc
    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError("triton.compile was called")
    triton.compile = tcc.compile = refuse
    def refuse_jit(self, *a, **k):
        calls.append(a)
        raise AssertionError("Triton's JIT was called")
    import triton.runtime.jit as tjit
    tjit.JITFunction.run = refuse_jit
else:
    class BlockTriton:
        def find_spec(self, name, path=None, target=None):
            if name == "triton" or name.startswith("triton."):
                raise ImportError("Triton is blocked in this process: " + name)
    sys.meta_path.insert(0, BlockTriton())
import triton_kiln as kiln
bundle = kiln.load_bundle({path!r})
add = bundle["add_kernel"]
for n in ({n}, {n}):
    x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda"); out = torch.zeros_like(x)
    add[lambda m: ((m["n"] + m["BLOCK"] - 1) // m["BLOCK"],)](x, y, out, n)
    torch.testing.assert_close(out, 2 * x + y)
# a tuple grid: the whole call in kiln's C dispatcher
block = add.best_config["kwargs"]["BLOCK"]
out = torch.zeros_like(x)
add[((n + block - 1) // block,)](x, y, out, n)
torch.testing.assert_close(out, 2 * x + y)
assert not calls
new = triton_modules() - before - {{"triton.compiler.compiler", "triton.runtime.jit"}}
assert not new, f"kiln imported {{new}}"
variant = add.variant_for((x, y, out, n))
assert variant.launcher.is_fast, variant.launcher.fallback_reason
print("OK", variant.meta_extra, "Triton imported by torch:", bool(before))
"""


def _run_blocked(path: Path, n: int) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT / 'src'}:{env.get('PYTHONPATH', '')}"
    env["KILN_CACHE_DIR"] = str(path.parent / "fresh-cache")  # nothing cached: the bundle alone
    code = textwrap.dedent(_BLOCKED_RUN.format(path=str(path), n=n))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_save_then_fresh_process_runs_without_triton(
    make_pool: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import triton

    import triton_kiln as kiln

    caplog.set_level(logging.INFO, logger="kiln")
    pool = make_pool(workers=4)
    tuned = _tuned(pool)
    n = 100_000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros_like(x)
    tuned[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
    torch.testing.assert_close(out, 2 * x + y)
    assert any("tuned 4 configs on this call" in r.getMessage() for r in caplog.records)
    path = kiln.save_bundle(tmp_path / "add.tgz", tuned)
    stdout = _run_blocked(path, n)
    assert f"'BLOCK': {tuned.best_config.kwargs['BLOCK']}" in stdout

    # The same through the CLI, from what the run recorded in the kiln cache.
    from click.testing import CliRunner

    from triton_kiln.cli import main as cli

    cache = str(pool.settings.cache_dir)
    result = CliRunner().invoke(cli, ["bundle", "save", str(tmp_path / "cli-bundle"), "--cache-dir", cache])
    assert result.exit_code == 0, result.output
    _run_blocked(tmp_path / "cli-bundle", n)


def test_autotuner_adopts_a_loaded_bundle(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import triton

    import triton_kiln as kiln
    from triton_kiln.bundle import runtime

    tuned = _tuned(make_pool(workers=4))
    n = 50_000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros_like(x)
    grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)  # noqa: E731
    tuned[grid](x, y, out, n)
    path = kiln.save_bundle(tmp_path / "add", tuned)

    # A "new process": fresh database and cache, a new autotuner for the same kernel source.
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "other.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "other-cache"))
    monkeypatch.setattr(runtime, "_registry", [])
    kiln.load_bundle(path)
    caplog.set_level(logging.INFO, logger="kiln")
    pool = make_pool(workers=1)
    fresh = _tuned(pool)
    out.zero_()
    fresh[grid](x, y, out, n)
    torch.testing.assert_close(out, 2 * x + y)
    assert fresh.loaded_from == f"bundle {path}"
    assert fresh.last_run is None  # nothing was tuned
    assert pool.stats.submitted == 0  # nothing was compiled
    assert fresh.best_config.kwargs == tuned.best_config.kwargs
    assert any("from bundle" in r.getMessage() for r in caplog.records)
    out.zero_()
    fresh[grid](x, y, out, n)  # fast path now
    torch.testing.assert_close(out, 2 * x + y)

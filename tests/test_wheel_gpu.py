"""The wheel on a real GPU: installed in a fresh venv, kernels run through its prebuilt launcher
in processes with no C compiler reachable, and nothing is built.

Each test builds kiln's wheel with this Python (offline: ``pip wheel --no-build-isolation
--no-index --no-deps``; setuptools must be importable here), installs it in a fresh venv that
also sees this interpreter's torch and triton (:func:`wheel_build.install_in_venv`), and runs a
script with the venv's python, ``PATH`` stripped of every C compiler and ``CC=/bin/false``:

- a loaded kernel: a bundle the test process tuned and saved;
- a tuned kernel: ``kiln.autotune`` in that process (compile pool, native benchmark sandbox,
  kiln's launcher).

Triton itself compiles a C helper (``cuda_utils``) the first time its driver starts, and a C
launcher per kernel signature when its own launcher is used; kiln can't ship those. So the
first is built beforehand, with a compiler, into the Triton cache the script uses (Triton's
need, not kiln's), and the second must not happen: with ``CC=/bin/false`` it would fail the run.

Both check the outputs, that every launch went through kiln's launcher, that it is the wheel's
prebuilt module (``loaded_path()`` in the venv, no ``fallback_reason()``) and that no launcher
was built (``<KILN_CACHE_DIR>/native`` does not exist).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support.wheel_build import (
    LAUNCHER,
    ROOT,
    build_wheel,
    clean_env,
    install_in_venv,
    launcher_files,
    no_compiler_env,
)

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

torch = pytest.importorskip("torch")

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

REPORT = """
import json, shutil
from triton_kiln.launch import native
print("FOUND", json.dumps({
    "package": kiln.__file__,
    "compilers": [c for c in ("cc", "gcc", "clang") if shutil.which(c)],
    "loaded": native.loaded_path(),
    "fallback": native.fallback_reason(),
}))
"""

LOADED = """
import logging
logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(levelname)s %(message)s")
import torch
import triton_kiln as kiln
bundle = kiln.load_bundle({path!r})
add = bundle["add_kernel"]
n = {n}
x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda")


def run(grid):
    out = torch.zeros_like(x)
    add[grid](x, y, out, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + y)
    return out


for _ in range(2):
    out = run(lambda m: ((m["n"] + m["BLOCK"] - 1) // m["BLOCK"],))
block = add.best_config["kwargs"]["BLOCK"]
for _ in range(2):  # a tuple grid: the whole call in kiln's C dispatcher
    out = run(((n + block - 1) // block,))
variant = add.variant_for((x, y, out, n))
assert variant.launcher.is_fast, variant.launcher.fallback_reason
"""

TUNED = """
import logging
logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(levelname)s %(message)s")
import torch
import triton
import triton_kiln as kiln
import kernels  # the copy of support/kernels.py in the child's folder
configs = [kiln.Config({{"BLOCK": b}}, num_warps=w) for b in (256, 1024) for w in (2, 4)]
pool = kiln.CompilePool(workers=2)
try:
    tuned = kiln.autotune(configs, key=["n"], pool=pool)(kernels.add_kernel)
    n = {n}
    x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda")

    def run(grid):
        out = torch.zeros_like(x)
        tuned[grid](x, y, out, n)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, 2 * x + y)

    for _ in range(2):  # tunes, then the fast path
        run(lambda m: (triton.cdiv(n, m["BLOCK"]),))
    for _ in range(2):  # a tuple grid: the whole call in kiln's C dispatcher
        run((triton.cdiv(n, tuned.best_config.kwargs["BLOCK"]),))
    entries = [e for table in tuned._variants.tables.tables.values() for e in table.values()]
    assert entries, "no fast entry was registered"
    assert all(e.launcher.is_fast for e in entries), [e.launcher.fallback_reason for e in entries]
    print("TUNED", tuned.best_config)
finally:
    pool.shutdown(wait=True, cancel_futures=True)
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The venv's python and its site-packages, the wheel installed there."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.fail(
            "building kiln's wheel offline needs setuptools in this Python; carry its wheel "
            "(python3 -m pip download --no-deps setuptools -d .whl) like kiln's other dependencies"
        )
    work = tmp_path_factory.mktemp("wheel")
    wheel, _ = build_wheel(work)
    assert launcher_files(wheel) == [LAUNCHER + SUFFIX]
    python = install_in_venv(wheel, work / "venv")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=True,
    ).stdout.strip()
    return python, Path(site)


@pytest.fixture
def triton_cache(venv: tuple[Path, Path], tmp_path: Path) -> Path:
    """A Triton cache holding Triton's own C helper, built with a compiler by the venv's python."""
    cache = tmp_path / "child-triton-cache"
    warm = subprocess.run(
        [str(venv[0]), "-c", "import triton; triton.runtime.driver.active.get_current_target()"],
        capture_output=True,
        text=True,
        env=clean_env(TRITON_CACHE_DIR=str(cache)),
        timeout=300,
        check=False,
    )
    assert warm.returncode == 0, warm.stdout + warm.stderr
    return cache


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "tuning.sqlite3"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))


def _run_without_compiler(
    python: Path, site: Path, script: str, workdir: Path, triton_cache: Path
) -> tuple[dict[str, Any], str]:
    """Run ``script`` (then REPORT) with the venv's python, no C compiler reachable, fresh kiln
    state; return what REPORT found and the whole output. Asserts kiln came from the venv."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "run.py").write_text(textwrap.dedent(script) + textwrap.dedent(REPORT))
    env = no_compiler_env(workdir / "bin", cc="/bin/false")
    env.pop("PYTHONPATH", None)
    env["KILN_CACHE_DIR"] = str(workdir / "kiln-cache")
    env["KILN_TUNING_DB"] = str(workdir / "tuning.sqlite3")
    env["TRITON_CACHE_DIR"] = str(triton_cache)
    result = subprocess.run(
        [str(python), "run.py"],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    line = next(line for line in result.stdout.splitlines() if line.startswith("FOUND "))
    found = json.loads(line.removeprefix("FOUND "))
    assert Path(found["package"]).is_relative_to(site), found  # the installed wheel, not the checkout
    assert found["compilers"] == [], found
    assert found["loaded"] == str(site / (LAUNCHER + SUFFIX)), (found, output)
    assert found["fallback"] is None, found
    assert not (workdir / "kiln-cache" / "native").exists(), "kiln built a launcher"
    assert "LOG kiln.launch" not in output, output
    return found, output


def test_a_loaded_kernel_runs_through_the_prebuilt_launcher_with_no_compiler(
    venv: tuple[Path, Path], triton_cache: Path, make_pool: Any, tmp_path: Path
) -> None:
    import triton

    import triton_kiln as kiln
    from support import kernels

    configs = [kiln.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]
    tuned = kiln.autotune(configs, key=["n"], pool=make_pool(workers=4))(kernels.add_kernel)
    n = 100_003
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros_like(x)
    tuned[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n)
    torch.testing.assert_close(out, 2 * x + y)
    path = kiln.save_bundle(tmp_path / "add.tgz", tuned)
    python, site = venv
    _run_without_compiler(python, site, LOADED.format(path=str(path), n=n), tmp_path / "child", triton_cache)


def test_a_tuned_kernel_runs_through_the_prebuilt_launcher_with_no_compiler(
    venv: tuple[Path, Path], triton_cache: Path, tmp_path: Path
) -> None:
    python, site = venv
    workdir = tmp_path / "child"
    workdir.mkdir()
    shutil.copy2(ROOT / "tests" / "support" / "kernels.py", workdir / "kernels.py")
    _, output = _run_without_compiler(python, site, TUNED.format(n=100_003), workdir, triton_cache)
    assert "TUNED" in output
    assert "native sandbox could not start" not in output, output
    assert (workdir / "kiln-cache").is_dir()  # kiln's cache was used; its native/ was not

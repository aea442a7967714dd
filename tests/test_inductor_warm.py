"""kiln.inductor in a warm process: what Triton's cache already holds is loaded by Inductor's own
code (no round trip through kiln's pool, nothing compiled), and this process's Triton key comes
from kiln's stored key rather than a hash of libtriton.so."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from support.inductor_support import (
    cubin_hashes,
    fake_gpu,  # noqa: F401 - autouse fixture
    install_on,  # noqa: F401 - fixture
    parent_cannot_compile,  # noqa: F401 - fixture
    refuse_compiles,
    source,
    submit,
)

pytest.importorskip("torch._inductor.async_compile")

import triton_kiln.inductor as kiln_inductor
from triton_kiln import CompilePool


def test_a_config_in_tritons_cache_is_loaded_not_sent_to_kiln(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A warm process: Triton's cache holds every config's binary. Stock Inductor only loads them;
    kiln used to send each config to its pool twice (the job's compile_all, then
    ``_precompile_config``) and check Triton's cache again before loading."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    name, text = source("reduction")
    cold_pool = make_pool()
    install_on(cold_pool)
    cold, _ = submit(name, text).result(timeout=300)  # the cold process: compiled in kiln, seeded
    assert cold_pool.stats.compiled == len(cold.compile_results)
    kiln_inductor.uninstall()

    warm_pool = make_pool()  # a new process's pool: kiln's own cache is empty, Triton's is not
    install_on(warm_pool)
    request_parent_cannot_compile = refuse_compiles(monkeypatch)
    warm, _ = submit(name, text).result(timeout=300)
    assert cubin_hashes(warm) == cubin_hashes(cold)
    assert warm_pool.stats.submitted == 0  # no request reached kiln's pool
    assert request_parent_cannot_compile == []  # and nothing compiled here: a cache load


def test_a_warm_kernel_coordinate_descent_will_tune_starts_kilns_pool(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A warm max-autotune process loads every binary from Triton's cache, then coordinate descent
    compiles each tuned kernel's neighbours on its first launch. kiln's pool, started by nothing
    in a warm process, made that first tuning wait for its zygote (H100, the transformer block:
    its first tuned kernel 2.2-2.6 s against stock's 1.0-1.5 s, the warm first call 1.04-1.30x
    stock's). Loading a kernel coordinate descent will tune starts the pool in the background;
    loading one it will not tune starts nothing, and neither load compiles anything."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    name, plain = source("pointwise")
    _, tuned = source("pointwise", tuned=True)
    cold_pool = make_pool()
    install_on(cold_pool)
    submit(name, plain).result(timeout=300)  # the cold process: both texts share these binaries
    kiln_inductor.uninstall()

    warm_pool = make_pool(start=False)
    install_on(warm_pool)
    parent_compiled = refuse_compiles(monkeypatch)
    submit(name, plain).result(timeout=300)
    assert not warm_pool.started  # nothing will compile: nothing starts
    submit(name, tuned).result(timeout=300)
    assert warm_pool.started  # coordinate descent will compile: the zygote gets ready now
    assert warm_pool.stats.submitted == 0  # both loads were loads
    assert parent_compiled == []


def test_a_config_not_in_tritons_cache_still_goes_to_kiln(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "empty-triton-cache"))
    pool = make_pool()
    install_on(pool)
    kernel, _ = submit(*source("pointwise")).result(timeout=300)
    assert pool.stats.compiled == len(kernel.compile_results) == 2
    assert parent_cannot_compile == []


def test_install_seeds_this_processs_triton_key(tmp_path: Path) -> None:
    """After install(), this process's ``triton_key()`` is kiln's stored key (a file read), not
    Triton's own hash of its sources and libtriton.so (0.3-0.8 s on a warm process's path)."""
    code = (
        "import torch._inductor.async_compile, triton.runtime.cache as c\n"
        "import triton_kiln.inductor as k\n"
        "from triton_kiln.triton_compat import core\n"
        "from triton_kiln.pool import get_pool\n"
        "k.install()\n"
        "own = core._TRITONS_OWN\n"
        "print(own is not None and c.triton_key is not own)\n"
        "k.uninstall(); get_pool().shutdown(wait=True, cancel_futures=True)\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "KILN_CACHE_DIR": str(tmp_path), "KILN_WORKERS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


def test_a_config_compile_all_settled_is_not_checked_again(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Inductor's own loop, after compile_all seeded Triton's cache, only loads: each config goes
    through kiln's request and slot computation once, not a second time in _precompile_config."""
    from triton_kiln.inductor.config_compiler import ConfigCompiler

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    calls: list[object] = []
    submit_config = ConfigCompiler.submit

    def counting(self: ConfigCompiler, autotuner: object, cfg: object) -> object:
        calls.append(cfg)
        return submit_config(self, autotuner, cfg)

    monkeypatch.setattr(ConfigCompiler, "submit", counting)
    pool = make_pool()
    install_on(pool)
    kernel, _ = submit(*source("pointwise")).result(timeout=300)
    assert len(kernel.compile_results) == 2
    assert len(calls) == 2  # compile_all's; Inductor's loop then loaded them
    assert pool.stats.submitted == 2
    assert parent_cannot_compile == []


def test_a_config_whose_compile_raised_raises_its_error_not_a_parent_compile(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    parent_cannot_compile: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The compile's own error (here a ``tl.static_assert``) reaches Inductor as itself, from
    kiln's worker: Inductor's loop is not let through to compile that config in this process."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    name, text = source("pointwise", rename="triton_poi_fused_assert_0")
    text = text.replace("    xnumel = 1048576\n", "    xnumel = 1048576\n    tl.static_assert(XBLOCK < 0)\n")
    pool = make_pool()
    install_on(pool)
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError, match="static_assert"):
        submit(name, text).result(timeout=300)
    assert parent_cannot_compile == []
    assert pool.stats.compiled == 0
    assert pool.stats.failed >= 1


_COMPILE_AND_REPORT = """
import psutil, torch
import triton_kiln.inductor as k
from triton_kiln.inductor import hooks
from triton_kiln.pool import get_pool

k.install()
pool = get_pool()
sidecar = hooks.current_pool().sidecar
def report(when):
    # kiln's pool here; kiln's Inductor sidecar; compile processes (kiln's zygotes and workers,
    # here or under the sidecar; not the sidecar itself, which only imports torch)
    kiln = [p for p in psutil.Process().children(recursive=True) if "triton_kiln" in " ".join(p.cmdline())]
    compiling = [p for p in kiln if "sidecar_main" not in " ".join(p.cmdline())]
    print(when, pool.started, sidecar is not None and sidecar.phase != "idle", len(compiling))
report("after-install")
def f(x):
    return torch.relu(x) * 2 + 1
out = torch.compile(f)(torch.arange(-4.0, 4.0))
assert out.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 5.0, 7.0], out
report("after-compile")
k.uninstall()
pool.shutdown(wait=True, cancel_futures=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sidecar", ["1", "0"])
def test_kilns_pool_starts_when_inductor_lowers_a_graph_and_never_in_a_warm_process(
    sidecar: str, tmp_path: Path
) -> None:
    """install() starts nothing. A graph Inductor lowers (its caches missed) starts kiln's
    compile processes; a second process that finds the graph in Inductor's caches starts none
    (on the H100, kiln's pool starting beside Dynamo's tracing was the one thing a warm kiln
    process did that a stock one did not). kiln's Inductor sidecar, which compiles nothing
    itself, starts when Inductor asks for its pool, where stock starts its own."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {
        **os.environ,
        "PYTHONPATH": src,
        "KILN_CACHE_DIR": str(tmp_path / "kiln"),
        "KILN_WORKERS": "1",
        "KILN_INDUCTOR_SIDECAR": sidecar,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0",
        "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "0",
    }

    def process() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", _COMPILE_AND_REPORT],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return [line for line in out.stdout.splitlines() if line.startswith("after-")]

    cold = process()
    started = sidecar == "1"  # the sidecar starts when Inductor asks for its pool, as stock's does
    assert cold[0] == "after-install False False 0"  # install() started nothing
    pool_here, sidecar_started, compiling = cold[1].split()[1:]
    assert pool_here == "True"  # the lowered graph started kiln's pool (the sidecar was not ready)
    assert sidecar_started == str(started)
    assert int(compiling) >= 1
    warm = process()
    assert warm[0] == "after-install False False 0"
    assert warm[1].startswith("after-compile False ")  # kiln's pool here: not started
    assert warm[1].endswith(" 0")  # no compile process anywhere (the sidecar, if started, starts none)

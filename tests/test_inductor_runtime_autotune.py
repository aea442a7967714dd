"""A kernel's runtime autotune in kiln's sandbox, on CPU (``install(sandbox_benchmarks=True)``).

Inductor's own ``CachingAutotuner.autotune_to_one_config`` runs on a real kernel (the
user-kernel fixture, two configs compiled for sm_90 in kiln's pool); kiln's replacement of
``benchmark_all_configs`` sends the kernel, pickled by kiln as a compile worker sends it, to
kiln's real sandbox process, which rebuilds it there. The GPU's two steps are stood in, in
that process (``support.runtime_autotune_sandbox``): making the launchers and timing them; a
config's fault (an abort, a segfault, a hang, a sticky CUDA error) is made for real there. The
parent's launchers are stand-ins too (a launcher needs a CUDA driver): each holds its compile
result's config, as Inductor's do. ``tests/test_inductor_gpu.py`` runs the real thing."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import runtime_autotune_sandbox
from support.inductor_support import fake_gpu, install_on, precompiled, source  # noqa: F401 - fixtures

pytest.importorskip("torch._inductor.runtime.triton_heuristics")

import torch
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks
from triton_kiln import CompilePool, settings
from triton_kiln.inductor import InductorRuntimeAutotuneError, runtime_autotune
from triton_kiln.sandbox.call_client import spawned_alive
from triton_kiln.sandbox.call_messages import CallCrashedError, CallRaisedError, CallTimeoutError
from triton_kiln.triton_compat import inductor as compat

HANG_TIMEOUT_S = 8.0
FAULTS: dict[str, tuple[type[Exception], str]] = {
    "abort": (CallCrashedError, "SIGABRT"),
    "segv": (CallCrashedError, "SIGSEGV"),
    "hang": (CallTimeoutError, "did not finish in time"),
    "ima": (CallCrashedError, "sticky CUDA error"),
    "raise": (CallRaisedError, "the benchmark raised on its own"),
}


@dataclass(eq=False)
class StandInLauncher:
    """What Inductor's loop reads of a launcher: its config (and, in its debug log, these)."""

    config: Any
    n_regs: int = 32
    n_spills: int = 0
    shared: int = 0
    cache_hash: str = ""


def benchmark_all_configs_now() -> Any:
    return CachingAutotuner.__dict__["benchmark_all_configs"]


@pytest.fixture
def runtime(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[runtime_autotune.RuntimeAutotune]:
    """kiln.inductor installed with its sandbox, the sandbox's GPU steps stood in; after the
    test, no process of the sandbox's is left."""
    monkeypatch.setattr(runtime_autotune, "load_here", runtime_autotune_sandbox.load_here)
    monkeypatch.setattr(runtime_autotune, "time_here", runtime_autotune_sandbox.time_here)
    with settings.scope(bench_timeout_s=HANG_TIMEOUT_S):
        install_on(make_pool(workers=2))
        kiln_inductor.install(sandbox_benchmarks=True)
    timer = inductor_hooks.current_runtime_autotune()
    assert timer is not None
    yield timer
    pids = list(timer.sandbox.spawned_pids)
    kiln_inductor.uninstall()
    assert spawned_alive(pids) == [], f"sandbox processes left: {spawned_alive(pids)}"


def two_config_kernel(order: tuple[int, ...] = (4, 8)) -> Any:
    """The user-kernel fixture (configs of 4 and 8 warps) compiled, its launchers stand-ins in
    ``order`` of warps."""
    kernel = precompiled(*source("user_kernel"))
    by_warps = {r.config.num_warps: r.config for r in kernel.compile_results}
    assert sorted(by_warps) == [4, 8]
    kernel.launchers = [StandInLauncher(by_warps[w]) for w in order]
    return kernel


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_install_with_sandbox_replaces_benchmark_all_configs_and_gives_it_back(
    make_pool: Callable[..., CompilePool],
    install_on: Callable[[CompilePool], None],  # noqa: F811
) -> None:
    before = benchmark_all_configs_now()
    install_on(make_pool())
    assert benchmark_all_configs_now() is before  # install() alone leaves the timing to Inductor
    kiln_inductor.install(sandbox_benchmarks=True)
    assert benchmark_all_configs_now() is not before
    benchmarks, timer = inductor_hooks.current_benchmarks(), inductor_hooks.current_runtime_autotune()
    assert benchmarks is not None
    assert timer is not None
    assert timer.sandbox is benchmarks.sandbox  # one sandbox process for both kinds of timing
    kiln_inductor.install(sandbox_benchmarks=False)
    assert benchmark_all_configs_now() is before
    kiln_inductor.install(sandbox_benchmarks=True)
    kiln_inductor.uninstall()
    assert benchmark_all_configs_now() is before
    assert inductor_hooks.current_runtime_autotune() is None


def test_each_config_is_timed_in_the_sandbox_and_inductor_picks_the_fastest(
    runtime: runtime_autotune.RuntimeAutotune, tmp_path: Path
) -> None:
    kernel = two_config_kernel()
    log = tmp_path / "calls"
    kernel.autotune_to_one_config(json.dumps({"4": "ok:0.75", "8": "ok:0.25"}), str(log))
    assert [launcher.config.num_warps for launcher in kernel.launchers] == [8]
    seen = calls(log)
    assert [c["did"] for c in seen] == ["load", "time", "time"]
    assert {c["pid"] for c in seen} == set(runtime.sandbox.spawned_pids)  # the sandbox, not here
    assert os.getpid() not in {c["pid"] for c in seen}
    assert seen[0]["kernel"] == compat.kernel_label(kernel) == "add_kernel_0"
    assert seen[0]["configs"] == ["4", "8"]  # the kernel rebuilt there from kiln's payload
    assert [c.get("num_warps") for c in seen[1:]] == ["4", "8"]
    assert runtime.stats.kernels == 1
    assert runtime.stats.configs == 2
    assert runtime.stats.in_parent == []
    assert "bench" not in kernel.__dict__  # the stand-in for Inductor's bench is gone after


@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_a_config_that_faults_in_the_sandbox_is_skipped_and_the_next_is_timed(
    mode: str, runtime: runtime_autotune.RuntimeAutotune, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The 8-warp config faults first; the sandbox is replaced (a Python error keeps it), the
    kernel is sent again, and the 4-warp config is timed and chosen."""
    caplog.set_level(logging.WARNING, logger="kiln.inductor")
    kernel = two_config_kernel(order=(8, 4))
    log = tmp_path / "calls"
    kernel.autotune_to_one_config(json.dumps({"8": mode, "4": "ok:0.5"}), str(log))
    assert [launcher.config.num_warps for launcher in kernel.launchers] == [4]
    [skipped] = runtime.stats.skipped
    kind, text = FAULTS[mode]
    assert type(skipped.failure) is kind
    assert text in str(skipped.failure)
    assert "num_warps: 8" in skipped.config
    logged = [r.getMessage() for r in caplog.records if "skipped in its runtime autotune" in r.getMessage()]
    assert len(logged) == 1
    assert "add_kernel" in logged[0]
    assert text in logged[0]
    replaced = mode != "raise"
    loads = [c for c in calls(log) if c["did"] == "load"]
    assert len(loads) == (2 if replaced else 1)  # sent again to the process that replaced it
    assert len(runtime.sandbox.spawned_pids) == (2 if replaced else 1)
    assert len(spawned_alive(runtime.sandbox.spawned_pids)) == 1


def test_every_config_failing_raises_instead_of_running_the_kernel_here(
    runtime: runtime_autotune.RuntimeAutotune, tmp_path: Path
) -> None:
    kernel = two_config_kernel()
    with pytest.raises(InductorRuntimeAutotuneError) as caught:
        kernel.autotune_to_one_config(json.dumps({"4": "segv", "8": "ima"}), str(tmp_path / "calls"))
    message = str(caught.value)
    assert "add_kernel" in message
    assert "SIGSEGV" in message
    assert "sticky CUDA error" in message
    assert "was not run here" in message
    assert pickle.loads(pickle.dumps(caught.value)).failures == caught.value.failures


def test_arguments_the_sandbox_cannot_take_are_timed_here_with_the_reason(
    runtime: runtime_autotune.RuntimeAutotune, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kiln.inductor")
    kernel = two_config_kernel()
    assert runtime.timer(kernel, (torch.ones(4),), {}) is None  # a CPU tensor
    assert runtime.timer(kernel, (object(),), {}) is None
    assert [why for _, why in runtime.stats.in_parent] == [
        "a tensor on cpu",
        "an argument of type object",
    ]
    assert runtime.sandbox.calls == 0
    assert sum("runs in this process" in r.getMessage() for r in caplog.records) == 2


def test_the_payload_leaves_the_kernel_as_it_was_and_drops_only_hooks(tmp_path: Path) -> None:
    kernel = two_config_kernel()
    launchers = list(kernel.launchers)
    function = kernel.fn.fn
    kernel.save_cache_hook = lambda *args, **kwargs: None  # a hook of the parent's: not picklable
    payload = compat.kernel_payload(kernel)
    assert isinstance(payload, bytes)
    assert kernel.launchers == launchers
    assert kernel.fn.fn is function
    assert callable(kernel.save_cache_hook)
    # rebuilt in another process, as the sandbox rebuilds it
    out = unpickled_elsewhere(
        tmp_path,
        payload,
        "print(sorted(r.config.num_warps for r in k.compile_results), k.launchers, k.save_cache_hook)",
    )
    assert out == "[4, 8] [] None"


def unpickled_elsewhere(tmp_path: Path, payload: bytes, show: str) -> str:
    """What ``show`` prints of the kernel ``payload`` rebuilds (``k``) in another process, as the
    sandbox rebuilds it."""
    (tmp_path / "payload").write_bytes(payload)
    code = (
        "import sys\n"
        "from triton_kiln.triton_compat import inductor as compat\n"
        "k = compat.unpickle_kernel(open(sys.argv[1], 'rb').read())\n"
        f"{show}\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "payload")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_kernel_loaded_here_is_sent_without_the_handles_only_this_process_can_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU the runtime autotune's kernel has its binaries loaded here: each Triton kernel
    holds its module and function handles and its launcher, an object of a module Triton builds
    in this process (``__triton_launcher``), which no other process can import. Stood in here by
    a module made in this process: the payload leaves them out and the sandbox can rebuild the
    kernel; this process's kernel keeps them."""
    made_here = types.ModuleType("kiln_test_launcher_made_here")
    exec("class Launcher:\n    pass\n", made_here.__dict__)
    monkeypatch.setitem(sys.modules, made_here.__name__, made_here)
    kernel = two_config_kernel()
    binaries = [result.kernel for result in kernel.compile_results]
    for binary in binaries:
        binary._run, binary.module, binary.function = made_here.Launcher(), 1234, 5678
    payload = compat.kernel_payload(kernel)
    assert isinstance(payload, bytes)
    assert all(isinstance(b._run, made_here.Launcher) and b.module == 1234 for b in binaries)
    assert [result.kernel for result in kernel.compile_results] == binaries
    out = unpickled_elsewhere(
        tmp_path,
        payload,
        "print(sorted(r.config.num_warps for r in k.compile_results),"
        " {(r.kernel._run, r.kernel.module, r.kernel.function) for r in k.compile_results})",
    )
    assert out == "[4, 8] {(None, None, None)}"


def test_a_kernel_whose_binaries_do_not_pickle_is_not_sent() -> None:
    kernel = two_config_kernel()
    kernel.compile_results = [lambda: None]
    reason = compat.kernel_payload(kernel)
    assert isinstance(reason, str)
    assert reason.startswith("its compile_results cannot be pickled")


@pytest.mark.gpu
def test_on_a_gpu_a_config_with_an_illegal_memory_access_is_skipped_and_the_process_lives(
    tmp_path: Path,
) -> None:
    """The real thing, in a process of its own (the kernel's config would end a process's CUDA
    context): a user-defined kernel's 8-warp config stores far outside its output; Inductor's
    runtime autotune times both configs in kiln's sandbox, the 8-warp one is skipped with the
    illegal memory access, the 4-warp one runs here, the output is right, the context alive."""
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        "KILN_CACHE_DIR": str(tmp_path / "kiln"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "support.runtime_autotune_ima"],
        cwd=Path(__file__).resolve().parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["max_error"] < 1e-5, report
    assert report["context_alive"], report
    assert report["in_parent"] == [], report
    assert report["kernels"] >= 1, report
    [skipped] = report["skipped"]
    assert "num_warps: 8" in skipped[1], report
    assert "illegal memory access" in skipped[2], report
    assert report["restarts"] >= 1, report


@pytest.mark.parametrize(
    ("layout", "reach"),
    [
        ("contiguous", 48),
        ("transposed", 48),
        ("sliced with an offset", 1 + 2 * 8 + 3),  # rows 2-4, columns 3-6: not the 48 of its storage
        ("expanded", 8),  # 5 rows of one 8-element row
        ("strided gaps", 1 + 2 * 16 + 2 * 3),  # every other row, every third column, gaps between
        ("empty", 0),
    ],
)
def test_an_argument_reaches_the_sandbox_with_its_layout_and_the_elements_its_strides_reach(
    layout: str, reach: int
) -> None:
    """Inductor's kernels have their arguments' strides compiled in: the copy keeps sizes and
    strides, and holds every element those reach from the view's first one, and no more. The
    GPU's copies go through the same two functions (here on the CPU, device "cpu")."""
    base = torch.arange(6 * 8, dtype=torch.float32).reshape(6, 8)
    tensors = {
        "contiguous": base,
        "transposed": base.t(),
        "sliced with an offset": base[2:5, 3:7],
        "expanded": torch.arange(8.0).expand(5, 8),
        "strided gaps": base[::2, ::3],
        "empty": base[:0],
    }
    original = tensors[layout]
    host = runtime_autotune.to_host(original)
    assert host.flat.numel() == reach
    copied = runtime_autotune.from_host(host, "cpu")
    assert copied.shape == original.shape
    assert copied.stride() == original.stride()
    assert torch.equal(copied, original)

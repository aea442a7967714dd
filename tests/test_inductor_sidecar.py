"""kiln's Inductor sidecar (src/triton_kiln/inductor/sidecar.py), with real processes: each
compile job's in-process work (the kernel's module, its configs described, the kernel pickled)
runs in the sidecar, not in this process's threads, and gives Inductor's own binaries; a fault in
one config is still one lost config, reported here; a sidecar that dies or cannot start costs no
job (the jobs run in this process's threads); nothing is left running after uninstall."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from support.inductor_support import (
    KERNELS,
    cubin_hashes,
    fake_gpu,  # noqa: F401 - autouse fixture
    inductors_own,
    parent_cannot_compile,  # noqa: F401 - fixture
    source,
    submit,
)

pytest.importorskip("torch._inductor.async_compile")

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks
import triton_kiln.inductor.process_pool as inductor_process_pool
from triton_kiln.inductor import InductorKernelError
from triton_kiln.inductor.sidecar import Sidecar

TESTS = Path(__file__).resolve().parent
HOOK_DIR = TESTS.parent / "bench" / "inductor_fault_hook"
FAKE_GPU = "support.inductor_sidecar_fake_gpu"


def sidecar_processes(sidecar: Sidecar) -> list[psutil.Process]:
    """The sidecar and every process under it (its kiln zygote and workers)."""
    assert sidecar.stats.pid is not None
    try:
        top = psutil.Process(sidecar.stats.pid)
        return [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def wait_ready(sidecar: Sidecar, timeout: float = 240.0) -> None:
    """Start the sidecar (as Inductor's ``warm_pool()`` does) and wait until it takes jobs."""
    sidecar.start()
    deadline = time.monotonic() + timeout
    while sidecar.phase == "starting" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sidecar.phase == "ready", sidecar.stats


def wait_gone(processes: list[psutil.Process], timeout: float = 30.0) -> list[psutil.Process]:
    """Those of ``processes`` still running (zombies count as gone) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for proc in processes:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
            except psutil.NoSuchProcess:
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture
def sidecar_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., Sidecar]]:
    """``sidecar_on(*preload, env=...)``: kiln.inductor installed with its sidecar (which imports
    ``preload``, after the fake GPU driver, and sees ``env``), on a fresh kiln cache with two
    workers. After the test: uninstalled, and no process of the sidecar's left."""
    made: list[Sidecar] = []
    seen: list[psutil.Process] = []

    def install(*preload: str, env: dict[str, str] | None = None) -> Sidecar:
        paths = [
            str(TESTS),
            *(env or {}).pop("PYTHONPATH", "").split(os.pathsep),
            os.environ.get("PYTHONPATH", ""),
        ]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))
        monkeypatch.setenv("KILN_WORKERS", "2")

        def make(threads: int, timeout: float) -> Sidecar:
            made.append(Sidecar(threads, timeout, preload=(FAKE_GPU, *preload)))
            return made[-1]

        monkeypatch.setattr(inductor_hooks, "_sidecar", make)
        kiln_inductor.install(sidecar=True)
        pool = inductor_hooks.current_pool()
        assert pool is not None
        assert pool.sidecar is made[-1]
        return made[-1]

    yield install
    for sidecar in made:
        if sidecar.stats.pid is not None:
            seen.extend(sidecar_processes(sidecar))
    kiln_inductor.uninstall()
    left = wait_gone(seen)
    assert not left, f"processes left: {[(p.pid, p.cmdline()[-1][:60]) for p in left]}"


@pytest.fixture
def parent_jobs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernels whose job ran in this process's threads (kiln's in-process path)."""
    ran: list[str] = []
    original = inductor_process_pool.compile_job

    def recording(load_kernel: object, *args: object) -> object:
        ran.append(str(getattr(load_kernel, "args", ("?",))[0]))
        return original(load_kernel, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(inductor_process_pool, "compile_job", recording)
    return ran


@pytest.mark.timeout(600)
def test_each_kernel_kind_compiles_in_the_sidecar_to_inductors_own_binary(
    sidecar_on: Callable[..., Sidecar],
    parent_jobs: list[str],
    parent_cannot_compile: list[str],  # noqa: F811
) -> None:
    """Every job's work runs in the sidecar (not one in this process's threads, which before the
    sidecar ran them all), nothing compiles here, and each kernel is Inductor's own binary."""
    sidecar = sidecar_on()
    wait_ready(sidecar)
    futures = {kind: submit(*source(kind)) for kind in KERNELS}
    kernels = {kind: future.result(timeout=300)[0] for kind, future in futures.items()}
    assert parent_jobs == []
    assert parent_cannot_compile == []
    assert sidecar.stats.jobs == len(KERNELS)
    assert sidecar.stats.fallbacks == 0
    assert sidecar.stats.pid not in (None, os.getpid())
    assert sidecar.stats.startup_s is not None
    for kind, kernel in kernels.items():
        assert cubin_hashes(kernel) == cubin_hashes(inductors_own(*source(kind))), kind


@pytest.mark.timeout(600)
def test_jobs_never_wait_for_the_sidecar_to_start(
    sidecar_on: Callable[..., Sidecar],
    parent_jobs: list[str],
) -> None:
    """A job that comes while the sidecar imports torch (3-4 s, or ~14 s without bytecode
    caches) runs in this process's threads at once; once it is ready, jobs go to it."""
    sidecar = sidecar_on()
    early, _ = submit(*source("pointwise")).result(timeout=300)  # starts the sidecar, not waiting
    assert parent_jobs == [KERNELS["pointwise"]]
    assert sidecar.stats.fallbacks == 1
    wait_ready(sidecar)
    later, _ = submit(*source("reduction")).result(timeout=300)
    assert parent_jobs == [KERNELS["pointwise"]]
    assert sidecar.stats.jobs == 1
    assert len(early.compile_results) == 2
    assert later.compile_results


@pytest.mark.timeout(600)
def test_a_config_that_aborts_in_the_sidecars_pool_is_one_lost_config_reported_here(
    sidecar_on: Callable[..., Sidecar],
    parent_jobs: list[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """A real ``abort()`` in Triton's compile of one config, in a worker of the sidecar's kiln
    pool: the kernel keeps its other config, kiln's warning reaches this process's logging, and
    a kernel whose every config aborts is one ``InductorKernelError`` naming it."""
    fault_log = tmp_path / "fault.log"
    sidecar = sidecar_on(
        env={
            "PYTHONPATH": str(HOOK_DIR),
            "BENCH_FAULT": "abort",
            "BENCH_FAULT_NAMES": "add_kernel_kilnfault",
            "BENCH_FAULT_WARPS": "8",
            "BENCH_FAULT_LOG": str(fault_log),
        }
    )
    name, text = source("user_kernel", rename="add_kernel_kilnfault_abort")  # configs: 4 and 8 warps
    all_bad_name, all_bad_text = source("template_mm", rename="add_kernel_kilnfault_all_0")
    all_bad_text = all_bad_text.replace("num_warps=4,", "num_warps=8,", 1)
    wait_ready(sidecar)
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        kernel, _ = submit(name, text).result(timeout=300)
        error = submit(all_bad_name, all_bad_text).exception(timeout=300)
    assert [r.config.num_warps for r in kernel.compile_results] == [4]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert any(name in m and "num_warps: 8" in m and "SIGABRT" in m for m in skipped), skipped
    assert isinstance(error, InductorKernelError)
    assert error.kernel == all_bad_name
    assert "SIGABRT" in str(error)
    fired = [line for line in fault_log.read_text().splitlines() if line.strip()]
    assert fired  # the fault went off, and never in this process or in the sidecar
    assert all(f'"pid": {os.getpid()},' not in line for line in fired)
    assert all(f'"pid": {sidecar.stats.pid},' not in line for line in fired)
    assert parent_jobs == []


@pytest.mark.timeout(600)
def test_a_sidecar_killed_with_a_job_in_flight_loses_no_job(
    sidecar_on: Callable[..., Sidecar],
    parent_jobs: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGKILL to the sidecar while it holds a job: that job, and every later one, runs in this
    process's threads (compiles still in kiln's pool) with the right binary; the death is logged
    once with its signal; the sidecar's own processes (its kiln zygote) die with it."""
    sidecar = sidecar_on("support.inductor_sidecar_slow")
    wait_ready(sidecar)
    name, text = source("pointwise", rename="triton_poi_fused_slowjob_0")
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        in_flight = submit(name, text)
        deadline = time.monotonic() + 240
        while sidecar.stats.jobs < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sidecar.stats.jobs == 1
        processes = sidecar_processes(sidecar)
        os.kill(processes[0].pid, signal.SIGKILL)
        kernel, _ = in_flight.result(timeout=300)
        later, _ = submit(*source("reduction")).result(timeout=300)
    assert cubin_hashes(kernel) == cubin_hashes(inductors_own(name, text))
    assert later.compile_results
    assert parent_jobs == [name, KERNELS["reduction"]]
    assert sidecar.phase == "dead"
    deaths = [r.getMessage() for r in caplog.records if "sidecar" in r.getMessage()]
    (death,) = deaths
    assert "SIGKILL" in death
    assert not wait_gone(processes)


@pytest.mark.timeout(600)
def test_a_sidecar_that_cannot_start_loses_no_job(
    sidecar_on: Callable[..., Sidecar],
    parent_jobs: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sidecar = sidecar_on("support.inductor_sidecar_broken")
    with caplog.at_level(logging.WARNING, logger="kiln.inductor"):
        sidecar.start()
        deadline = time.monotonic() + 240
        while sidecar.phase != "dead" and time.monotonic() < deadline:
            time.sleep(0.05)
        kernel, _ = submit(*source("pointwise")).result(timeout=300)
    assert len(kernel.compile_results) == 2
    assert parent_jobs == [KERNELS["pointwise"]]
    (message,) = [r.getMessage() for r in caplog.records if "sidecar" in r.getMessage()]
    assert "failed to start" in message
    assert "this sidecar was made not to start" in message


@pytest.mark.timeout(600)
def test_uninstall_stops_the_sidecar_and_everything_under_it(sidecar_on: Callable[..., Sidecar]) -> None:
    sidecar = sidecar_on()
    wait_ready(sidecar)
    submit(*source("pointwise")).result(timeout=300)
    processes = sidecar_processes(sidecar)
    assert len(processes) >= 2  # the sidecar and its kiln zygote at least
    kiln_inductor.uninstall()
    assert sidecar.phase == "closed"
    assert not wait_gone(processes)


def test_kiln_inductor_sidecar_0_uses_this_processs_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_INDUCTOR_SIDECAR", "0")
    kiln_inductor.install()
    try:
        pool = inductor_hooks.current_pool()
        assert pool is not None
        assert pool.sidecar is None
    finally:
        kiln_inductor.uninstall()
    monkeypatch.delenv("KILN_INDUCTOR_SIDECAR")  # the default: the sidecar, made but not started
    kiln_inductor.install()
    try:
        pool = inductor_hooks.current_pool()
        assert pool is not None
        assert pool.sidecar is not None
        assert pool.sidecar.phase == "idle"
    finally:
        kiln_inductor.uninstall()


@pytest.mark.timeout(600)
def test_a_forked_child_never_uses_its_parents_sidecar(sidecar_on: Callable[..., Sidecar]) -> None:
    """A process forked after the sidecar started (a DataLoader worker, say) must not write to the
    parent's socket: its copy of the sidecar starts over, idle, and a job there runs in the
    child's own threads."""
    sidecar = sidecar_on()
    wait_ready(sidecar)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running anything of the parent's
        os.close(read_end)
        report = f"{sidecar.phase} {sidecar.stats.pid} {sidecar.stats.jobs}"
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert report == "idle None 0"
    assert sidecar.phase == "ready"  # the parent's is untouched
    kernel, _ = submit(*source("pointwise")).result(timeout=300)
    assert kernel.compile_results
    assert sidecar.stats.jobs == 1


@pytest.mark.timeout(600)
def test_an_idle_sidecar_exits_and_a_later_job_starts_a_new_one(
    sidecar_on: Callable[..., Sidecar],
    parent_jobs: list[str],
) -> None:
    """After ``KILN_IDLE_S`` without a job the sidecar and its kiln pool exit (a cold process
    gives them back); the next demand starts a new sidecar, and jobs go to it."""
    sidecar = sidecar_on()
    sidecar.idle_s = 1.0
    wait_ready(sidecar)
    first = sidecar_processes(sidecar)
    compiled, _ = submit(*source("reduction")).result(timeout=300)
    assert compiled.compile_results
    assert sidecar.stats.jobs == 1
    first = [*first, *sidecar_processes(sidecar)]  # its kiln pool's zygote and workers too
    deadline = time.monotonic() + 60
    while sidecar.phase != "idle" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sidecar.phase == "idle", sidecar.stats
    assert sidecar.stats.idle_releases == 1
    assert not wait_gone(first), "the idle sidecar's processes are still running"
    wait_ready(sidecar)  # a later graph's start()
    assert sidecar.stats.pid != first[0].pid
    again, _ = submit(*source("pointwise")).result(timeout=300)
    assert again.compile_results
    assert sidecar.stats.jobs == 2
    assert parent_jobs == []  # every job ran in a sidecar


def test_inductors_process_pool_starts_no_sidecar(sidecar_on: Callable[..., Sidecar]) -> None:
    """Inductor asks for its pool in a warm process too (its graphs from Inductor's caches,
    nothing to compile): that starts no process of kiln's; a graph lowered does."""
    from torch._inductor.async_compile import AsyncCompile

    sidecar = sidecar_on()
    AsyncCompile.process_pool()
    time.sleep(0.5)
    assert sidecar.phase == "idle"
    assert sidecar.stats.pid is None

"""kiln serving Helion's autotuning loop, on the CPU: Helion's real ``benchmark(configs)`` (its
codegen, precompile phase, benchmark loop, failure bookkeeping), real Triton compiles for sm_90 in
kiln's pool, and Helion's own benchmark jobs sent to kiln's sandbox. Only what needs a GPU is a
stand-in: the sandbox process that would run the jobs (:mod:`support.helion_sandbox`), and
Helion's SM count. The worker's crash table runs in real sandbox processes (no GPU needed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")

import helion.runtime

import test_helion_kernels as hk
import triton_kiln as kiln
import triton_kiln.helion
from support import helion_faults
from support import helion_sandbox as sandboxes
from support.basics import SM90
from support.helion_sandbox import StandInSandbox, job_source
from triton_kiln import CompilePool, settings
from triton_kiln.helion import adapter, compat
from triton_kiln.helion.errors import SandboxCudaError
from triton_kiln.helion.sandbox_worker import KilnBenchmarkWorker, SandboxUnavailableError
from triton_kiln.sandbox.call_client import CallSandbox, spawned_alive
from triton_kiln.sandbox.call_messages import CallCrashedError, CallFailure, CallTimeoutError
from triton_kiln.sandbox.torch_worker import STICKY_EXIT

FAULTY_WARPS = 16  # the config a test's sandbox fails has this many warps; the others have 4


@pytest.fixture
def loop(make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInSandbox]:
    """kiln's pool (sm_90) and a stand-in sandbox configured for Helion; a fake SM count."""
    monkeypatch.setattr(helion.runtime, "get_num_sm", lambda device, reserved_sms=0: 132)
    sandbox = StandInSandbox()
    pool = make_pool(preload=[helion_faults.PRELOAD])
    previous = kiln.helion.configure(pool=pool, target=SM90, sandbox=sandbox)
    # kiln's loop (KILN_HELION_SANDBOX); the re-benchmarks run ahead only where a test asks, so
    # the others count Helion's own jobs
    with settings.scope(helion_sandbox=True, helion_verify_ahead=False):
        yield sandbox
    kiln.helion.configure(pool=previous.pool, target=previous.target, sandbox=previous.sandbox)


def _search(name: str = "add", **settings: Any) -> Any:
    settings.setdefault("autotune_baseline_fn", hk.eager(name))
    kernel = hk.make(name, autotune_random_seed=7, autotune_progress_bar=False, **settings)
    args = hk.inputs(name)
    return adapter.prepare_search(kernel.bind(args), args)


def _configs(search: Any, count: int) -> list[Any]:
    """``count`` distinct configs with 4 warps, the last with :data:`FAULTY_WARPS`."""
    gen = search.config_spec.create_config_generation()
    configs: list[Any] = []
    while len(configs) < count:
        config = gen.unflatten(gen.random_flat())
        config.config["num_warps"] = FAULTY_WARPS if len(configs) == count - 1 else 4
        if config not in configs:
            configs.append(config)
    return configs


def _is_faulty(job: Any) -> bool:
    return f"num_warps={FAULTY_WARPS}" in job_source(job)


def test_kilns_worker_serves_helions_provider_only_while_installed(loop: StandInSandbox) -> None:
    from helion.autotuner import LFBOTreeSearch
    from helion.autotuner.base_search import BaseSearch
    from helion.autotuner.benchmark_provider import LocalBenchmarkProvider

    defaults = BaseSearch.__init__.__defaults__
    search = _search()
    provider = search.benchmark_provider
    assert isinstance(provider, adapter.KilnBenchmarkProvider)
    assert isinstance(provider._benchmark_worker, KilnBenchmarkWorker)
    assert provider._benchmark_worker.sandbox is loop
    assert loop.starts >= 1  # started as the provider was made: it warms up during the baseline
    provider.cleanup()
    kiln.helion.install()
    try:
        bound, args = search.kernel, search.args
        assert LFBOTreeSearch(bound, args)._benchmark_provider_cls is adapter.KilnBenchmarkProvider
    finally:
        kiln.helion.uninstall()
    assert BaseSearch.__init__.__defaults__ is defaults  # Helion's own default, the same object
    helions = LFBOTreeSearch(bound, args)
    assert helions._benchmark_provider_cls is LocalBenchmarkProvider
    compat.prepare(helions)
    assert type(helions.benchmark_provider) is LocalBenchmarkProvider
    assert helions.benchmark_provider.__dict__["_benchmark_worker"] is None  # Helion's plain attribute
    helions.benchmark_provider.cleanup()


def test_with_the_sandbox_off_helion_keeps_its_own_worker(loop: StandInSandbox) -> None:
    with settings.scope(helion_sandbox=False):
        search = _search()
    provider = search.benchmark_provider
    assert provider.sandbox_worker is None
    assert provider._benchmark_worker is None  # Helion makes its own BenchmarkWorker on first use
    provider._benchmark_worker = "helion's"
    assert provider._benchmark_worker == "helion's"
    provider._benchmark_worker = None
    provider.cleanup()
    assert loop.jobs == []
    assert loop.starts == 0


def test_helions_own_jobs_go_to_the_sandbox_and_come_back_in_helions_format(loop: StandInSandbox) -> None:
    search = _search()
    provider = search.benchmark_provider
    configs = _configs(search, 4)
    results = provider.benchmark(configs)
    assert [r.status for r in results] == ["ok"] * 4
    assert [r.perf for r in results] == [sandboxes.LATENCY_MS] * 4  # Helion's BenchmarkResult
    kinds = [type(job) for job in loop.jobs]
    assert kinds.count(compat.BenchmarkJob) == 4
    assert kinds.count(compat.AccuracyCheckJob) == 4
    timing = next(job for job in loop.jobs if isinstance(job, compat.BenchmarkJob))
    assert (timing.warmup, timing.rep) == (1, 50)  # Helion's search timing, built by Helion
    assert os.path.exists(timing.args_path)  # Helion's saved arguments
    check = next(job for job in loop.jobs if isinstance(job, compat.AccuracyCheckJob))
    assert os.path.exists(check.baseline_path)  # Helion's baseline output
    # each job runs where Helion put the binaries kiln compiled: its per-autotune Triton cache
    assert {env["TRITON_CACHE_DIR"] for env in loop.envs} == {os.environ["TRITON_CACHE_DIR"]}
    assert all(label.startswith("Helion ") for label in loop.labels)
    provider.cleanup()


def test_each_config_is_benchmarked_as_its_compile_lands(loop: StandInSandbox) -> None:
    search = _search()
    provider = search.benchmark_provider
    provider.benchmark(_configs(search, 5))
    stats = provider.sandbox_worker.stats
    # Each job ran once, most ahead of Helion's loop (a config landing as the barrier lifts may be
    # claimed by Helion's own thread first); every job run ahead was taken by Helion.
    assert stats.jobs == len(loop.jobs) == 10
    assert "kiln-helion-stream" in loop.threads
    assert stats.streamed >= 1
    assert stats.taken_from_stream == stats.streamed
    assert loop.threads.count("kiln-helion-stream") == stats.streamed
    # by kind: a timing and an accuracy check per config, each call's wait counted
    assert {name: kind.calls for name, kind in stats.kinds.items()} == {
        "BenchmarkJob": 5,
        "AccuracyCheckJob": 5,
    }
    assert sum(kind.seconds for kind in stats.kinds.values()) == pytest.approx(stats.seconds)
    # each call's span, in the order calls ended, those run ahead marked so
    assert len(stats.spans) == stats.jobs
    assert sum(span.ahead for span in stats.spans) == stats.streamed
    assert all(span.start <= span.end for span in stats.spans)
    assert sorted(span.end for span in stats.spans) == [span.end for span in stats.spans]
    provider.cleanup()


def test_without_streaming_helion_runs_the_jobs_after_its_barrier(loop: StandInSandbox) -> None:
    with settings.scope(helion_stream=False):
        search = _search()
    provider = search.benchmark_provider
    results = provider.benchmark(_configs(search, 3))
    assert [r.status for r in results] == ["ok"] * 3
    assert set(loop.threads) == {"MainThread"}
    assert provider.sandbox_worker.stats.streamed == 0
    provider.cleanup()


def test_screening_times_each_streamed_config_briefly_and_helion_reads_that_timing(
    loop: StandInSandbox,
) -> None:
    """``KILN_HELION_SCREEN_MS``: a search timing run ahead of Helion gets the short window, and
    Helion's request for its own job (50 ms) is answered with it; a timing Helion's thread runs
    itself keeps Helion's window."""
    loop.latency = lambda job: job.rep / 100 if isinstance(job, compat.BenchmarkJob) else 0.0
    with settings.scope(helion_screen_ms=10):
        search = _search()
    provider = search.benchmark_provider
    results = provider.benchmark(_configs(search, 5))
    stats = provider.sandbox_worker.stats
    timings = [
        (thread, job.rep)
        for job, thread in zip(loop.jobs, loop.threads, strict=True)
        if isinstance(job, compat.BenchmarkJob)
    ]
    assert len(timings) == 5
    streamed = [rep for thread, rep in timings if thread == "kiln-helion-stream"]
    assert stats.screened == len(streamed) >= 1  # the timings run ahead, not the accuracy checks
    assert set(streamed) == {10}
    assert {rep for thread, rep in timings if thread != "kiln-helion-stream"} <= {50}
    # Helion's results: 0.1 ms where the screening timed the config, 0.5 ms where Helion did
    assert sorted(r.perf for r in results) == sorted(rep / 100 for _, rep in timings)
    assert all(job.warmup == 1 for job in loop.jobs if isinstance(job, compat.BenchmarkJob))
    provider.cleanup()


def test_screening_needs_the_stream_and_leaves_other_jobs_alone(loop: StandInSandbox) -> None:
    with settings.scope(helion_screen_ms=10, helion_stream=False):
        search = _search()
    assert search.benchmark_provider.sandbox_worker.screen_ms is None  # nothing runs ahead to screen
    search.benchmark_provider.cleanup()
    timing = next(iter(_timing_jobs(loop, 1)))
    assert compat.screened(timing, 10).rep == 10
    assert compat.screened(timing, 50) is None  # no longer than Helion's own window
    assert compat.screened(dataclasses.replace(timing, fixed_repetitions=3), 10) is None  # sized by count
    assert compat.screened(sandboxes.returns_latency, 10) is None  # not a timing
    worker = KilnBenchmarkWorker(loop, screen_ms=10)
    loop.jobs.clear()
    worker.run(timing, timeout=5)  # Helion's own request (a re-benchmark, a final verification)
    assert [job.rep for job in loop.jobs] == [50]
    assert worker.stats.screened == 0


def _timing_jobs(loop: StandInSandbox, count: int) -> list[Any]:
    """``count`` of Helion's search timings, built by Helion for a batch of configs."""
    search = _search()
    provider = search.benchmark_provider
    provider.benchmark(_configs(search, count))
    provider.cleanup()
    return [job for job in loop.jobs if isinstance(job, compat.BenchmarkJob)]


def _crashed(job: Any, label: str) -> CallFailure:
    return CallCrashedError(label, 0.2, "", ("Segmentation fault (kiln-injected)",), -11)


def _timed_out(job: Any, label: str) -> CallFailure:
    return CallTimeoutError(label, 30.0, "no answer within 30 s")


def _sticky(job: Any, label: str) -> CallFailure:
    text = "RuntimeError: CUDA error: an illegal memory access was encountered"
    return CallCrashedError(label, 0.1, text, (), STICKY_EXIT)


@pytest.mark.parametrize(
    ("fault", "status", "metric", "reason"),
    [
        (_crashed, "error", "num_worker_failures", "SIGSEGV"),
        (_timed_out, "timeout", "num_worker_failures", "did not finish in time"),
        # Helion's "unrecoverable runtime error" skip, as for its own worker's illegal memory access
        (_sticky, "error", "num_compile_failures", "illegal memory access"),
    ],
    ids=["crash", "hang", "illegal-memory-access"],
)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "after-barrier"])
def test_a_failure_in_the_sandbox_is_one_config_helion_skips(
    loop: StandInSandbox,
    fault: Callable[[Any, str], CallFailure],
    status: str,
    metric: str,
    reason: str,
    stream: bool,
) -> None:
    loop.fail = lambda job, label: fault(job, label) if _is_faulty(job) else None
    with settings.scope(helion_stream=stream):
        search = _search()
    provider = search.benchmark_provider
    before = getattr(provider._autotune_metrics, metric)
    starts = loop.starts
    results = provider.benchmark(_configs(search, 4))
    assert [r.status for r in results] == ["ok"] * 3 + [status]
    assert [math.isfinite(r.perf) for r in results] == [True] * 3 + [False]
    assert getattr(provider._autotune_metrics, metric) == before + 1  # Helion's own record
    assert loop.starts == starts + 1  # the replacement process was started at once
    # the failed config's accuracy check was not run (each check named by its config's source, the
    # faulty one marked, and the thread that ran it)
    checks = [
        (hashlib.sha256(job_source(job).encode()).hexdigest()[:8], _is_faulty(job), thread)
        for job, thread in zip(loop.jobs, loop.threads, strict=True)
        if isinstance(job, compat.AccuracyCheckJob)
    ]
    assert len(checks) == 3, checks
    skipped = provider.sandbox_worker.stats.skipped
    assert len(skipped) == 1
    assert reason in skipped[0].reason
    provider.cleanup()


# -- the worker on a real call sandbox: what Helion receives for each way a job can end ----------


@pytest.fixture
def real_worker() -> Iterator[KilnBenchmarkWorker]:
    sandbox = CallSandbox(timeout_s=30)
    yield KilnBenchmarkWorker(sandbox)
    sandbox.close()
    assert spawned_alive(sandbox.spawned_pids) == []


def test_real_sandbox_values_and_the_jobs_own_error(real_worker: KilnBenchmarkWorker) -> None:
    assert real_worker.run(sandboxes.returns_latency, timeout=30) == sandboxes.LATENCY_MS
    assert real_worker.alive()
    with pytest.raises(ValueError, match="a job's own error"):
        real_worker.run(sandboxes.raises_value_error, timeout=30)
    real_worker.shutdown()
    assert not real_worker.alive()
    assert real_worker.run(sandboxes.returns_latency, timeout=30) == sandboxes.LATENCY_MS
    # each kind's calls, their waits here and the jobs' own run there (a job ran shorter than its call)
    kinds = real_worker.stats.kinds
    assert {name: kind.calls for name, kind in kinds.items()} == {"function": 3}
    assert 0 < kinds["function"].job_seconds < kinds["function"].seconds


def test_real_sandbox_crash_hang_and_sticky_error_are_helions_worker_errors(
    real_worker: KilnBenchmarkWorker,
) -> None:
    with pytest.raises(compat.BenchmarkWorkerDied, match="SIGABRT") as died:
        real_worker.run(sandboxes.aborts, timeout=30)
    assert "kiln-injected abort" in str(died.value)
    with pytest.raises(compat.BenchmarkTimeout, match="did not finish in time"):
        real_worker.run(sandboxes.hangs, timeout=1.5)
    with pytest.raises(SandboxCudaError) as sticky:
        real_worker.run(sandboxes.sticky_cuda_error, timeout=30)
    assert compat.match_unrecoverable_runtime_error(sticky.value)  # Helion skips the config
    assert real_worker.run(sandboxes.returns_latency, timeout=30) == sandboxes.LATENCY_MS
    assert len(real_worker.stats.skipped) == 3


def test_a_sandbox_that_cannot_start_stops_the_search_with_what_to_do() -> None:
    sandbox = CallSandbox(timeout_s=30, warmup=sandboxes.warmup_fails)
    worker = KilnBenchmarkWorker(sandbox)
    try:
        with pytest.raises(SandboxUnavailableError, match="KILN_HELION_SANDBOX=0") as info:
            worker.run(sandboxes.returns_latency, timeout=30)
        assert isinstance(info.value, compat.BenchmarkWorkerUnkillable)  # Helion stops benchmarking
        assert "kiln-injected" in str(info.value)
    finally:
        sandbox.close()


def test_a_job_run_ahead_is_served_once_and_a_repeat_runs_again(loop: StandInSandbox) -> None:
    worker = KilnBenchmarkWorker(loop)
    served = worker.speculate(lambda: worker.run(sandboxes.returns_latency, timeout=5))
    assert served is not None
    assert served.value == sandboxes.LATENCY_MS
    assert worker.run(sandboxes.returns_latency, timeout=5) == sandboxes.LATENCY_MS
    assert (worker.stats.jobs, worker.stats.taken_from_stream) == (1, 1)
    assert worker.speculate(lambda: worker.run(sandboxes.returns_latency, timeout=5)) is None  # taken
    assert worker.run(sandboxes.returns_latency, timeout=5) == sandboxes.LATENCY_MS  # a new measurement
    assert worker.stats.jobs == 2


def test_the_gpu_fault_configs_compile_where_their_fault_is_at_launch(loop: StandInSandbox) -> None:
    """The GPU tests' illegal-memory-access and hang configs pass ptxas (their fault is in the
    launch); the abort config dies in the compiler. Real sm_90 compiles in kiln's pool."""
    search = _search("faulty_add")
    configs = []
    for (warps, stages), _fault in sorted(helion_faults.FAULTY_CONFIGS.items(), key=lambda kv: kv[1]):
        config = search.config_spec.default_config()
        config.config.update(num_warps=warps, num_stages=stages)
        configs.append(config)
    assert [
        helion_faults.FAULTY_CONFIGS[(c.config["num_warps"], c.config["num_stages"])] for c in configs
    ] == [
        "abort",
        "hang",
        "ima",
    ]
    assert adapter.precompile_phase(search, configs) == ["error", "ok", "ok"]
    search.benchmark_provider.cleanup()
    ptx = ".visible .entry k(\n\t.param .u64 p\n)\n.maxntid 128\n{\n\tret;\n}"
    assert "st.volatile.global.u32" in helion_faults.at_entry(ptx, helion_faults.BAD_STORE)


def _slow_batch(search: Any, warps_stages: tuple[tuple[int, int], ...]) -> list[Any]:
    """Members of ``faulty_add`` with these ``(num_warps, num_stages)``, as Helion's searches make
    them (``make_unbenchmarked``)."""
    members = []
    for warps, stages in warps_stages:
        config = search.config_spec.default_config()
        config.config.update(num_warps=warps, num_stages=stages)
        members.append(search.make_unbenchmarked(search.config_gen.flatten(config)))
    return members


def _rebenchmarks(loop: StandInSandbox) -> list[tuple[str, str]]:
    """Each re-benchmark job the sandbox ran (Helion's window: 200 ms): its config's warps, the thread."""
    return [
        (f"num_warps={job_source(job).split('num_warps=')[1].split(',')[0]}", thread)
        for job, thread in zip(loop.jobs, loop.threads, strict=True)
        if isinstance(job, compat.BenchmarkJob) and job.rep == 200
    ]


def _fast_at_4_warps(job: Any) -> float:
    return sandboxes.LATENCY_MS * (4 if "num_warps=2" in job_source(job) else 1)


def test_helions_rebenchmark_runs_while_a_slow_compile_holds_the_batch(loop: StandInSandbox) -> None:
    """Effort full re-benchmarks a batch's best configs after it; while one config still compiles
    (here 4 s), the GPU would idle: kiln runs those re-benchmarks then, and Helion's own
    re-benchmark takes their outcomes. The 2-warp configs time 4x the best: outside Helion's
    threshold (1.5) once the 4-warp ones have landed, so Helion re-benchmarks them not; kiln may
    have, if one landed first (the best it had seen then), in time the GPU had free."""
    loop.latency = _fast_at_4_warps
    with settings.scope(helion_verify_ahead=True):  # the default
        search = _search("faulty_add", autotune_rebenchmark_threshold=1.5)
    members = _slow_batch(search, ((4, 1), (4, 2), (2, 1), (2, 2), helion_faults.SLOW_CONFIG))
    search.benchmark_population(members)
    ahead = _rebenchmarks(loop)
    assert {thread for _, thread in ahead} == {"kiln-helion-stream"}
    assert [warps for warps, _ in ahead].count("num_warps=4") == 2  # during the slow compile
    search.rebenchmark_population(members)
    done = [warps for warps, _ in _rebenchmarks(loop)]
    # each 4- and 8-warp config re-benchmarked once (the 8-warp one landed last: the stream or
    # Helion ran it), Helion taking what ran ahead
    assert (done.count("num_warps=4"), done.count("num_warps=8")) == (2, 1)
    stats = search.benchmark_provider.sandbox_worker.stats
    assert stats.verified_taken >= 2
    assert stats.verified_ahead - stats.verified_taken == done.count("num_warps=2") <= 2
    assert [len(m.perfs) for m in members] == [2, 2, 1, 1, 2]  # Helion's timings, then its re-benchmark's
    search.benchmark_provider.cleanup()


@pytest.mark.parametrize(
    "scope",
    [{"helion_verify_ahead": False}, {"helion_verify_ahead": True}],
    ids=["setting-off", "effort-quick"],
)
def test_no_rebenchmark_runs_ahead_when_off_or_where_helion_re_benchmarks_nothing(
    loop: StandInSandbox, scope: dict[str, Any]
) -> None:
    loop.latency = _fast_at_4_warps
    with settings.scope(**scope):
        # effort full re-benchmarks within 1.5x of the best; effort quick's threshold (0.9) none
        off = not scope["helion_verify_ahead"]
        effort = {"autotune_rebenchmark_threshold": 1.5} if off else {"autotune_effort": "quick"}
        search = _search("faulty_add", **effort)
    members = _slow_batch(search, ((4, 1), (4, 2), (2, 1), helion_faults.SLOW_CONFIG))
    search.benchmark_population(members)
    assert _rebenchmarks(loop) == []
    search.rebenchmark_population(members)
    expected = [("num_warps=4", "MainThread")] * 2 + [("num_warps=8", "MainThread")] if off else []
    assert sorted(_rebenchmarks(loop)) == sorted(expected)
    assert search.benchmark_provider.sandbox_worker.stats.verified_ahead == 0
    search.benchmark_provider.cleanup()


def test_a_rebenchmark_run_ahead_and_not_taken_is_dropped_at_the_next_batch(loop: StandInSandbox) -> None:
    loop.latency = _fast_at_4_warps
    with settings.scope(helion_verify_ahead=True):
        search = _search("faulty_add", autotune_rebenchmark_threshold=1.5)
    first = _slow_batch(search, ((4, 1), (4, 2), helion_faults.SLOW_CONFIG))
    search.benchmark_population(first)
    assert len(_rebenchmarks(loop)) >= 2  # run ahead, kept past the batch
    search.benchmark_population(_slow_batch(search, ((4, 3), (2, 3))))  # Helion moved on
    ran = len(_rebenchmarks(loop))
    search.rebenchmark_population(first)  # a later re-benchmark of the first batch: measured anew
    assert len(_rebenchmarks(loop)) - ran >= 2
    assert search.benchmark_provider.sandbox_worker.stats.verified_taken == 0
    search.benchmark_provider.cleanup()

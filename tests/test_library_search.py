"""A library's own search on kiln (FlagGems' ``LibTuner`` pattern), without a GPU.

The library's autotuner derives from Triton's ``Autotuner`` after ``kiln.install()``, replaces
``run`` with its own search, times each config through ``self._bench`` and launches the winner
with ``self.fn.run``. kiln's ``_bench`` serves that search: every config is compiled in kiln's
pool at once (real compiles for sm_90), each ``_bench`` call times its config on the GPU
stand-in (:class:`Timings`; only the GPU is faked) and a config that cannot run gets inf. The
final launch (Triton's JIT, which needs a driver) is recorded by :class:`LaunchRecorder`. The
search with a crashing benchmark and an aborting compile runs on both backends (``backend``):
with the stand-in here, and on a GPU in kiln's sandbox, launched by the library for real.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import triton
from triton.runtime.autotuner import Autotuner as TritonAutotuner

import triton_kiln as kiln
from support import faults
from support.basics import SM90
from triton_kiln.sandbox import BenchOutcome

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(300)

INF3 = [float("inf")] * 3


class OwnSearch(kiln.Autotuner):  # type: ignore[misc]
    """LibTuner's pattern: its own key and cache, every config timed by ``self._bench``, the
    fastest launched by ``self.fn.run`` (``libentry.py`` ``LibTuner.run``, cut to its bones)."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        key = tuple(args[self.arg_names.index(k)] for k in self.keys)
        if key not in self.cache:
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
            self.cache[key] = min(timings, key=timings.__getitem__)
            self.configs_timings = timings
        config = self.cache[key]
        self.best_config = config
        result = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return result


class Timings:
    """Stands in for the GPU: each config's time (ms) from ``ms_of``; records what it timed."""

    def __init__(self, ms_of: Any, pool: Any, library: bool = True) -> None:
        self.library = library  # serving a library's search: no output check is asked for
        self.ms_of = ms_of
        self.pool = pool
        self.timed: list[tuple[str, int, int]] = []  # (label, configs compiled, configs submitted)
        self.phases: list[Any] = []
        self.owns_timing = True

    def factory(self, tuner: Any, args: Any, kwargs: Any) -> Timings:
        return self

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        assert artifact.binary[:4] == b"\x7fELF"  # a real binary reached the benchmark
        assert phase is not None
        assert not (self.library and phase.check)
        stats = self.pool.stats
        self.phases.append(phase)
        self.timed.append((candidate.label, stats.compiled, stats.submitted))
        ms = self.ms_of(candidate.config)
        if ms is None:
            return BenchOutcome("bench_crashed", reason="illegal memory access (stand-in)")
        return BenchOutcome("ok", timings=[ms, ms * 0.9, ms * 1.1])

    def user_reference(self) -> dict[str, Any] | None:
        return None

    def finish(self) -> None:
        return None


class LaunchRecorder:
    """Stands in for the GPU launch at the end of the library's ``run`` (Triton's JIT)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.launches: list[dict[str, Any]] = []

    def run(self, *args: Any, **kwargs: Any) -> None:
        self.launches.append(kwargs)


def faulty_configs() -> list[Any]:
    return [
        triton.Config({"BLOCK": 64, "FAULT": 0}, num_warps=4),
        triton.Config({"BLOCK": 128, "FAULT": 0}, num_warps=4),
        triton.Config({"BLOCK": 256, "FAULT": 4}, num_warps=4),  # the compiler aborts (SIGABRT)
        triton.Config({"BLOCK": 512, "FAULT": 0}, num_warps=4),
    ]


def make(
    make_pool: Any, configs: list[Any], ms_of: Any, cls: type = OwnSearch, **kwargs: Any
) -> tuple[Any, Timings, Any]:
    pool = make_pool(workers=2, preload=["support.faults"])  # the zygote installs the faults' compile hook
    tuner = cls(faults.faulty_scale, faults.faulty_scale.arg_names, configs, ["n"], None, None, **kwargs)
    tuner._pool, tuner._target = pool, SM90
    timings = Timings(ms_of, pool)
    tuner._bencher_factory = timings.factory
    recorder = LaunchRecorder(tuner.fn)
    tuner.fn = recorder  # after the search, the launch: recorded (no GPU here)
    return tuner, timings, recorder


def call(tuner: Any, n: int = 4096) -> None:
    x = torch.randn(n)
    out = torch.empty_like(x)
    tuner.run(x, out, n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=False)


def by_block(times: dict[int, float | None]) -> Any:
    return lambda config: times[config.kwargs["BLOCK"]]


def library_configs() -> list[Any]:
    """Three healthy configs, one whose benchmark crashes (``FAULT=1``: an illegal memory access
    on a GPU; the stand-in's crash here) and one whose compile aborts (``FAULT=4``: SIGABRT)."""
    healthy = [triton.Config({"BLOCK": b, "FAULT": 0}, num_warps=4) for b in (128, 256, 1024)]
    return healthy + [triton.Config({"BLOCK": 256, "FAULT": f}, num_warps=4) for f in (1, 4)]


@pytest.mark.timeout(600)
def test_a_library_search_compiles_every_config_at_once_and_a_crash_ends_only_its_config(
    backend: str, make_pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library's search times every config through ``_bench``: kiln compiles them all in its
    pool at once; a config whose benchmark crashes (in the sandbox, on a GPU) or whose compile
    aborts gets inf and a status that says why, and the search goes on to a healthy winner."""
    configs = library_configs()
    if backend == "cpu":
        ms = {128: 3.0, 256: 1.0, 1024: 2.0}
        tuner, timings, recorder = make(
            make_pool, configs, lambda c: None if c.kwargs["FAULT"] == 1 else ms[c.kwargs["BLOCK"]]
        )
        pool = tuner._get_pool()
        call(tuner)
    else:
        from support import faults

        monkeypatch.setenv("KILN_BENCH_TIMEOUT_S", "15")
        pool = make_pool(workers=4, preload=["support.faults"])
        tuner = OwnSearch(faults.faulty_scale, faults.faulty_scale.arg_names, configs, ["n"], None, None)
        tuner._pool = pool
        n = 1 << 22
        x = torch.randn(n, device="cuda")
        out = torch.full_like(x, float("nan"))
        tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        torch.cuda.synchronize()

    assert tuner.best_config.kwargs["FAULT"] == 0
    assert pool.stats.submitted == 5
    (results,) = tuner.searched.values()
    status = {(r.config["kwargs"]["BLOCK"], r.config["kwargs"]["FAULT"]): r for r in results.values()}
    ima, abort = status[(256, 1)], status[(256, 4)]
    assert ima.status == "bench_crashed", ima
    assert "illegal" in (ima.reason or "").lower()
    assert abort.status == "crashed", abort
    assert "SIGABRT" in (abort.reason or "")
    assert tuner.configs_timings[configs[3]] == INF3
    assert tuner.configs_timings[configs[4]] == INF3
    for config in configs[:3]:
        p50, p20, p80 = tuner.configs_timings[config]
        assert 0 < p20 <= p50 <= p80 < 50.0  # ms, for 16 MiB in and out on a GPU

    if backend == "cpu":
        # the first _bench submitted all five configs before timing any: one batch; the aborted
        # compile is never timed
        assert [t[2] for t in timings.timed] == [5, 5, 5, 5]
        timed = [tuple(t[0].split(", ")[:2]) for t in timings.timed]
        assert timed == [("BLOCK=128", "FAULT=0"), ("BLOCK=256", "FAULT=0"), ("BLOCK=1024", "FAULT=0"),
                         ("BLOCK=256", "FAULT=1")]  # fmt: skip
        assert tuner.best_config.kwargs == {"BLOCK": 256, "FAULT": 0}
        # the library launched its winner; kiln's search state ended with its run
        assert recorder.launches[-1]["BLOCK"] == 256
        assert tuner._search is None
    else:
        torch.testing.assert_close(out, x * 3.0)  # the library launched a healthy winner
        # the caller's CUDA context survived the illegal access (it happened in the sandbox)
        y = torch.ones(4, device="cuda") * 2
        assert float(y.sum()) == 8.0


def test_kernel_grid_reaches_the_librarys_run(make_pool: Any) -> None:
    """``kernel[grid](...)`` calls the library's ``run`` (not kiln's C dispatcher, whose misses
    would run kiln's own tuning and skip the library's key, cache and policy)."""
    tuner, timings, recorder = make(make_pool, faulty_configs()[:2], by_block({64: 2.0, 128: 1.0}))
    n = 4096
    x = torch.randn(n)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, torch.empty_like(x), n)
    assert len(timings.timed) == 2
    assert tuner.tuned == {}  # kiln's own tuning did not run
    assert recorder.launches[-1]["BLOCK"] == 128


def test_a_config_that_crashes_in_the_benchmark_gets_inf(make_pool: Any) -> None:
    configs = faulty_configs()[:2]
    tuner, _timings, _ = make(make_pool, configs, by_block({64: None, 128: 2.0}))
    call(tuner)
    assert tuner.configs_timings[configs[0]] == INF3
    assert tuner.best_config.kwargs["BLOCK"] == 128


def test_bench_keeps_tritons_contract(make_pool: Any) -> None:
    configs = faulty_configs()[:2]
    tuner, timings, _ = make(make_pool, configs, by_block({64: 1.5, 128: 2.0}))
    x = torch.randn(1024)
    out = torch.empty_like(x)
    grid = (8,)
    tuner.nargs = dict(zip(tuner.arg_names, (x, out, 1024), strict=False))
    assert tuner._bench(x, out, 1024, config=configs[0], grid=grid, warmup=False) == pytest.approx(
        [1.5, 1.35, 1.65]
    )
    # a meta-parameter given twice: ValueError, as Triton's _bench raises it
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK"):
        tuner._bench(x, out, 1024, config=configs[1], grid=grid, BLOCK=64)
    assert [t[0].split(",")[0] for t in timings.timed] == ["BLOCK=64"]


def test_kilns_own_tuning_does_not_call_bench(make_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_pool(workers=2)
    tuner = kiln.autotune(faulty_configs()[:2], key=["n"], pool=pool, database=False, target=SM90)(
        faults.faulty_scale
    )
    timings = Timings(by_block({64: 1.0, 128: 2.0}), pool, library=False)
    tuner._bencher_factory = timings.factory

    def no_bench(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("kiln's run called _bench")

    monkeypatch.setattr(type(tuner), "_bench", no_bench)
    x = torch.randn(1024)
    tuner.run(x, torch.empty_like(x), 1024, grid=(8,), warmup=True)
    assert tuner.best_config.kwargs["BLOCK"] == 64


def test_the_routing_log_says_who_drives_the_search(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kiln.autotune")
    kiln.install()
    try:
        from triton.runtime import autotuner as triton_autotuner

        class Searching(triton_autotuner.Autotuner):  # type: ignore[misc,name-defined]
            def run(self, *args: Any, **kwargs: Any) -> Any:
                best = min(self.configs, key=lambda c: self._bench(*args, config=c, **kwargs))
                return self.fn.run(*args, **kwargs, **best.all_kwargs())

        class Policy(Searching):
            pass

        class Extending(triton_autotuner.Autotuner):  # type: ignore[misc,name-defined]
            def run(self, *args: Any, **kwargs: Any) -> Any:
                return super().run(*args, **kwargs)

        class Bypassing(triton_autotuner.Autotuner):  # type: ignore[misc,name-defined]
            def run(self, *args: Any, **kwargs: Any) -> Any:
                return self.fn.run(*args, **kwargs, **self.configs[0].all_kwargs())
    finally:
        kiln.uninstall()
    text = caplog.text
    name = f"{__name__}.test_the_routing_log_says_who_drives_the_search.<locals>"
    assert (
        f"{name}.Searching drives its own search ({name}.Searching.run overrides run); kiln compiles " in text
    )
    assert f"{name}.Policy drives its own search ({name}.Searching.run overrides run)" in text
    assert f"{name}.Extending is routed through kiln's autotuner" in text
    assert f"{name}.Bypassing stays on Triton's autotuner: {name}.Bypassing.run drives its own search" in text
    assert f"{name}.Searching is routed" not in text
    assert issubclass(Searching, kiln.Autotuner)
    assert issubclass(Policy, kiln.Autotuner)
    assert issubclass(Extending, kiln.Autotuner)
    assert not issubclass(Bypassing, kiln.Autotuner)
    assert issubclass(Bypassing, TritonAutotuner)
    # an override of _bench (the library times configs its own way) stays on Triton's, as before
    kiln.install()
    try:

        class OwnTiming(triton_autotuner.Autotuner):  # type: ignore[misc,name-defined]
            def _bench(self, *args: Any, config: Any, **kwargs: Any) -> list[float]:
                return [1.0, 1.0, 1.0]
    finally:
        kiln.uninstall()
    assert not issubclass(OwnTiming, kiln.Autotuner)


def test_the_search_state_ends_with_the_outermost_run(make_pool: Any, tmp_path: Path) -> None:
    class Nested(OwnSearch):
        def run(self, *args: Any, **kwargs: Any) -> Any:
            result = super().run(*args, **kwargs)
            self.after = self._search  # still this run's search? (the inner run has returned)
            return result

    tuner, _timings, _ = make(make_pool, faulty_configs()[:2], by_block({64: 1.0, 128: 2.0}), cls=Nested)
    call(tuner)
    assert tuner.after is not None  # the inner run's end did not end the outer one's search
    assert tuner._search is None
    assert tuner._search_depth == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Triton's warning for warmup/rep
def test_warmup_and_rep_time_a_library_search_in_kilns_bencher(make_pool: Any) -> None:
    """FlagGems passes Triton's deprecated warmup/rep (mm: 5 and 10 ms): numbers, not user code.
    kiln's own tuning still times such a kernel in-process (as before); a library's search is
    timed by kiln's bencher (the sandbox on a GPU) with exactly those lengths."""
    from triton_kiln.autotuner.bench import runs_user_code

    tuner, timings, _ = make(make_pool, faulty_configs()[:2], by_block({64: 1.0, 128: 2.0}), warmup=5, rep=10)
    assert runs_user_code(tuner._plan, tuner.configs)
    assert not runs_user_code(tuner._plan, tuner.configs, lengths_in_caller=False)
    call(tuner)
    assert {(p.warmup_ms, p.rep_ms, p.check) for p in timings.phases} == {(5.0, 10.0, False)}


def test_triton_print_autotuning_prints_tritons_lines(
    make_pool: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    configs = faulty_configs()[1:3]  # BLOCK=128, and the compiler abort
    tuner, _timings, _ = make(make_pool, configs, by_block({128: 1.0, 256: 1.0}))
    call(tuner)
    out = capsys.readouterr().out
    assert out.count("Autotuning kernel faulty_scale with config") == 2
    assert "Autotuning failed with crashed" in out


def test_the_winner_is_in_tritons_cache_for_the_librarys_launch(make_pool: Any) -> None:
    """After the search, Triton's compile of the winner (what the library's ``self.fn.run``
    does on its first launch, keyed as the JIT keys it) loads kiln's binary from Triton's cache
    instead of compiling: only the files kiln wrote (binary and metadata) come back, no IR."""
    from triton_kiln import triton_compat
    from triton_kiln.helion.requests import launch_compile

    tuner, _timings, recorder = make(make_pool, faulty_configs()[:2], by_block({64: 2.0, 128: 1.0}))
    n = 4096
    x = torch.randn(n)
    out = torch.empty_like(x)
    tuner.run(x, out, n, grid=(n // 64,), warmup=False)
    launch = recorder.launches[-1]
    # the JIT's own key for the library's launch (Triton's binder, debug and instrumentation
    # knobs included, as JITFunction.run binds it): the slot kiln wrote
    meta = {k: v for k, v in launch.items() if k not in ("grid", "warmup")}
    jit = launch_compile(faults.faulty_scale, (x, out, n), meta, SM90)
    group = triton_compat.triton_cache_group(jit.triton_hash, f"{jit.file_name}.json")
    assert group is not None
    assert sorted(Path(p).suffix for p in group.values()) == [".cubin", ".json"]
    search_winner = next(c for c in tuner.configs if c.kwargs["BLOCK"] == 128)
    candidate = tuner._candidate(search_winner, (x, out, n), {})
    compiled = triton_compat.compile_kernel(
        candidate.request.ast_source(faults.faulty_scale), SM90, dict(candidate.request.options)
    )
    assert list(compiled.asm) == ["cubin"]  # loaded from the cache: a compile would add the IRs
    assert compiled.asm["cubin"] == tuner._get_pool().submit(candidate.request).result().binary

"""Helion's autotune with fork and spawn precompile against the same through kiln, each wall split by phase.

Run from the repository root on a machine with a GPU (Helion 1.5.0 or 1.5.1 installed)::

    python bench/helion_autotune.py --skip fault,ctrl-c --kernels matmul,layer_norm --out a.json
    python bench/helion_autotune.py --skip fault,ctrl-c --kernels add,softmax --out b.json
    python bench/helion_autotune.py --merge a.json b.json --out all.json    # parts of one run
    python bench/helion_autotune.py --skip compare,abort,ctrl-c --out f.json  # the three faults only
    python bench/helion_autotune.py --merge all.json f.json --out all2.json  # a merge joins on
    python bench/helion_autotune.py --kernels matmul --plan                 # the runs, nothing run
    python bench/helion_autotune.py --skip fault,ctrl-c --kernels matmul --effort full \
        --arms kiln,fork --budget-s 560 --run-timeout-s 280 --out full.json

Every run is a fresh subprocess (fresh Triton, Helion and kiln caches; imports and CUDA start
outside the timed region), so the arms run side by side in one invocation:

* ``compare``: per kernel (``add``, ``softmax``, ``matmul``, ``layer_norm``, ``many_configs`` of
  ``tests/test_helion_kernels.py``, shapes in ``GPU_SHAPES``), Helion's default search
  (``LFBOTreeSearch``) at the same effort (``--effort quick|full``), seed and generation cap
  (``--generations``), once per arm (``--arms``, default ``fork,spawn,kiln``): ``fork`` (Helion's
  ``autotune_precompile="fork"``, its default), ``spawn`` (``autotune_precompile="spawn"``),
  ``kiln`` (``autotuner_fn=kiln.helion.autotuner_fn`` with kiln's defaults, the bench's own
  Helion settings dropped (``helion_settings()``): kiln's loop, compiles in kiln's
  pool and Helion's benchmark jobs in kiln's sandbox, streamed as the compiles land, and kiln's
  final round; it creates its pool and sandbox just before binding the kernel, as
  ``kiln.helion.install()`` at import time would, so what is left of their start-up counts),
  ``kiln-compile`` (``KILN_HELION_SANDBOX=0``: kiln's compiles, Helion's own benchmark worker),
  ``kiln-verify`` (kiln's loop with ``KILN_HELION_FINAL_ROUND=0``: Helion's own final
  verification, in the autotuning process), ``kiln-race`` (kiln's loop with
  ``KILN_HELION_FINAL_ROUND=1``, set whatever the default: Helion's final verification is
  kiln's final round; the split's ``benchmark`` phase holds the race, and the probes
  ``final_verification_s`` (Helion's) and ``kiln_final_verification_s`` (kiln's) time the whole
  final verification, so the two arms' difference shows; ``kiln_race_over_kiln_verify``
  compares their walls and picks' runtimes; each run with kiln's round has ``final_rounds``:
  its rounds, each finalist's passes, runs and wall time) and ``kiln-screen`` (kiln-race with
  ``KILN_HELION_SCREEN_MS=10``: each streamed search timing 10 ms rather than Helion's 50;
  ``kiln.sandbox.screened`` counts them; ``kiln_screen_over_kiln_race`` compares the two). A
  kiln arm's ``kiln.sandbox.kinds`` counts the sandbox calls by kind of job (Helion's
  ``BenchmarkJob`` and ``AccuracyCheckJob``, kiln's ``FinalistRunsJob``): ``seconds`` as the
  autotuning process waited for them, ``job_seconds`` the jobs' own run in the sandbox;
  ``kiln.compile_failures`` counts its failed compiles by error type. With
  ``--repeats N`` each arm runs N times per kernel, the arm order rotating from one round to the
  next, and the run with the median autotune wall is compared (a run past ``--run-timeout-s``
  ranking as the longest; every run is kept): Helion's search is seeded, but after the seeded
  population it follows measured timings, so the arms compile different configs.
* ``fault``: ``crashy_add`` with a seed config that aborts in Triton's compiler (the hook of
  ``tests/support/helion_faults.py``: ``num_warps == 2``), through kiln, with fork and with
  Helion's precompile off (``autotune_precompile=None``: compiles in the autotuning process); then
  ``crashall_add``, whose reference config (Helion's accuracy baseline) aborts; then
  ``faulty_add`` with three seed configs (``helion_faults.FAULTY_CONFIGS``: one aborts in the
  compiler, one makes an illegal memory access, one never finishes; Helion's default benchmark
  timeout, 30 s, which its respawned benchmark worker's start-up counts against) in
  one autotune per arm (kiln, fork, spawn; kiln's workers preload the fault hook, fork's children
  inherit it, spawn's install it on start, see ``FAULTS_ENV``), each run's ``cuda_alive`` saying
  whether its CUDA context still runs a kernel afterwards. ``--skip abort`` leaves out the abort runs,
  ``--skip three-faults`` the three-fault runs; a merge keeps each fault run by name, a later
  part's over an earlier one's.
* ``ctrl-c``: SIGINT to a process in the middle of a matmul autotune's precompile phase
  (each arm), then a count of the processes it had started that are still alive.

The split. Around the ``autotune`` call the child wraps Helion's own functions (``TARGETS``, read
against Helion 1.5.0 and 1.5.1; a name missing in the installed Helion is listed in
``split_not_measured`` and its time falls to ``other_s``) and times them exclusively: a wrapped
call's seconds count to its phase less those of the wrapped calls inside it (``PhaseClock``), so
the phases partition the wall and nothing counts twice. Only the autotuning thread is timed.

* ``codegen_s``: ``BoundKernel.compile_config`` (Helion's config -> Triton source -> loaded
  module; a cache hit for a config generated before);
* ``baseline_s``: ``LocalBenchmarkProvider._compute_baseline`` and ``setup`` (the reference
  config's compile and run, or the ``autotune_baseline_fn``; the arguments and baseline saved for
  Helion's workers), less its codegen;
* ``precompile_s``: ``LocalBenchmarkProvider._create_precompile_future`` (fork: starts a child;
  spawn: writes its job; kiln: extracts the launch and submits it to the pool) and
  ``PrecompileFuture.wait_for_all`` (waiting for them all);
* ``benchmark_s``: ``LocalBenchmarkProvider._benchmark_function``,
  ``_run_subprocess_benchmark_job``, ``benchmark_isolated`` and the final rebenchmarks,
  ``PopulationBasedSearch.rebenchmark``, ``_run_final_selection`` (1.5.1),
  ``run_final_pick_verification`` (timing configs, in Helion's benchmark worker by default,
  its start included), less their codegen and accuracy checks;
* ``accuracy_s``: ``LocalBenchmarkProvider._validate_against_baseline`` and
  ``_run_subprocess_accuracy_check_job`` (a config's outputs against the baseline);
* ``other_s``: ``autotune_s`` less the above: the search's own work (config generation, the
  surrogate model, bookkeeping, logging, the cache).

In the ``kiln`` arm the benchmark and accuracy jobs a batch streams run in kiln's stream thread
while the autotuning thread waits in ``wait_for_all``: their time is inside ``precompile_s``, and
``benchmark_s`` / ``accuracy_s`` keep what the autotuning thread still waited for (a job in
flight at the barrier, the final selection). ``kiln.sandbox`` gives the sandbox's calls and
process restarts.

Fields of a run (``compare[i][arm]``, and each of ``runs``): ``status``, ``autotune_s`` (the wall
of ``bound.autotune(args, force=True)``), ``split`` (the five phases and ``other_s``, summing to
``autotune_s``), ``counts`` (``configs_generated``: distinct configs through codegen;
``configs_compiled`` / ``configs_failed`` / ``precompile_timeouts`` / ``precompile_phases``:
Helion's precompile verdicts; ``configs_benchmarked`` / ``benchmark_failed``: calls to
``_benchmark_function`` and those that returned no finite time; ``accuracy_checks`` /
``accuracy_failed``), ``probes`` (inclusive seconds beside the split, inside its phases:
``benchmark_worker_start_s`` in ``benchmark_s``; ``surrogate_fit_s``, ``surrogate_select_s`` in
``other_s``), ``calls`` (per wrapped name), ``split_not_measured``, ``precompile_s`` /
``precompile_phases`` / ``configs_compiled`` / ``configs_failed`` (the ``wait_for_all`` phases
alone), ``config``, ``num_warps``, ``max_abs_error`` and ``runtime_ms`` (the chosen config,
``triton.testing.do_bench`` median), ``helion_version``, ``kiln`` (the pool's stats),
``timeline`` (kiln's loop: the sandbox's busy seconds, the autotuning thread's benchmark phase
with a sandbox call running and with none, the sandbox's longest idle stretches; :func:`timeline`), and for
the median run ``median_of`` (ok runs), ``split_median`` / ``counts_median`` (per-field medians
over the arm's ok runs; they need not sum to a wall) and ``runtime_ms_median`` (the chosen
configs' runtimes' median over those runs). Per kernel: ``kiln_over_fork``,
``kiln_over_spawn`` (autotune wall ratios of the median runs), ``runtime_kiln_over_fork``,
``runtime_kiln_over_spawn`` (the chosen configs' runtimes in those runs),
``runtime_median_kiln_over_fork`` / ``_over_spawn`` (the medians of the chosen configs'
runtimes over each arm's ok runs), and ``autotune_ratio`` /
``runtime_ratio`` (the same as the ``_over_fork`` pair). Per report: ``geomean_kiln_over_fork``,
``geomean_kiln_over_spawn`` over kernels, ``geomean_autotune_ratio`` (= kiln/fork).

Prints a table (the split per kernel and arm) and the JSON; ``--out`` also writes the JSON.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime as dt
import functools
import importlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import machine_state

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
KERNELS = ("add", "softmax", "matmul", "layer_norm", "many_configs")
ARMS = ("fork", "spawn", "kiln", "kiln-compile", "kiln-verify", "kiln-race", "kiln-screen")
DEFAULT_ARMS = ("fork", "spawn", "kiln")
KILN_ARMS = ("kiln", "kiln-compile", "kiln-verify", "kiln-race", "kiln-screen")
SCREEN_MS = 10  # kiln-screen's window for a search timing: kiln's own autotuner's screening
GPU_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "add": [(8192, 8192), (8192, 8192)],
    "crashy_add": [(4096, 4096), (4096, 4096)],
    "crashall_add": [(4096, 4096), (4096, 4096)],
    "faulty_add": [(4096, 4096), (4096, 4096)],
    "softmax": [(8192, 4096)],
    "matmul": [(4096, 4096), (4096, 4096)],
    "layer_norm": [(4096, 8192), (8192,), (8192,)],  # a transformer's tokens x hidden, weight, bias
    "many_configs": [(4096, 4096), (4096,)],
}
RESULT = "KILN-BENCH-RESULT "
PRECOMPILE = "KILN-BENCH-PRECOMPILE "
SECTIONS = ("compare", "fault", "abort", "three-faults", "ctrl-c", "none")
"""What ``--skip`` names (``none``: nothing, as gpu_session's helion-faults passes it)."""
SKIPPED = "skipped (bench budget spent)"
CUT = "cut short (bench budget spent)"
FAULTS_ENV = "BENCH_HELION_FAULTS"
"""Set by a fault run's child for its own children: a spawned one installs the fault hook."""

if __name__ == "__mp_main__" and os.environ.get(FAULTS_ENV):
    # Helion's spawn mode starts its precompile and benchmark workers with multiprocessing's
    # spawn, which imports this script as ``__mp_main__`` in each: the hook a fork child inherits
    # from the fault run's child is installed here, so the faults reach spawn's compiles too
    sys.path.insert(0, str(TESTS))
    from support import helion_faults

    helion_faults.install()


# ----------------------------------------------------------------------------- the split

PHASES = ("codegen", "baseline", "precompile", "benchmark", "accuracy")


class Target(NamedTuple):
    """A Helion function or method whose calls are timed: ``module`` (imported), ``qualname``
    (``Class.attr`` or a module-level ``attr``), the phase its calls count to (``None``: an
    inclusive probe beside the split, see :class:`PhaseClock`), and an optional counter that sees
    each call's result."""

    module: str
    qualname: str
    phase: str | None
    count: Callable[[PhaseClock, tuple[Any, ...], dict[str, Any], Any], None] | None = None


def _count_codegen(clock: PhaseClock, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
    config = args[1] if len(args) > 1 else kwargs.get("config")
    clock.configs_seen.add(repr(config))


def _count_benchmark(clock: PhaseClock, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
    clock.bump("configs_benchmarked")
    if not (isinstance(result, int | float) and math.isfinite(result)):
        clock.bump("benchmark_failed")


def _count_accuracy(clock: PhaseClock, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
    if result is None:  # the worker could not check this config: Helion checks it in-process
        return
    clock.bump("accuracy_checks")
    if not (result if isinstance(result, bool) else bool(getattr(result, "ok", True))):
        clock.bump("accuracy_failed")


_BP = "helion.autotuner.benchmark_provider"
_BS = "helion.autotuner.base_search"
TARGETS: tuple[Target, ...] = (
    Target("helion.runtime.kernel", "BoundKernel.compile_config", "codegen", _count_codegen),
    Target(_BP, "LocalBenchmarkProvider._compute_baseline", "baseline"),
    Target(_BP, "LocalBenchmarkProvider.setup", "baseline"),
    Target(_BP, "LocalBenchmarkProvider._create_precompile_future", "precompile"),
    Target("helion.autotuner.precompile_future", "PrecompileFuture.wait_for_all", "precompile"),
    Target(_BP, "LocalBenchmarkProvider._benchmark_function", "benchmark", _count_benchmark),
    Target(_BP, "LocalBenchmarkProvider._run_subprocess_benchmark_job", "benchmark"),
    Target(_BP, "LocalBenchmarkProvider.benchmark_isolated", "benchmark"),
    Target(_BS, "PopulationBasedSearch.rebenchmark", "benchmark"),
    Target(_BS, "PopulationBasedSearch._run_final_selection", "benchmark"),  # 1.5.1 only
    Target(_BS, "PopulationBasedSearch.run_final_pick_verification", "benchmark"),
    Target("triton_kiln.helion.finalists", "race", "benchmark"),  # kiln's final round (kiln-race)
    Target(_BS, "PopulationBasedSearch.final_rebenchmark_best", None),
    Target("triton_kiln.helion.finalists", "final_rebenchmark_best", None),  # kiln-race's hook
    Target(_BP, "LocalBenchmarkProvider._validate_against_baseline", "accuracy", _count_accuracy),
    Target(_BP, "LocalBenchmarkProvider._run_subprocess_accuracy_check_job", "accuracy", _count_accuracy),
    Target("helion.autotuner.benchmark_worker", "BenchmarkWorker._start", None),
    Target("helion.autotuner.surrogate_pattern_search", "LFBOPatternSearch._fit_surrogate", None),
    Target("helion.autotuner.surrogate_pattern_search", "LFBOPatternSearch._surrogate_select", None),
)
"""What the split wraps, read against Helion 1.5.0 and 1.5.1 (each name is in both, but
``PopulationBasedSearch._run_final_selection``: 1.5.1 only). A method is wrapped on its class and
on every subclass that defines it anew (kiln's provider, Helion's searches)."""


class PhaseClock:
    """Exclusive time per phase: a call's seconds count to its own phase, less the seconds of the
    wrapped calls inside it, which count to theirs (the innermost wins). The phases so partition
    the time spent in any wrapped call, and ``wall - sum(phases)`` is the rest (``other_s``).

    Only calls on ``thread`` (the one that runs the autotune) are timed: calls on other threads
    run beside it, and counting them would count one second twice. Targets of phase ``None`` are
    inclusive probes (``probes``): their seconds are reported beside the split, never in it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, thread: int | None = None) -> None:
        self.clock = clock
        self.thread = threading.get_ident() if thread is None else thread
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.probes: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.configs_seen: set[str] = set()
        self._stack: list[tuple[str, str]] = []  # (phase, target) of the calls under way
        self._mark = 0.0
        self.segments: list[tuple[str, float, float]] = []  # (phase, start, end), in clock order

    def bump(self, name: str, by: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def _attribute(self, phase: str, now: float) -> None:
        self.seconds[phase] += now - self._mark
        self.segments.append((phase, self._mark, now))

    def enter(self, phase: str, target: str) -> None:
        now = self.clock()
        if self._stack:
            self._attribute(self._stack[-1][0], now)
        if all(name != target for _, name in self._stack):  # a call, not an override's super()
            self.calls[target] = self.calls.get(target, 0) + 1
        self._stack.append((phase, target))
        self._mark = now

    def leave(self) -> None:
        now = self.clock()
        phase, _ = self._stack.pop()
        self._attribute(phase, now)
        self._mark = now

    def split(self, wall: float) -> dict[str, float]:
        """``{phase}_s`` for every phase and ``other_s``: sums to ``wall``."""
        out = {f"{phase}_s": self.seconds[phase] for phase in PHASES}
        out["other_s"] = wall - sum(out.values())
        return out

    def wrap(self, fn: Callable[..., Any], target: Target) -> Callable[..., Any]:
        name = target.qualname

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.thread:
                return fn(*args, **kwargs)
            if target.phase is None:
                started = self.clock()
                try:
                    result = fn(*args, **kwargs)
                finally:
                    self.probes[name] = self.probes.get(name, 0.0) + self.clock() - started
                    self.calls[name] = self.calls.get(name, 0) + 1
            else:
                self.enter(target.phase, name)
                try:
                    result = fn(*args, **kwargs)
                finally:
                    self.leave()
            if target.count is not None:
                target.count(self, args, kwargs, result)
            return result

        return timed


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _resolve(target: Target) -> Any:
    owner: Any = importlib.import_module(target.module)
    for part in target.qualname.split(".")[:-1]:
        owner = getattr(owner, part)
    return owner


@contextmanager
def timed_phases(clock: PhaseClock, targets: tuple[Target, ...] = TARGETS) -> Iterator[dict[str, list[str]]]:
    """Every target wrapped (see :class:`PhaseClock`) in this block, then given back. Yields
    ``{"wrapped": [...], "not_measured": [...]}``: a target whose module, class or attribute is
    missing is listed as not measured, and its phase reads low by what it would have timed."""
    report: dict[str, list[str]] = {"wrapped": [], "not_measured": []}
    undo: list[tuple[Any, str, Any]] = []
    for target in targets:
        attr = target.qualname.rsplit(".", 1)[-1]
        try:
            owner = _resolve(target)
        except (ImportError, AttributeError):
            report["not_measured"].append(f"{target.module}.{target.qualname}")
            continue
        owners = [owner, *_subclasses(owner)] if isinstance(owner, type) else [owner]
        hit = False
        for each in owners:
            raw = vars(each).get(attr)
            if raw is None:
                continue  # inherited: wrapped where it is defined
            if isinstance(raw, staticmethod | classmethod):
                new: Any = type(raw)(clock.wrap(raw.__func__, target))
            elif callable(raw):
                new = clock.wrap(raw, target)
            else:
                continue
            setattr(each, attr, new)
            undo.append((each, attr, raw))
            hit = True
        key = "wrapped" if hit else "not_measured"
        report[key].append(f"{target.module}.{target.qualname}")
    try:
        yield report
    finally:
        for each, attr, raw in reversed(undo):
            setattr(each, attr, raw)


# ----------------------------------------------------------------------------- child side


PROBES = {
    "BenchmarkWorker._start": "benchmark_worker_start_s",
    "LFBOPatternSearch._fit_surrogate": "surrogate_fit_s",
    "LFBOPatternSearch._surrogate_select": "surrogate_select_s",
    "PopulationBasedSearch.final_rebenchmark_best": "final_verification_s",  # Helion's, any arm
    "final_rebenchmark_best": "kiln_final_verification_s",  # the same call, hooked by kiln-race
}


def _split_fields(
    clock: PhaseClock, wall: float, phases: list[Any], wrapped: dict[str, list[str]]
) -> dict[str, Any]:
    """A run's ``split``, ``counts``, ``probes``, ``calls`` and ``split_not_measured``."""
    counts = {
        "configs_generated": len(clock.configs_seen),
        "configs_compiled": sum(p.ok for p in phases),
        "configs_failed": sum(p.failed for p in phases),
        "precompile_timeouts": sum(p.timeouts for p in phases),
        "precompile_phases": len(phases),
        "configs_benchmarked": 0,
        "benchmark_failed": 0,
        "accuracy_checks": 0,
        "accuracy_failed": 0,
    }
    counts.update(clock.counts)
    return {
        "split": clock.split(wall),
        "counts": counts,
        "probes": {label: clock.probes.get(name, 0.0) for name, label in PROBES.items()},
        "calls": clock.calls,
        "split_not_measured": wrapped["not_measured"],
    }


def _busy(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as disjoint intervals, in order."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(segment: tuple[float, float], busy: list[tuple[float, float]]) -> float:
    start, end = segment
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in busy)


def timeline(
    spans: list[tuple[float, float]], segments: list[tuple[str, float, float]], t0: float, wall: float
) -> dict[str, Any]:
    """Where the kiln arm's sandbox and autotuning thread were at once: ``spans`` are the sandbox
    calls (start, end), ``segments`` the thread's phases (:attr:`PhaseClock.segments`), all on
    one clock, the autotune from ``t0`` for ``wall`` s. ``benchmark_sandbox_idle_s`` is the
    thread's benchmark phase while no sandbox call ran: time kiln's loop neither timed a config
    nor waited for one that was being timed (Helion's in-process work there, or a wait for a
    compile). ``idle_gaps`` are the longest stretches with no sandbox call between the first
    call and the autotune's end (start from ``t0`` and length, s)."""
    inside = [(max(a, t0), min(b, t0 + wall)) for a, b in spans if b > t0 and a < t0 + wall]
    busy = _busy(inside)
    bench = [(a, b) for phase, a, b in segments if phase == "benchmark" and b > a]
    with_sandbox = sum(_overlap(segment, busy) for segment in bench)
    gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    if busy:
        gaps.append((busy[-1][1], t0 + wall))
    longest = sorted(gaps, key=lambda g: g[1] - g[0], reverse=True)[:8]
    return {
        "sandbox_busy_s": sum(b - a for a, b in busy),
        "first_call_s": busy[0][0] - t0 if busy else None,
        "benchmark_sandbox_busy_s": with_sandbox,
        "benchmark_sandbox_idle_s": sum(b - a for a, b in bench) - with_sandbox,
        "idle_gaps": [[round(a - t0, 3), round(b - a, 3)] for a, b in sorted(longest)],
    }


class Compile(NamedTuple):
    """One compile a kiln arm sent to its pool: when it was sent and when it landed (the
    process's ``perf_counter``; ``None``: it had not), the compile's own seconds in its worker
    (``None``: it failed, did not land, or another compile served it) and how it ended (``ok``,
    ``cached``: served by kiln's cache or an identical compile in flight, the error's type name,
    ``cancelled``)."""

    sent: float
    landed: float | None
    compile_s: float | None
    outcome: str
    label: str = ""  # the request's label (kernel and config), to name a compile no phase waited for


def ptxas_running() -> list[int]:
    """The ``ptxas`` processes running on this machine now (any process's; a killed one its
    parent has not reaped yet is not running), by pid."""
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["name", "status"])
        if (p.info.get("name") or "").startswith("ptxas") and p.info.get("status") != psutil.STATUS_ZOMBIE
    ]


def ptxas_parents() -> list[str]:
    """Who runs each ``ptxas`` of :func:`ptxas_running`: its parent's pid and command line
    (shortened), so a ptxas outside kiln's workers (the sandbox compiling for itself, Helion's
    process) is told apart."""
    import psutil

    out: list[str] = []
    for pid in ptxas_running():
        try:
            parent = psutil.Process(pid).parent()
            command = " ".join(parent.cmdline()) if parent is not None else "?"
            out.append(f"{parent.pid if parent is not None else '?'}: {command[:120]}")
        except psutil.Error:
            continue
    return out


class PhaseMarks:
    """``on_start`` / ``on_end`` for ``adapter.probe_precompile``: each precompile phase's start
    (``perf_counter``), and as it ends, the ``ptxas`` processes still running on the machine and
    who runs them (:func:`ptxas_parents`). Every compile of a phase has ended when Helion's wait
    returns, so a ptxas running then outlived its compile (a timed-out compile's, say) and holds
    a core from what comes next. The scan runs after the phase's seconds are taken."""

    def __init__(self) -> None:
        self.at: list[float] = []  # each phase's start
        self.ptxas: list[list[str]] = []  # each phase's leftover ptxas, by who runs them

    def start(self, configs: int) -> None:
        print(f"{PRECOMPILE}{configs}", flush=True)
        self.at.append(time.perf_counter())

    def end(self, configs: int) -> None:
        self.ptxas.append(ptxas_parents())


def record_compiles(pool: Any, compiles: list[Compile]) -> None:
    """From now on, each compile sent to ``pool`` (its ``submit``) is appended to ``compiles``
    and, when it lands, replaced by its outcome (see :class:`Compile`)."""
    send = pool.submit
    lock = threading.Lock()  # Helion's thread and kiln's may both send

    def timed_submit(request: Any, *a: Any, **kw: Any) -> Any:
        sent = time.perf_counter()
        future = send(request, *a, **kw)
        try:
            label = str(request.label())
        except Exception:
            label = type(request).__name__
        with lock:
            at = len(compiles)
            compiles.append(Compile(sent, None, None, "out", label))

        def landed(done: Any) -> None:
            now = time.perf_counter()
            if done.cancelled():
                compiles[at] = Compile(sent, now, None, "cancelled", label)
            elif done.exception() is not None:
                compiles[at] = Compile(sent, now, None, type(done.exception()).__name__, label)
            elif float(done.result().compile_s) > now - sent:
                # served by a compile this request did not start (kiln's cache, or an
                # identical request's compile in flight): its seconds are not this wait's
                compiles[at] = Compile(sent, now, None, "cached", label)
            else:
                compiles[at] = Compile(sent, now, float(done.result().compile_s), "ok", label)

        future.add_done_callback(landed)
        return future

    pool.submit = timed_submit


def compile_timeline(
    compiles: list[Compile], phases: list[tuple[float, float]], t0: float
) -> list[dict[str, Any]]:
    """What each precompile phase (``phases``: Helion's ``wait_for_all``, its start and seconds)
    of a kiln arm waited for: the compiles that landed during it, the one that landed last (the
    phase's end), and of all compiles sent before the phase ended, how many were still out when
    it began. A compile's ``wall`` less its ``compile_s`` is its time in kiln's queue (and the
    trip to and from a worker): a phase that outlasts its compiles' own seconds waited for a
    worker, not for Triton. Times from ``t0``, s."""
    out: list[dict[str, Any]] = []
    for start, seconds in phases:
        end = start + seconds
        during = [c for c in compiles if c.landed is not None and start <= c.landed <= end + 1e-3]
        pending = [c for c in compiles if c.sent <= start and (c.landed is None or c.landed > start)]
        # sent before the phase ended, still out when it ended: compiles the phase did not wait for
        left = [c for c in compiles if c.sent <= end and (c.landed is None or c.landed > end + 1e-3)]
        row: dict[str, Any] = {
            "start_s": round(start - t0, 3),
            "seconds": round(seconds, 3),
            "landed": len(during),
            "out_at_start": len(pending),
        }
        if left:
            row["out_at_end"] = len(left)
            row["out_at_end_labels"] = [c.label for c in left[:3]]
        if during:
            last = max(during, key=lambda c: c.landed or 0.0)
            assert last.landed is not None
            row["last"] = {
                "sent_s": round(last.sent - t0, 3),
                "wall_s": round(last.landed - last.sent, 3),
                "compile_s": None if last.compile_s is None else round(last.compile_s, 3),
                "outcome": last.outcome,
            }
            done = [c for c in during if c.compile_s is not None and c.landed is not None]
            if done:
                row["queued_s_max"] = round(
                    max((c.landed or 0.0) - c.sent - (c.compile_s or 0.0) for c in done), 3
                )
                row["compile_s_max"] = round(max(c.compile_s or 0.0 for c in done), 3)
        out.append(row)
    return out


def arm_settings(arm: str) -> dict[str, str]:
    """The Helion settings (:func:`helion_settings`) a kiln arm's process runs with (``kiln``:
    none, kiln's defaults; the child drops the bench's own first)."""
    if arm == "kiln-compile":  # kiln's compiles only: Helion's own benchmark worker
        return {"KILN_HELION_SANDBOX": "0"}
    env: dict[str, str] = {}
    if arm in ("kiln-verify", "kiln-race", "kiln-screen"):  # kiln's loop: Helion's jobs in kiln's sandbox
        env["KILN_HELION_SANDBOX"] = "1"
    if arm == "kiln-verify":  # with Helion's own final verification
        env["KILN_HELION_FINAL_ROUND"] = "0"
    if arm in ("kiln-race", "kiln-screen"):  # with kiln's final round verifying Helion's finalists
        env["KILN_HELION_FINAL_ROUND"] = "1"
    if arm == "kiln-screen":  # and its screening of the search's timings
        env["KILN_HELION_SCREEN_MS"] = str(SCREEN_MS)
    return env


def helion_settings() -> list[str]:
    """The variables of kiln's Helion settings (its settings page's Helion area)."""
    from triton_kiln import settings

    return [
        declared.variable for declared in settings.declarations().values() if declared.area is settings.HELION
    ]


def _instances(cls: type) -> list[Any]:
    """Every instance of ``cls`` made from now on in this process, in order (its ``__init__``
    wrapped to keep each)."""
    made: list[Any] = []
    init = cls.__init__  # type: ignore[misc]

    def kept(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    cls.__init__ = kept  # type: ignore[misc]
    return made


def _child(opts: argparse.Namespace) -> None:
    sys.path.insert(0, str(TESTS))
    for name in helion_settings():  # the bench's own, if set: each arm says what it runs with
        os.environ.pop(name, None)
    os.environ.update(arm_settings(opts.arm))
    import torch

    if opts.faults:
        from support import helion_faults

        helion_faults.install()  # the fault hook, inherited by fork children
        os.environ[FAULTS_ENV] = "1"  # and installed by spawn children (see FAULTS_ENV)
    from triton.testing import do_bench

    import test_helion_kernels as hk
    import triton_kiln as kiln
    import triton_kiln.helion
    from triton_kiln.helion import adapter, compat, finalists
    from triton_kiln.helion.sandbox_jobs import make_sandbox

    rounds: list[dict[str, Any]] = []  # kiln's final rounds (kiln-race), each as its provider kept it
    kilns_race = finalists.race

    def race_recorded(search: Any, members: Any, desc: str, target_ms: float) -> bool:
        raced = kilns_race(search, members, desc, target_ms)
        kept = getattr(search.benchmark_provider, "final_rounds", None)
        if raced and kept:
            rounds.append(dataclasses.asdict(kept[-1]))
        return raced

    finalists.race = race_recorded
    from triton_kiln.helion.sandbox_worker import KilnBenchmarkWorker

    workers = _instances(KilnBenchmarkWorker)  # each search's sandbox worker: its calls by kind of job
    providers = _instances(adapter.KilnBenchmarkProvider)  # each search's provider: its failed compiles

    importlib.import_module("helion.autotuner")  # every search class: the split wraps their overrides
    gen = torch.Generator(device="cuda").manual_seed(0)
    args = tuple(
        torch.randn(*shape, device="cuda", dtype=torch.float16, generator=gen)
        for shape in GPU_SHAPES[opts.kernel]
    )
    settings: dict[str, Any] = {
        "autotune_effort": opts.effort,
        "autotune_max_generations": opts.generations,
        "autotune_random_seed": opts.seed,
        "autotune_precompile": {"spawn": "spawn", "none": None}.get(opts.arm, "fork"),
        "autotune_progress_bar": False,
    }
    pool = None
    sandbox = None
    if opts.arm in KILN_ARMS:
        settings["autotuner_fn"] = kiln.helion.autotuner_fn
        pool = kiln.CompilePool(preload=["support.helion_faults_preload"] if opts.faults else [])
        sandbox = make_sandbox()
        kiln.helion.configure(pool=pool, sandbox=sandbox)
    if opts.seed_abort:
        probe = hk.make(opts.kernel, **settings).bind(args)
        crash = probe.config_spec.default_config()
        crash.config["num_warps"] = 2
        settings["autotune_seed_configs"] = [crash]
    if opts.seed_faults:  # one config per fault of helion_faults.FAULTY_CONFIGS
        from support import helion_faults

        probe = hk.make(opts.kernel, **settings).bind(args)
        seeds = []
        for warps, stages in helion_faults.FAULTY_CONFIGS:
            seed = probe.config_spec.default_config()
            seed.config.update(num_warps=warps, num_stages=stages)
            seeds.append(seed)
        # Helion's own benchmark timeout stays: a shorter one fails every config after the hang,
        # as each respawned worker's start-up (spawn, torch, CUDA) counts against it
        settings["autotune_seed_configs"] = seeds
    bound = hk.make(opts.kernel, **settings).bind(args)

    marks = PhaseMarks()

    compiles: list[Compile] = []
    if pool is not None:  # each compile kiln's loop sends, timed (compile_timeline)
        record_compiles(pool, compiles)

    result: dict[str, Any] = {"arm": opts.arm, "kernel": opts.kernel, "helion_version": compat.VERSION}
    clock = PhaseClock()
    with (
        timed_phases(clock) as wrapped,
        adapter.probe_precompile(on_start=marks.start, on_end=marks.end) as phases,
    ):
        t0 = time.perf_counter()
        try:
            config = bound.autotune(args, force=True)
        except Exception as error:  # reported, not hidden: the fault runs expect some
            result.update(status="error", error_type=type(error).__name__, error=str(error)[:2000])
            config = None
        wall = time.perf_counter() - t0
    result["autotune_s"] = wall
    result["precompile_phases"] = [vars(p) for p in phases]
    # compiles a timeout should have ended still running would hold cores from the next phase
    result["ptxas_after_phase"] = marks.ptxas
    result["precompile_s"] = sum(p.seconds for p in phases)  # the waits alone (``wait_for_all``)
    result["configs_compiled"] = sum(p.ok for p in phases)
    result["configs_failed"] = sum(p.failed for p in phases)
    result.update(_split_fields(clock, wall, phases, wrapped))
    result["cuda_alive"] = _cuda_alive(torch)
    if rounds:
        result["final_rounds"] = rounds
    if config is not None:
        result["status"] = "ok"
        result["config"] = repr(config)
        result["num_warps"] = config.config.get("num_warps")
        out = bound(*args)
        reference = hk.eager(opts.kernel)(*args)
        result["max_abs_error"] = float((out.float() - reference.float()).abs().max())
        result["runtime_ms"] = float(do_bench(lambda: bound(*args), warmup=50, rep=200))
    if pool is not None:
        stats = pool.stats
        result["kiln"] = {
            "compiled": stats.compiled,
            "failed": stats.failed,
            "worker_deaths": stats.worker_deaths,
            "zygote_ready_s": stats.zygote_ready_s,
            "compile_failures": dict(sum((p.compile_failures for p in providers), collections.Counter())),
            "workers": pool.settings.workers,
            "replacement_s_max": max(stats.replacement_s, default=None),
            "compile_phases": compile_timeline(
                compiles, [(a, p.seconds) for a, p in zip(marks.at, phases, strict=False)], t0
            ),
        }
        pool.shutdown(wait=True, cancel_futures=True)
    if sandbox is not None:
        kinds: dict[str, dict[str, float]] = {}
        screened = sum(worker.stats.screened for worker in workers)
        for worker in workers:
            for name, kind in worker.stats.kinds.items():
                into = kinds.setdefault(name, {"calls": 0, "seconds": 0.0, "job_seconds": 0.0})
                for field_name in into:
                    into[field_name] += getattr(kind, field_name)
        result["kiln"]["sandbox"] = {
            "calls": sandbox.calls,
            "restarts": sandbox.restarts,
            "kinds": kinds,
            "screened": screened,
            # Helion's re-benchmarks run ahead while a batch waited for a compile, and of them those
            # Helion's re-benchmark took (KILN_HELION_VERIFY_AHEAD)
            "verified_ahead": sum(worker.stats.verified_ahead for worker in workers),
            "verified_taken": sum(worker.stats.verified_taken for worker in workers),
        }
        spans = [(span.start, span.end) for worker in workers for span in worker.stats.spans]
        result["timeline"] = timeline(spans, clock.segments, t0, wall)
        sandbox.close()
    print(RESULT + json.dumps(result), flush=True)


def _cuda_alive(torch: Any) -> bool | str:
    """Whether this process's CUDA context still runs a kernel (after a fault, it may not)."""
    try:
        torch.cuda.synchronize()
        return bool(torch.ones(4, device="cuda").add_(1).sum().item() == 8.0)
    except Exception as error:
        return f"{type(error).__name__}: {str(error)[:300]}"


# ----------------------------------------------------------------------------- parent side


def _env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("TRITON_CACHE_DIR", "HELION_AUTOTUNE_PRECOMPILE"):
        env.pop(name, None)
    fresh = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    env["HELION_CACHE_DIR"] = str(fresh / "helion")
    env["KILN_CACHE_DIR"] = str(fresh / "kiln")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def _command(
    opts: argparse.Namespace,
    arm: str,
    kernel: str,
    *,
    faults: bool = False,
    seed_abort: bool = False,
    seed_faults: bool = False,
) -> list[str]:
    cmd = [sys.executable, __file__, "--child", "--arm", arm, "--kernel", kernel]
    cmd += ["--effort", opts.effort, "--generations", str(opts.generations), "--seed", str(opts.seed)]
    if faults:
        cmd.append("--faults")
    if seed_abort:
        cmd.append("--seed-abort")
    if seed_faults:
        cmd.append("--seed-faults")
    return cmd


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as expired:
        return {"status": "bench-timeout", "timeout_s": timeout, "stderr_tail": str(expired.stderr)[-1500:]}
    found = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    result: dict[str, Any] = json.loads(found[-1][len(RESULT) :]) if found else {"status": "died"}
    result["returncode"] = proc.returncode
    if proc.returncode < 0:
        result["signal"] = signal.Signals(-proc.returncode).name
    result["process_s"] = time.perf_counter() - started
    if not found or proc.returncode != 0:
        result["stderr_tail"] = proc.stderr[-1500:]
    return result


def _ctrl_c(opts: argparse.Namespace, arm: str, env: dict[str, str]) -> dict[str, Any]:
    import psutil

    proc = subprocess.Popen(
        _command(opts, arm, "matmul"), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    seen: dict[int, psutil.Process] = {}
    for line in proc.stdout:
        if line.startswith(PRECOMPILE) or time.monotonic() > deadline:
            break
    time.sleep(1.0)  # in the middle of the precompile phase
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            seen[child.pid] = child
    except psutil.Error:
        pass
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
        exited = True
    except subprocess.TimeoutExpired:
        exited = False
        proc.kill()
        proc.wait()
    time.sleep(2.0)
    left = []
    for pid, child in seen.items():
        try:
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                left.append({"pid": pid, "name": child.name()})
        except psutil.Error:
            continue
    return {
        "arm": arm,
        "exited_after_sigint": exited,
        "returncode": proc.returncode,
        "processes_seen": len(seen),
        "processes_left": left,
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median autotune wall (the lower median of an even count) among the
    successful runs and those that reached the run limit, which rank as the longest (their wall
    is at least the limit), else the first; with one run, that run. A median that falls on a run
    past the limit is that run: the arm's median is longer than the limit. Every run stays in
    the row's ``runs``."""
    ok = sorted((r for r in runs if r.get("status") == "ok"), key=lambda r: float(r["autotune_s"]))
    ranked = ok + [r for r in runs if r.get("status") == "bench-timeout"]
    if not ranked:
        return runs[0]
    chosen = dict(ranked[(len(ranked) - 1) // 2])
    chosen["median_of"] = len(ranked)
    # the runtime bar reads the chosen configs' runtimes over the runs, not only the runtime of
    # whichever run had the median wall
    runtimes = [r["runtime_ms"] for r in ok if isinstance(r.get("runtime_ms"), int | float)]
    if runtimes:
        chosen["runtime_ms_median"] = float(statistics.median(runtimes))
    for key in ("split", "counts"):
        fields = [r[key] for r in ok if isinstance(r.get(key), dict)]
        if fields:
            names = [name for name in fields[0] if all(name in f for f in fields)]
            chosen[f"{key}_median"] = {name: statistics.median(f[name] for f in fields) for name in names}
    return chosen


def _measured(run: dict[str, Any]) -> bool:
    """Whether a run measured its arm: one the bench budget left out or cut short did not (a run
    that reached ``--run-timeout-s`` did: the arm took longer than that)."""
    return run.get("status") not in (SKIPPED, CUT)


def _arms_of(runs: dict[str, Any]) -> list[str]:
    return [arm for arm in ARMS if arm in runs] + sorted(arm for arm in runs if arm not in ARMS)


def _row(kernel: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One kernel's comparison: each arm's median run, kiln's ratios to the Helion arms, and
    (with more than one run per arm) every run under ``runs``."""
    not_measured = {arm: n for arm, rs in runs.items() if (n := sum(not _measured(r) for r in rs))}
    runs = {arm: [r for r in rs if _measured(r)] for arm, rs in runs.items()}
    arms = _arms_of(runs)
    chosen = {arm: _median_run(runs[arm]) for arm in arms if runs[arm]}
    row: dict[str, Any] = {"kernel": kernel, **chosen}
    if max(len(r) for r in runs.values()) > 1:
        row["runs"] = runs
    if not_measured:
        row["runs_not_measured"] = not_measured
    for kiln_arm in KILN_ARMS:
        kiln_ = chosen.get(kiln_arm, {})
        name = kiln_arm.replace("-", "_")
        for helion_arm in ("fork", "spawn"):
            other = chosen.get(helion_arm, {})
            if other.get("status") == "ok" and kiln_.get("status") == "ok":
                row[f"{name}_over_{helion_arm}"] = kiln_["autotune_s"] / other["autotune_s"]
                row[f"runtime_{name}_over_{helion_arm}"] = kiln_["runtime_ms"] / other["runtime_ms"]
                row[f"runtime_median_{name}_over_{helion_arm}"] = (
                    kiln_["runtime_ms_median"] / other["runtime_ms_median"]
                )
    for arm, base in (("kiln-race", "kiln-verify"), ("kiln-screen", "kiln-race")):
        mine, theirs = chosen.get(arm, {}), chosen.get(base, {})
        if mine.get("status") == "ok" and theirs.get("status") == "ok":
            name = f"{arm}_over_{base}".replace("-", "_")
            row[name] = mine["autotune_s"] / theirs["autotune_s"]
            row[f"runtime_{name}"] = mine["runtime_ms"] / theirs["runtime_ms"]
    if "kiln_over_fork" in row:  # the names of the fork-only comparison, kept for its readers
        row["autotune_ratio"] = row["kiln_over_fork"]
        row["runtime_ratio"] = row["runtime_kiln_over_fork"]
    return row


def _geomean(rows: list[dict[str, Any]], key: str) -> float | None:
    """The geometric mean of the rows' ``key`` (rows without one left out)."""
    values = [row[key] for row in rows if key in row]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _geomean_ratio(rows: list[dict[str, Any]]) -> float | None:
    """The geometric mean of the rows' kiln/fork autotune ratios (rows without one left out)."""
    return _geomean(rows, "autotune_ratio")


def _geomeans(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    return {
        "geomean_autotune_ratio": _geomean_ratio(rows),
        "geomean_kiln_over_fork": _geomean(rows, "kiln_over_fork"),
        "geomean_kiln_over_spawn": _geomean(rows, "kiln_over_spawn"),
        "geomean_kiln_compile_over_fork": _geomean(rows, "kiln_compile_over_fork"),
        "geomean_kiln_race_over_fork": _geomean(rows, "kiln_race_over_fork"),
        "geomean_kiln_race_over_kiln_verify": _geomean(rows, "kiln_race_over_kiln_verify"),
        "geomean_kiln_screen_over_fork": _geomean(rows, "kiln_screen_over_fork"),
        "geomean_kiln_screen_over_kiln_race": _geomean(rows, "kiln_screen_over_kiln_race"),
    }


def _plan(opts: argparse.Namespace) -> list[tuple[str, str]]:
    """The compare runs in order, ``(kernel, arm)``: per kernel, ``--repeats`` rounds of every arm;
    each round starts one arm later than the one before (and each kernel one later than the
    kernel before, ``--repeat-offset`` more), so drift hits every arm alike."""
    arms = [arm for arm in opts.arms.split(",") if arm]
    order: list[tuple[str, str]] = []
    for i, kernel in enumerate(k for k in opts.kernels.split(",") if k):
        for repeat in range(opts.repeats):
            shift = (i + repeat + opts.repeat_offset) % len(arms)
            order += [(kernel, arm) for arm in arms[shift:] + arms[:shift]]
    return order


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument(
        "--arms",
        default=",".join(DEFAULT_ARMS),
        help="comma list of: fork, spawn, kiln, kiln-compile, kiln-verify, kiln-race, kiln-screen (the "
        "compare arms, and which of kiln, fork and spawn the three-fault runs use; kiln: kiln's "
        "defaults; kiln-compile: kiln's compiles with Helion's own benchmark "
        "worker; kiln-verify: kiln's loop with Helion's own final verification; kiln-race: kiln's loop "
        f"with KILN_HELION_FINAL_ROUND=1; kiln-screen: kiln-race with KILN_HELION_SCREEN_MS={SCREEN_MS})",
    )
    parser.add_argument(
        "--effort", choices=("quick", "full"), default="quick", help="Helion's autotune_effort"
    )
    parser.add_argument(
        "--generations", type=int, default=1, help="Helion's autotune_max_generations (a fixed budget)"
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--budget-s", type=float, default=450.0, help="wall budget of the whole bench")
    parser.add_argument(
        "--min-start-s",
        type=float,
        default=150.0,
        help="start no run with less budget left than this (a run's timeout is what is left, "
        "at most --run-timeout-s)",
    )
    parser.add_argument("--run-timeout-s", type=float, default=240.0, help="the most one run may take")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per arm and kernel (the median run is compared): "
        "the arms' searches part after the seeded population, so one run per arm is noisy",
    )
    parser.add_argument(
        "--repeat-offset",
        type=int,
        default=0,
        help="shift the rotating arm order (for repeats split over several invocations)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma list of: compare, fault (every fault run), abort (the fault runs of one "
        "aborting config or reference config), three-faults (the three faults in one autotune), "
        "none (run every section), ctrl-c",
    )
    parser.add_argument(
        "--commit",
        default=None,
        help="the commit of the code this run measures, written into its JSON (default: the "
        "checkout's HEAD, where git can read one; a copy without .git names it here)",
    )
    parser.add_argument(
        "--plan", action="store_true", help="print the compare runs' commands in order and run nothing"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="join the JSON of runs made one after another (one device, "
        "one code version; e.g. two kernels per command where a command may take 10 minutes)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", choices=(*ARMS, "none"), help=argparse.SUPPRESS)
    parser.add_argument("--kernel", help=argparse.SUPPRESS)
    parser.add_argument("--faults", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed-abort", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed-faults", action="store_true", help=argparse.SUPPRESS)
    return parser


def _options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _parser()
    opts = parser.parse_args(argv)
    unknown = {a for a in opts.arms.split(",") if a} - set(ARMS)
    if unknown or not opts.arms.strip(","):
        parser.error(f"--arms: one or more of {', '.join(ARMS)} (got {opts.arms!r})")
    unknown = {k for k in opts.kernels.split(",") if k} - set(GPU_SHAPES)
    if unknown:
        parser.error(f"--kernels: unknown {sorted(unknown)}; known: {', '.join(KERNELS)}")
    unknown = {k for k in opts.skip.split(",") if k} - set(SECTIONS)
    if unknown:  # a misspelt section would otherwise run everything
        parser.error(f"--skip: unknown {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if opts.repeats < 1 or opts.generations < 1:
        parser.error("--repeats and --generations are at least 1")
    return opts


def main(argv: list[str] | None = None) -> None:
    opts = _options(argv)
    if opts.child:
        _child(opts)
        return
    if opts.merge:
        _write(_merge(opts.merge), opts.out)
        return
    if opts.plan:
        for kernel, arm in _plan(opts):
            print(" ".join(_command(opts, arm, kernel)))
        return
    begin = time.perf_counter()
    skip = set(filter(None, opts.skip.split(",")))
    scratch = Path(tempfile.mkdtemp(prefix="kiln-helion-bench-"))

    def left() -> float:
        return opts.budget_s - (time.perf_counter() - begin)

    def run(arm: str, kernel: str, **kw: bool) -> dict[str, Any]:
        if left() < opts.min_start_s:  # a run cut short by the budget would be a lost run
            return {"arm": arm, "kernel": kernel, "status": SKIPPED}
        timeout = max(30.0, min(opts.run_timeout_s, left()))
        result = _run(_command(opts, arm, kernel, **kw), _env(scratch), timeout=timeout)
        if result.get("status") == "bench-timeout" and timeout < opts.run_timeout_s:
            # stopped by what was left of the budget, not by the run limit: nothing measured
            result.update(arm=arm, kernel=kernel, status=CUT)
        return result

    report: dict[str, Any] = {
        "bench": "helion",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": opts.commit or machine_state.commit(),
        "settings": {"effort": opts.effort, "generations": opts.generations, "seed": opts.seed},
        "shapes": {k: GPU_SHAPES[k] for k in GPU_SHAPES},
        "bytecode": machine_state.bytecode(),  # spawn mode's children import torch at every start
    }
    try:
        import torch

        report["device"] = torch.cuda.get_device_name(0)
        import importlib.metadata as md

        report["versions"] = {p: md.version(p) for p in ("helion", "torch", "triton")}
    except Exception as error:
        report["device"] = f"unknown ({error})"
    fault: dict[str, Any] = {}
    if not skip & {"fault", "abort"}:
        fault.update(
            config_abort_kiln=run("kiln", "crashy_add", faults=True, seed_abort=True),
            config_abort_fork=run("fork", "crashy_add", faults=True, seed_abort=True),
            # Helion with its precompile off compiles in the autotuning process itself
            config_abort_no_precompile=run("none", "crashy_add", faults=True, seed_abort=True),
            baseline_abort_kiln=run("kiln", "crashall_add", faults=True),
            baseline_abort_fork=run("fork", "crashall_add", faults=True),
        )
    if not skip & {"fault", "three-faults"}:
        # an abort, an illegal memory access and a hang, seeded into one autotune, in each of
        # kiln, fork and spawn that --arms names (by default all three)
        for arm in (a for a in ("kiln", "fork", "spawn") if a in opts.arms.split(",")):
            fault[f"three_faults_{arm}"] = run(arm, "faulty_add", faults=True, seed_faults=True)
    if fault:
        report["fault"] = fault
    if "ctrl-c" not in skip:
        report["ctrl_c"] = [_ctrl_c(opts, arm, _env(scratch)) for arm in ("kiln", "fork")]
    if "compare" not in skip:
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {}  # kernel -> arm -> runs
        for kernel, arm in _plan(opts):
            by_arm = runs.setdefault(kernel, {a: [] for a in opts.arms.split(",") if a})
            by_arm[arm].append(run(arm, kernel))
        report["compare"] = [_row(kernel, by_arm) for kernel, by_arm in runs.items()]
        report.update(_geomeans(report["compare"]))
    report["bench_s"] = time.perf_counter() - begin
    _write(report, opts.out)


def _write(report: dict[str, Any], out: Path | None) -> None:
    _print_table(report)
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def _merge(paths: list[Path]) -> dict[str, Any]:
    """One report from several runs: per kernel, every part's runs of each arm pooled and the
    median run compared (so repeats and arms may be split over several invocations), the fault
    and Ctrl-C arms (a later run's replace an earlier one's), the geomeans over every kernel, and
    each part's command, date and device (which must all be one device). A part at other
    settings than the first's (``--effort``, ``--generations``), or whose processes had torch's
    bytecode where the first's did not or the other way round (spawn mode's per-config children
    import torch at every start), gives rows of their own, named with those settings and
    carrying them, outside the geomeans."""
    parts = [json.loads(path.read_text()) for path in paths]
    devices = {part.get("device") for part in parts}
    if len(devices) != 1:
        raise SystemExit(f"refusing to merge runs from different devices: {sorted(map(str, devices))}")
    merged: dict[str, Any] = {
        **{k: v for k, v in parts[0].items() if k not in ("compare", "fault", "ctrl_c", "bench_s")},
        # a part that is itself a merge (a committed result joined with later runs) brings its
        # own parts
        "merged_from": [
            entry
            for path, part in zip(paths, parts, strict=True)
            for entry in part.get("merged_from")
            or [
                {
                    "file": str(path),
                    "date": part.get("date"),
                    "commit": part.get("commit"),
                    "command": part.get("command"),
                    "bench_s": part.get("bench_s"),
                }
            ]
        ],
    }
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}  # kernel -> arm -> runs, in run order
    base = parts[0].get("settings")
    base_bytecode = _torch_bytecode(parts[0])
    own_settings: dict[str, dict[str, Any]] = {}  # the rows measured at other settings than base
    for part in parts:
        settings = part.get("settings")
        bytecode = _torch_bytecode(part)
        for row in part.get("compare", []):
            kernel = row["kernel"]
            own = dict(row["settings"]) if row.get("settings") else None  # a merged part's row
            if own is None and settings and settings != base:
                generations = settings["generations"]
                plural = "" if generations == 1 else "s"
                kernel = f"{kernel}, effort {settings['effort']}, {generations} generation{plural}"
                own = dict(settings)
            if bytecode != base_bytecode and "torch_bytecode" not in (own or {}):
                kernel += ", Python bytecode kept" if bytecode else ", no Python bytecode"
                own = {**(own or settings or base or {}), "torch_bytecode": bytecode}
            if own is not None:
                own_settings[kernel] = own
            into = runs.setdefault(kernel, {})
            source = row.get("runs") or {arm: [row[arm]] for arm in ARMS if arm in row}
            for arm, arm_runs in source.items():
                into.setdefault(arm, []).extend(arm_runs)
        # each fault run by its name, a later part's over an earlier one's, unless the later was
        # not measured
        for name, fault in part.get("fault", {}).items():
            kept = merged.setdefault("fault", {})
            if _measured(fault) or name not in kept:
                kept[name] = fault
        if "ctrl_c" in part:
            merged["ctrl_c"] = part["ctrl_c"]
    merged["compare"] = [
        {**_row(kernel, arm_runs), **({"settings": own_settings[kernel]} if kernel in own_settings else {})}
        for kernel, arm_runs in runs.items()
    ]
    # the geomeans are over the kernels at the file's settings; a row at other settings (a longer
    # search of one kernel) stands on its own
    merged.update(_geomeans([row for row in merged["compare"] if "settings" not in row]))
    # each part's own command is in merged_from
    merged["command"] = "python bench/helion_autotune.py --merge <the runs in 'merged_from'>"
    return merged


def _torch_bytecode(part: dict[str, Any]) -> bool:
    """Whether a part's processes found torch's bytecode (``machine_state.bytecode``); a part
    from before the bench recorded it ran on the GPU machine's image, which has none (a merge
    keeps its first part's record; its rows of the other kind carry ``torch_bytecode``)."""
    return bool((part.get("bytecode") or {}).get("torch_cached"))


def _print_table(report: dict[str, Any]) -> None:
    def f(value: Any, fmt: str = "{:.1f}") -> str:
        return fmt.format(value) if isinstance(value, int | float) else "-"

    print(f"device: {report.get('device')}  {report.get('versions')}  {report.get('settings')}")
    phases = ("codegen", "baseline", "precompile", "benchmark", "accuracy", "other")
    head = " ".join(f"{p[:7]:>7}" for p in phases)
    print(
        f"{'kernel':12} {'arm':12} {'status':8} {'tune s':>7} {head} "
        f"{'gen':>4} {'comp':>4} {'fail':>4} {'bench':>5} {'ms':>8}"
    )
    for row in report.get("compare", []):
        arms = [arm for arm in ARMS if arm in row]
        for arm in arms:
            r = row[arm]
            split = r.get("split") or {}
            counts = r.get("counts") or {}
            cells = " ".join(f"{f(split.get(f'{p}_s')):>7}" for p in phases)
            print(
                f"{row['kernel']:12} {arm:12} {str(r.get('status'))[:8]:8} "
                f"{f(r.get('autotune_s')):>7} {cells} "
                f"{f(counts.get('configs_generated'), '{}'):>4} {f(r.get('configs_compiled'), '{}'):>4} "
                f"{f(r.get('configs_failed'), '{}'):>4} {f(counts.get('configs_benchmarked'), '{}'):>5} "
                f"{f(r.get('runtime_ms'), '{:.4f}'):>8}"
            )
            if r.get("split_not_measured"):
                print(f"{'':12}   not measured: {', '.join(r['split_not_measured'])}")
            for kept in r.get("final_rounds") or []:
                entries = kept.get("finalists") or []
                print(
                    f"{'':12}   kiln's final round: {len(entries)} finalists, "
                    f"{sum(e.get('passes', 0) for e in entries)} passes, {f(kept.get('wall_s'))} s"
                )
            failures = (r.get("kiln") or {}).get("compile_failures") or {}
            if failures:
                print(
                    f"{'':12}   failed compiles: "
                    + ", ".join(f"{name} {count}" for name, count in sorted(failures.items()))
                )
            kinds = ((r.get("kiln") or {}).get("sandbox") or {}).get("kinds") or {}
            if kinds:
                print(
                    f"{'':12}   sandbox calls: "
                    + ", ".join(
                        f"{name} {int(k['calls'])} in {k['seconds']:.1f} s (jobs {k['job_seconds']:.1f} s)"
                        for name, k in kinds.items()
                    )
                )
            ahead = ((r.get("kiln") or {}).get("sandbox") or {}).get("verified_ahead")
            if ahead:
                taken = r["kiln"]["sandbox"].get("verified_taken", 0)
                print(f"{'':12}   re-benchmarks run ahead: {ahead}, taken by Helion's re-benchmark: {taken}")
            if any(r.get("ptxas_at_phase_start") or []):  # older runs: a count as each phase began
                counts = ", ".join(str(n) for n in r["ptxas_at_phase_start"])
                print(f"{'':12}   ptxas running as each precompile phase began: {counts}")
            if any(r.get("ptxas_after_phase") or []):
                counts = ", ".join(str(len(owners)) for owners in r["ptxas_after_phase"])
                print(f"{'':12}   ptxas still running as each precompile phase ended: {counts}")
                for i, owners in enumerate(r["ptxas_after_phase"]):
                    for owner in owners:
                        print(f"{'':12}     phase {i + 1}: ptxas of {owner}")
            for i, phase in enumerate((r.get("kiln") or {}).get("compile_phases") or []):
                last = phase.get("last") or {}
                print(
                    f"{'':12}   precompile phase {i + 1}: {f(phase['seconds'])} s "
                    f"at {f(phase['start_s'])} s, "
                    f"{phase['landed']} landed; the last sent at {f(last.get('sent_s'))} s, "
                    f"{f(last.get('wall_s'))} s out, compiling {f(last.get('compile_s'))} s, "
                    f"{last.get('outcome', '-')}"
                )
                if phase.get("out_at_end"):
                    print(
                        f"{'':12}     {phase['out_at_end']} compile(s) still out at its end: "
                        + ", ".join(phase.get("out_at_end_labels") or [])
                    )
            line = r.get("timeline")
            if line:
                print(
                    f"{'':12}   sandbox busy {f(line['sandbox_busy_s'])} s; benchmark phase "
                    f"{f(line['benchmark_sandbox_busy_s'])} s with a call running, "
                    f"{f(line['benchmark_sandbox_idle_s'])} s with none; longest idle stretches "
                    + ", ".join(f"{length:.1f} s at {start:.1f} s" for start, length in line["idle_gaps"][:4])
                )
        ratios = "  ".join(
            f"{arm}/{other} autotune {f(row.get(f'{name}_over_{other}'), '{:.3f}')} "
            f"runtime {f(row.get(f'runtime_{name}_over_{other}'), '{:.3f}')} "
            f"(median over runs {f(row.get(f'runtime_median_{name}_over_{other}'), '{:.3f}')})"
            for arm, name in ((a, a.replace("-", "_")) for a in KILN_ARMS)
            for other in ("fork", "spawn")
            if other in row and arm in row
        )
        if ratios:
            print(f"{'':12} {ratios}")
        runs = row.get("runs", {})
        for arm in runs:
            walls = ", ".join(
                f"{r['autotune_s']:.1f}/{r.get('configs_compiled')}"
                if r.get("status") == "ok"
                else str(r["status"])
                for r in runs[arm]
            )
            print(f"{'':12}   {arm} runs (autotune s / configs compiled): {walls}")
    for key in (
        "geomean_kiln_over_fork",
        "geomean_kiln_over_spawn",
        "geomean_kiln_compile_over_fork",
        "geomean_kiln_race_over_fork",
        "geomean_kiln_screen_over_fork",
    ):
        if key in report:
            print(f"{key}: {f(report.get(key), '{:.3f}')}")
    for name, r in report.get("fault", {}).items():
        how = r.get("signal") or r.get("error_type") or ""
        print(
            f"fault {name:22} status={r.get('status')} rc={r.get('returncode')} {how} "
            f"nw={r.get('num_warps')} cuda_alive={r.get('cuda_alive')}"
        )
    for r in report.get("ctrl_c", []):
        print(
            f"ctrl-c {r['arm']:5} exited={r['exited_after_sigint']} "
            f"seen={r['processes_seen']} left={r['processes_left']}"
        )


if __name__ == "__main__":
    main()

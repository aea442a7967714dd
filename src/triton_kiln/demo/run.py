"""``kiln demo``: compile a handful of real kernels through the pool and report each outcome.

Two of the jobs are bad on purpose: one whose compile calls ``abort()`` inside Triton's
pipeline and one that never finishes. The demo succeeds (exit 0) when every good kernel
produced a cubin and the two bad ones were reported as a crash (SIGABRT) and a timeout,
while the rest of the batch went on. It prints as it goes (a row per job as it finishes), in at
most 100 columns, and says that its two faults are its own (not compiler bugs to report).
"""

from __future__ import annotations

import shutil
import tempfile
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_kiln import settings
from triton_kiln.compile.request import CompileRequest
from triton_kiln.errors import CompileTimeoutError, JobFailure, TargetError, WorkerCrashedError
from triton_kiln.pool import CompilePool
from triton_kiln.triton_compat import GPUTarget, target_problem


@dataclass
class DemoJob:
    request: CompileRequest
    expect: str  # "ok", "crash" or "timeout"


def demo_jobs(target: GPUTarget) -> list[DemoJob]:
    from triton_kiln.demo import kernels as k

    ptr16 = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr"), "*fp16")
    ints = dict.fromkeys(("M", "N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn"), "i32")
    jobs = [
        DemoJob(
            CompileRequest(
                k.vector_add,
                {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                {"BLOCK": block},
                {"num_warps": 4},
                target,
            ),
            "ok",
        )
        for block in (256, 1024)
    ]
    jobs += [
        DemoJob(
            CompileRequest(
                k.softmax,
                {
                    "out_ptr": "*fp32",
                    "in_ptr": "*fp32",
                    "in_stride": "i32",
                    "out_stride": "i32",
                    "n_cols": "i32",
                },
                {"BLOCK": 1024},
                {"num_warps": 8},
                target,
            ),
            "ok",
        )
    ]
    jobs += [
        DemoJob(
            CompileRequest(
                k.matmul,
                {**ptr16, **ints},
                {"BM": bm, "BN": bn, "BK": 32},
                {"num_warps": w, "num_stages": 3},
                target,
            ),
            "ok",
        )
        for bm, bn, w in ((64, 64, 4), (128, 128, 8))
    ]
    jobs.append(
        DemoJob(CompileRequest(k.demo_abort, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=target), "crash")
    )
    jobs.append(
        DemoJob(CompileRequest(k.demo_hang, {"x_ptr": "*fp32"}, {"BLOCK": 64}, target=target), "timeout")
    )
    return jobs


def outcome_of(future_exc: BaseException | None) -> str:
    if future_exc is None:
        return "ok"
    if isinstance(future_exc, WorkerCrashedError):
        return "crash"
    if isinstance(future_exc, CompileTimeoutError):
        return "timeout"
    return "error"


DEMO_MAX_WORKERS = 8
DEMO_TIMEOUT_S = 5.0


def demo_settings(workers: int | None, timeout_s: float | None) -> tuple[int, float]:
    """The demo's workers and timeout: the arguments, else ``KILN_WORKERS`` /
    ``KILN_JOB_TIMEOUT_S`` (or a :func:`triton_kiln.settings.scope`), else the demo's own defaults
    (at most 8 workers; 5 s, since one job hangs on purpose)."""
    current = settings.current()
    given = settings.overridden()
    if workers is None:
        workers = current.workers if "workers" in given else min(DEMO_MAX_WORKERS, current.workers)
    if timeout_s is None:
        timeout_s = current.job_timeout_s if "job_timeout_s" in given else DEMO_TIMEOUT_S
    return workers, timeout_s


WIDTH = 100
"""Every line the demo prints fits in this many columns."""

CRASH_ADVICE = (
    "this crash is the one kiln demo injects on purpose: its compile-stage hook "
    "(triton_kiln/demo/kernels.py) calls abort() while this kernel compiles, as a failed "
    "compiler assertion would; kiln skipped the job and replaced its worker, and the other jobs "
    "went on"
)
HANG_ADVICE = (
    "this hang is the one kiln demo injects on purpose: its compile-stage hook "
    "(triton_kiln/demo/kernels.py) never returns for this kernel; kiln killed the worker's process "
    "group at the timeout and replaced it, and the other jobs went on"
)


def run_demo(
    *,
    target: GPUTarget,
    workers: int | None = None,
    timeout_s: float | None = None,
    echo: Callable[[str], Any] = print,
) -> bool:
    """Run the demo; return ``True`` when every job ended as expected.

    It talks from the start: a line before the pool starts, one when it is ready, then a table
    row as each job finishes (every line within :data:`WIDTH` columns). Raises
    :class:`~triton_kiln.errors.TargetError` at once for a target Triton cannot compile for, and
    :class:`~triton_kiln.errors.SettingsError` for out-of-range workers or timeout, before starting anything.
    """
    import os

    problem = target_problem(target)
    if problem is not None:
        raise TargetError(f"kiln demo: {problem}.")
    workers, timeout_s = demo_settings(workers, timeout_s)
    settings.current().replace(workers=workers, job_timeout_s=timeout_s)  # range checks, up front
    say = _fitting(echo)
    say(
        f"kiln demo: compiling kernels for {target.backend} sm_{target.arch} with {workers} workers, "
        f"timeout {timeout_s:g} s (--workers/--timeout or KILN_WORKERS/KILN_JOB_TIMEOUT_S change them); "
        "two of them fail on purpose: one aborts, one hangs"
    )
    cache = Path(tempfile.mkdtemp(prefix="kiln-demo-"))
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")  # fresh: every job really compiles
    started = time.perf_counter()
    say("starting the compile pool (a zygote process imports Triton once; workers fork from it) ...")
    try:
        with CompilePool(
            workers=workers,
            job_timeout_s=timeout_s,
            cache_dir=cache / "kiln",
            preload=["triton_kiln.demo.kernels"],
        ) as pool:
            jobs = demo_jobs(target)
            pool.wait_ready()
            say(
                f"pool ready after {time.perf_counter() - started:.1f} s; compiling {len(jobs)} kernels, "
                "a row as each one finishes:\n"
            )
            all_as_expected, failures = _run_jobs(pool, jobs, timeout_s, say)
            stats = pool.stats
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for failure in failures:
        say("\n" + failure)
    say(
        f"\n{stats.compiled} compiled, {stats.failed} failed, {stats.worker_deaths} workers replaced, "
        f"wall {time.perf_counter() - started:.1f} s"
    )
    say("demo " + ("PASSED: good kernels compiled, bad ones reported" if all_as_expected else "FAILED"))
    return all_as_expected


def _run_jobs(
    pool: CompilePool, jobs: list[DemoJob], timeout_s: float, say: Callable[[str], Any]
) -> tuple[bool, list[str]]:
    """Submit every job; print a table row as each finishes. Returns (all as expected, the
    explanations of the failed jobs)."""
    table = _Table([job.request.label() for job in jobs])
    say(table.header())
    futures = {pool.submit(job.request): job for job in jobs}
    pending = dict(futures)
    failures: list[str] = []
    all_as_expected = True
    waiting_said = False
    for future in as_completed(futures):
        job = pending.pop(future)
        exc = future.exception()
        got = outcome_of(exc)
        as_expected = got == job.expect
        all_as_expected &= as_expected
        if exc is None:
            artifact = future.result()
            detail = f"cubin {_size(len(artifact.binary))}, smem {_size(artifact.shared)}"
            seconds = artifact.compile_s
        else:
            detail = "on purpose; see below" if as_expected else f"{type(exc).__name__}; see below"
            seconds = float(getattr(exc, "seconds", 0.0))
            failures.append(_explain(job, exc, as_expected))
        if not as_expected:
            detail = f"NOT AS EXPECTED ({job.expect}); " + detail
        say(table.row(job.request.label(), got, seconds, detail))
        hanging = [j for j in pending.values() if j.expect == "timeout"]
        if pending and len(hanging) == len(pending) and not waiting_said:
            names = ", ".join(j.request.label() for j in hanging)
            say(f"  ... {names} hangs on purpose; kiln kills it at the {timeout_s:g} s timeout")
            waiting_said = True
    return all_as_expected, failures


def _explain(job: DemoJob, exc: BaseException, as_expected: bool) -> str:
    """What a failed job's error says, wrapped to :data:`WIDTH`; the demo's own faults say that
    they are the demo's (not a compiler bug to report)."""
    text = str(exc)
    if as_expected and isinstance(exc, JobFailure):
        advice = CRASH_ADVICE if job.expect == "crash" else HANG_ADVICE
        text = exc.message_with(advice)
    lines = [f"{job.request.label()}:"]
    for line in text.splitlines():
        indent = "    " + " " * (len(line) - len(line.lstrip()))
        lines += textwrap.wrap(
            line.strip(),
            WIDTH,
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_on_hyphens=False,
        ) or [""]
    return "\n".join(lines)


class _Table:
    """The demo's table: job, outcome, seconds, detail; at most :data:`WIDTH` columns."""

    def __init__(self, labels: list[str]) -> None:
        self.widths = (max(len("job"), *map(len, labels)), len("timeout"), len("sec"))

    def _line(self, cells: tuple[str, str, str], detail: str) -> str:
        text = "  ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True)) + "  " + detail
        return _fit(text.rstrip())

    def header(self) -> str:
        head = self._line(("job", "outcome", "sec"), "detail")
        return head + "\n" + "-" * len(_fit(head.ljust(WIDTH)))

    def row(self, label: str, outcome: str, seconds: float, detail: str) -> str:
        return self._line((label, outcome, f"{seconds:.2f}"), detail)


def _size(n: int) -> str:
    """``512 B``, ``8 KiB``, ``45.8 KiB``."""
    if n < 1024:
        return f"{n} B"
    kib = n / 1024
    return f"{kib:.0f} KiB" if kib == int(kib) else f"{kib:.1f} KiB"


def _fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def _fitting(echo: Callable[[str], Any]) -> Callable[[str], Any]:
    """``echo`` with every line wrapped (prose) to :data:`WIDTH` columns."""

    def say(text: str) -> Any:
        out: list[str] = []
        for line in text.split("\n"):
            out += textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_on_hyphens=False) or [""]
        return echo("\n".join(out))

    return say

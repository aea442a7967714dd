"""``kiln demo``: compile a handful of real kernels through the pool and report each outcome.

Two of the jobs are bad on purpose: one whose compile calls ``abort()`` inside Triton's
pipeline and one that never finishes. The demo succeeds (exit 0) when every good kernel
produced a cubin and the two bad ones were reported as a crash (SIGABRT) and a timeout,
while the rest of the batch went on. It prints as it goes (a row per job as it finishes), within
the terminal's width (:func:`triton_kiln.terminal.width`: 80 columns where there is no terminal),
and says that its two faults are its own (not compiler bugs to report).
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
from triton_kiln.terminal import width as terminal_width
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
    """The demo's workers and its hanging job's limit: the arguments, else ``KILN_WORKERS`` /
    ``KILN_JOB_TIMEOUT_S`` (or a :func:`triton_kiln.settings.scope`), else the demo's own defaults
    (at most 8 workers; 5 s, since one job hangs on purpose)."""
    current = settings.current()
    given = settings.overridden()
    if workers is None:
        workers = current.workers if "workers" in given else min(DEMO_MAX_WORKERS, current.workers)
    if timeout_s is None:
        timeout_s = current.job_timeout_s if "job_timeout_s" in given else DEMO_TIMEOUT_S
    return workers, timeout_s


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
    row as each job finishes (every line within the terminal's width). Raises
    :class:`~triton_kiln.errors.TargetError` at once for a target Triton cannot compile for, and
    :class:`~triton_kiln.errors.SettingsError` for out-of-range workers or timeout, before starting anything.
    """
    import os

    problem = target_problem(target)
    if problem is not None:
        raise TargetError(f"kiln demo: {problem}.")
    workers, timeout_s = demo_settings(workers, timeout_s)
    settings.current().replace(workers=workers, job_timeout_s=timeout_s)  # range checks, up front
    # Only the job that hangs on purpose gets the demo's short limit: a good kernel on a slow or
    # busy machine may take longer than that, and is given kiln's usual limit.
    good_limit_s = max(timeout_s, settings.current().job_timeout_s)
    width = terminal_width()
    say = _fitting(echo, width)
    say(
        f"kiln demo: compiling kernels for {target.backend} sm_{target.arch} with {workers} workers; "
        f"two of them fail on purpose: one aborts, and one hangs until kiln kills it after {timeout_s:g} s "
        "(--workers/--timeout or KILN_WORKERS/KILN_JOB_TIMEOUT_S change them)"
    )
    cache = Path(tempfile.mkdtemp(prefix="kiln-demo-"))
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")  # fresh: every job really compiles
    started = time.perf_counter()
    say("starting the compile pool (a zygote process imports Triton once; workers fork from it) ...")
    try:
        with CompilePool(
            workers=workers,
            job_timeout_s=good_limit_s,
            cache_dir=cache / "kiln",
            preload=["triton_kiln.demo.kernels"],
        ) as pool:
            jobs = demo_jobs(target)
            pool.wait_ready()
            say(
                f"pool ready after {time.perf_counter() - started:.1f} s; compiling {len(jobs)} kernels, "
                "a row as each one finishes:\n"
            )
            all_as_expected, failures = _run_jobs(pool, jobs, timeout_s, say, echo, width)
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
    pool: CompilePool,
    jobs: list[DemoJob],
    timeout_s: float,
    say: Callable[[str], Any],
    show: Callable[[str], Any],
    width: int,
) -> tuple[bool, list[str]]:
    """Submit every job, the hanging one with the limit ``timeout_s`` and the rest with the pool's;
    print a table row as each finishes (``show``: the table fits itself to the terminal; ``say``
    wraps prose). Returns (all as expected, the explanations of the failed jobs)."""
    table = _Table([job.request.label() for job in jobs], max(width, terminal_width(limit=None)))
    show(table.header())
    futures = {
        pool.submit(job.request, timeout_s=timeout_s if job.expect == "timeout" else None): job
        for job in jobs
    }
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
            failures.append(_explain(job, exc, as_expected, width))
        if not as_expected:
            detail = f"NOT AS EXPECTED ({job.expect}); " + detail
        show(table.row(job.request.label(), got, seconds, detail))
        hanging = [j for j in pending.values() if j.expect == "timeout"]
        if pending and len(hanging) == len(pending) and not waiting_said:
            names = ", ".join(j.request.label() for j in hanging)
            say(f"  ... {names} hangs on purpose; kiln kills it at the {timeout_s:g} s timeout")
            waiting_said = True
    return all_as_expected, failures


def _explain(job: DemoJob, exc: BaseException, as_expected: bool, width: int) -> str:
    """What a failed job's error says, wrapped to ``width``; the demo's own faults say that they
    are the demo's (not a compiler bug to report)."""
    text = str(exc)
    if as_expected and isinstance(exc, JobFailure):
        advice = CRASH_ADVICE if job.expect == "crash" else HANG_ADVICE
        text = exc.message_with(advice)
    lines = [f"{job.request.label()}:"]
    for line in text.splitlines():
        indent = "    " + " " * min(len(line) - len(line.lstrip()), 8)
        lines += _wrap(line.strip(), width, indent, indent + "  ") or [""]
    return "\n".join(lines)


class _Table:
    """The demo's table: job, outcome, seconds, detail, within ``width`` columns. A job's label
    or detail longer than its column wraps within it."""

    OUTCOME, SECONDS, GAP = len("timeout"), len("99.99"), 2
    DETAIL = len("cubin 999.9 KiB, smem 99.9 KiB")  # the detail column's width, when it can have it

    def __init__(self, labels: list[str], width: int) -> None:
        fixed = self.OUTCOME + self.SECONDS + 3 * self.GAP
        longest = max(len("job"), *map(len, labels))
        self.job = max(12, min(longest, width - fixed - self.DETAIL))
        self.detail = max(12, width - fixed - self.job)
        self.width = min(width, self.job + fixed + self.DETAIL)  # the rule under the header

    def _lines(self, cells: tuple[str, str, str], detail: str) -> str:
        job = _wrap(cells[0], self.job, "", "  ") or [""]
        details = _wrap(detail, self.detail, "", "  ") or [""]
        rows = []
        for n in range(max(len(job), len(details))):
            first = (cells[1], cells[2]) if n == 0 else ("", "")
            parts = [
                (job[n] if n < len(job) else "").ljust(self.job),
                first[0].ljust(self.OUTCOME),
                first[1].ljust(self.SECONDS),
                details[n] if n < len(details) else "",
            ]
            rows.append((" " * self.GAP).join(parts).rstrip())
        return "\n".join(rows)

    def header(self) -> str:
        return self._lines(("job", "outcome", "sec"), "detail") + "\n" + "-" * self.width

    def row(self, label: str, outcome: str, seconds: float, detail: str) -> str:
        return self._lines((label, outcome, f"{seconds:.2f}"), detail)


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped to ``width`` columns at its spaces (a label breaks after one of its
    commas); only a word longer than a line is broken."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)


def _size(n: int) -> str:
    """``512 B``, ``8 KiB``, ``45.8 KiB``."""
    if n < 1024:
        return f"{n} B"
    kib = n / 1024
    return f"{kib:.0f} KiB" if kib == int(kib) else f"{kib:.1f} KiB"


def _fitting(echo: Callable[[str], Any], width: int) -> Callable[[str], Any]:
    """``echo`` with every line wrapped (prose) to ``width`` columns."""

    def say(text: str) -> Any:
        out: list[str] = []
        for line in text.split("\n"):
            indent = " " * (len(line) - len(line.lstrip()))
            out += _wrap(line.strip(), width, indent, indent + "  ") or [""]
        return echo("\n".join(out))

    return say

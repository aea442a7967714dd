"""``kiln demo``: compile a handful of real kernels through the pool and report each outcome.

Two of the jobs are bad on purpose: one whose compile calls ``abort()`` inside Triton's
pipeline and one that never finishes. The demo succeeds (exit 0) when every good kernel
produced a cubin and the two bad ones were reported as a crash (SIGABRT) and a timeout,
while the rest of the batch went on.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_kiln import settings
from triton_kiln.compile.request import CompileRequest
from triton_kiln.errors import CompileTimeoutError, TargetError, WorkerCrashedError
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
    ``KILN_JOB_TIMEOUT_S`` (or a :func:`kiln.settings.scope`), else the demo's own defaults
    (at most 8 workers; 5 s, since one job hangs on purpose)."""
    current = settings.current()
    given = settings.overridden()
    if workers is None:
        workers = current.workers if "workers" in given else min(DEMO_MAX_WORKERS, current.workers)
    if timeout_s is None:
        timeout_s = current.job_timeout_s if "job_timeout_s" in given else DEMO_TIMEOUT_S
    return workers, timeout_s


def run_demo(
    *,
    target: GPUTarget,
    workers: int | None = None,
    timeout_s: float | None = None,
    echo: Callable[[str], Any] = print,
) -> bool:
    """Run the demo; return ``True`` when every job ended as expected.

    Raises :class:`~kiln.errors.TargetError` at once for a target Triton cannot compile for, and
    :class:`~kiln.errors.SettingsError` for out-of-range workers or timeout, before starting anything.
    """
    import os

    problem = target_problem(target)
    if problem is not None:
        raise TargetError(f"kiln demo: {problem}.")
    workers, timeout_s = demo_settings(workers, timeout_s)
    settings.current().replace(workers=workers, job_timeout_s=timeout_s)  # range checks, up front
    cache = Path(tempfile.mkdtemp(prefix="kiln-demo-"))
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")  # fresh: every job really compiles
    started = time.perf_counter()
    try:
        with CompilePool(
            workers=workers,
            job_timeout_s=timeout_s,
            cache_dir=cache / "kiln",
            preload=["triton_kiln.demo.kernels"],
        ) as pool:
            jobs = demo_jobs(target)
            echo(
                f"kiln demo: compiling {len(jobs)} kernels for {target.backend} sm_{target.arch} "
                f"with {workers} workers (timeout {timeout_s:g} s; --workers/--timeout or KILN_WORKERS/"
                f"KILN_JOB_TIMEOUT_S change them)\n"
            )
            futures = [(job, pool.submit(job.request)) for job in jobs]
            rows = []
            failures: list[str] = []
            all_as_expected = True
            for job, future in futures:
                exc = future.exception()
                got = outcome_of(exc)
                as_expected = got == job.expect
                all_as_expected &= as_expected
                if exc is None:
                    artifact = future.result()
                    detail = (
                        f"cubin {len(artifact.binary):,} bytes, {artifact.num_warps} warps, "
                        f"{artifact.shared:,} B shared"
                    )
                    seconds = artifact.compile_s
                else:
                    detail = f"{type(exc).__name__}: see below"
                    seconds = float(getattr(exc, "seconds", 0.0))
                    failures.append(f"{job.request.label()}:\n    " + str(exc).replace("\n", "\n    "))
                rows.append((job.request.label(), got, seconds, "yes" if as_expected else "NO", detail))
            stats = pool.stats
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    _table(rows, echo)
    for failure in failures:
        echo("\n" + failure)
    echo(
        f"\n{stats.compiled} compiled, {stats.failed} failed, {stats.worker_deaths} workers replaced, "
        f"wall {time.perf_counter() - started:.1f} s"
    )
    echo("demo " + ("PASSED: good kernels compiled, bad ones reported" if all_as_expected else "FAILED"))
    return all_as_expected


def _table(rows: list[tuple[str, str, float, str, str]], echo: Callable[[str], Any]) -> None:
    headers = ("job", "outcome", "seconds", "expected", "detail")
    width = [
        max(len(h), *(len(str(r[i]) if i != 2 else f"{r[i]:.2f}") for r in rows))
        for i, h in enumerate(headers[:4])
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers[:4], width, strict=True)) + "  detail"
    echo(line)
    echo("-" * min(len(line) + 40, 160))
    for job, got, seconds, ok, detail in rows:
        cells = (job, got, f"{seconds:.2f}", ok)
        echo("  ".join(c.ljust(w) for c, w in zip(cells, width, strict=True)) + "  " + detail[:110])

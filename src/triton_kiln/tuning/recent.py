"""What one tuning session left in the tuning database: the runs begun since a time, each in brief.

``kiln tune`` notes the time, runs the user's workload (whose autotuned kernels write their runs
to the database as they tune), then reads back the runs begun since then::

    started = time.time()
    workload()                                  # triton_kiln.autotune'd kernels: begin_run ... finish_run
    with TuningDatabase(path) as database:
        outcomes = [RunOutcome.of(run) for run in runs_since(database, started)]

A run another process of the machine began in the same window (one sharing the database) is
listed too: the database does not record which process wrote a run. A run taken from the remote
cache (:mod:`triton_kiln.remote.tuning`) is written to the local database when it is adopted, so it is
listed as well: its best config is what this machine launches.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from triton_kiln.tuning.results import ConfigResult, TuningRun

CAUSES: dict[str, str] = {
    "compile_error": "compile error",
    "crashed": "compile crashed",
    "timeout": "compile timed out",
    "out_of_resources": "out of resources",
    "bench_error": "benchmark error",
    "bench_crashed": "benchmark crashed",
    "bench_timeout": "benchmark timed out",
    "wrong_output": "wrong output",
}
"""A failed config's status, as the summary names its cause (``pruned`` is not a failure)."""

_SIGNAL = re.compile(r"\bSIG[A-Z0-9]+\b")


class RunSource(Protocol):
    """What :func:`runs_since` reads: a :class:`~triton_kiln.tuning.TuningDatabase` (a remote behind it
    or not)."""

    def runs(self, kernel: str | None = None, limit: int = 100) -> list[TuningRun]: ...


def runs_since(database: RunSource, started_at: float, *, page: int = 64) -> list[TuningRun]:
    """Every run of ``database`` begun at or after ``started_at`` (Unix time), oldest first.

    Reads the newest runs a page at a time (doubling) until one begun earlier is among them, so a
    large database is not read whole.
    """
    limit = max(1, page)
    while True:
        newest = database.runs(limit=limit)
        recent = [run for run in newest if run.started_at >= started_at]
        if len(recent) < len(newest) or len(newest) < limit:
            return sorted(recent, key=lambda run: (run.started_at, run.run_id or 0))
        limit *= 2


def failure_cause(result: ConfigResult) -> str:
    """A failed config's cause for the summary: ``"compile crashed: SIGABRT"``, ``"wrong output"``..."""
    cause = CAUSES.get(result.status, result.status)
    if result.status in ("crashed", "bench_crashed"):
        found = _SIGNAL.search(result.reason or "")
        if found:
            cause += f": {found.group(0)}"
    return cause


@dataclass(frozen=True)
class RunOutcome:
    """One run in brief: the kernel and key, the chosen config, what was tried and why configs failed."""

    kernel: str
    key_repr: str
    device_name: str
    capability: str
    finished: bool
    best_label: str | None
    best_config: dict[str, Any] | None
    best_ms: float | None
    tried: int
    """Configs with a result other than ``pruned``."""
    ok: int
    pruned: int
    failed: dict[str, int]
    """Failed configs by cause (:func:`failure_cause`), most common first."""
    wall_s: float | None

    @classmethod
    def of(cls, run: TuningRun) -> RunOutcome:
        best = run.best
        causes = Counter(failure_cause(r) for r in run.results if not r.ok and r.status != "pruned")
        pruned = sum(1 for r in run.results if r.status == "pruned")
        return cls(
            kernel=run.kernel,
            key_repr=run.key_repr,
            device_name=run.device_name,
            capability=run.capability,
            finished=run.finished,
            best_label=run.best_label,
            best_config=None if best is None else best.config,
            best_ms=None if best is None else best.runtime_ms,
            tried=len(run.results) - pruned,
            ok=len(run.ok_results),
            pruned=pruned,
            failed=dict(causes.most_common()),
            wall_s=run.wall_s,
        )

    @property
    def succeeded(self) -> bool:
        """The run finished with a chosen config."""
        return self.finished and self.best_label is not None

    def lines(self) -> list[str]:
        """The run for a person: a line with the key and the chosen config, then one per cause."""
        head = f"{self.kernel}  key {self.key_repr}: "
        if self.best_label is not None:
            timing = f"{self.best_ms:.4f} ms; " if self.best_ms is not None else ""
            head += f"{self.best_label}  ({timing}{self.tried} tried, {self.ok} ok"
        elif self.finished:
            head += f"no config worked  ({self.tried} tried"
        else:
            head += f"did not finish  ({self.tried} measured before it stopped"
        if self.pruned:
            head += f", {self.pruned} pruned"
        head += f"; {self.wall_s:.1f} s)" if self.wall_s is not None else ")"
        return [head] + [f"    {count:4d} failed: {cause}" for cause, count in self.failed.items()]

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "key": self.key_repr,
            "device": self.device_name,
            "capability": self.capability,
            "finished": self.finished,
            "best_label": self.best_label,
            "best_config": self.best_config,
            "best_ms": self.best_ms,
            "tried": self.tried,
            "ok": self.ok,
            "pruned": self.pruned,
            "failed": self.failed,
            "wall_s": self.wall_s,
        }

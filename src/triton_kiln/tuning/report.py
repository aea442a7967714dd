"""A tuning run for people (:func:`format_table`) and for tools (:func:`to_json`, :func:`write_json`).

The table, one row per config in the order they were measured::

    kernel matmul  key {"M": 4096}  device NVIDIA H100 80GB HBM3 (capability 9.0)  triton 3.6.0  wall 12.3 s
      config              compile s  status         runtime ms  speed-up  reason
      BLOCK_M=64, ...          1.20  ok                 2.0000     1.00x
    * BLOCK_M=128, ...         1.35  ok                 1.0000     2.00x
      BLOCK_M=256, ...         0.80  compile_error           -         -  out of shared memory ...
    3 configs: 2 ok, 1 failed (compile_error 1)
    * best: BLOCK_M=128, ... (1.0000 ms, 2.00x); speed-up vs the default config BLOCK_M=64, ...
    time: 12.3 s = sandbox wait 0.4 s, compiling 6.1 s (overlaps benchmarking), benchmarking 3.2 s, ...

When the run had a final round, a line names its contenders, each with its screening median and
its final one (``final round (screening -> full timing): BLOCK=128, ... 0.7000 -> 0.8000 ms, ...``).
The last line, where the wall time went (:attr:`TuningRun.split`, see
:mod:`triton_kiln.autotuner.timesplit`), is left out for runs recorded without it. Compiling overlaps
the other parts; sandbox wait, benchmarking, final round and other add up to the wall time.

An ``ok`` config the output check flagged (outputs it could not confirm) shows ``ok, flagged``
and the reason; it never wins over a trusted config, and a flagged config faster than the best
is named under the best line, with why::

    * best: BLOCK=128, ... (1.0100 ms, 1.98x); speed-up vs the default config BLOCK=64, ...
      passed over: BLOCK=64, MODE=5, ... (0.5000 ms), faster but flagged: out_ptr: ...

When every ``ok`` config is flagged the fastest wins, and the line after the best says that no
config's outputs could be confirmed. Speed-up is the default config's median runtime divided by
the row's (above 1: faster than the default, the first config given). It is shown only where
both ran correctly.

A run that other processes of the node waited for and adopted (instead of tuning the same
kernel and key themselves; docs/NODE.md) says so under the best line::

      adopted by 7 other processes of the node (waited up to 5.9 s): the same config on each

The JSON form is ``{"format": "kiln-tuning-run", "version": 1, "run": TuningRun.to_json(),
"summary": {...}}``; :func:`read_json` reads the run back.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from triton_kiln.files import atomic_write
from triton_kiln.tuning.results import ConfigResult, TuningRun

JSON_FORMAT = "kiln-tuning-run"
JSON_VERSION = 1

REASON_WIDTH = 60
"""Characters of a failure reason shown in the table (the JSON keeps it whole)."""


def speedup(run: TuningRun, result: ConfigResult) -> float | None:
    """The default config's median runtime over ``result``'s, or ``None`` if either did not run ok."""
    default = run.default
    if (
        default is None
        or not default.ok
        or not result.ok
        or default.runtime_ms is None
        or result.runtime_ms is None
        or result.runtime_ms <= 0
    ):
        return None
    return default.runtime_ms / result.runtime_ms


def speedups(run: TuningRun) -> dict[str, float | None]:
    """:func:`speedup` of every result, by label."""
    return {result.label: speedup(run, result) for result in run.results}


def _counts(run: TuningRun) -> tuple[int, int, int, Counter[str]]:
    by_status = Counter(result.status for result in run.results)
    ok = by_status["ok"]
    pruned = by_status["pruned"]
    failures = Counter({status: n for status, n in by_status.items() if status not in ("ok", "pruned")})
    return ok, sum(failures.values()), pruned, failures


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _reason(result: ConfigResult) -> str:
    if not result.reason:
        return ""
    text = " ".join(result.reason.split())  # one line
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 3] + "..."


_SPLIT_WORDS = (
    ("sandbox_wait_s", "sandbox wait"),
    ("compile_s", "compiling"),
    ("bench_s", "benchmarking"),
    ("final_s", "final round"),
    ("other_s", "other"),
)


_SANDBOX_WORDS = (
    ("sandbox_inputs_s", "inputs"),
    ("sandbox_load_s", "loading"),
    ("sandbox_check_s", "checked runs"),
    ("sandbox_timing_s", "timing"),
)


def format_split(run: TuningRun) -> str | None:
    """``"time: 6.3 s = sandbox wait 0.0 s, compiling 1.1 s (overlaps benchmarking), ..."``, or
    ``None`` for a run without a time split."""
    if run.split is None:
        return None
    wall = "-" if run.wall_s is None else f"{run.wall_s:.1f} s"
    parts = []
    for key, words in _SPLIT_WORDS:
        if key in run.split:
            note = " (overlaps benchmarking)" if key == "compile_s" else ""
            parts.append(f"{words} {run.split[key]:.1f} s{note}")
    line = f"time: {wall} = " + ", ".join(parts)
    inside = [(key, words) for key, words in _SANDBOX_WORDS if key in run.split]
    if inside:
        line += "; in the sandbox: " + ", ".join(f"{words} {run.split[key]:.1f} s" for key, words in inside)
    return line


def format_table(run: TuningRun) -> str:
    """A fixed-width table of ``run``: header, one row per config (best marked ``*``), footer lines."""
    wall = "-" if run.wall_s is None else f"{run.wall_s:.1f} s"
    header = (
        f"kernel {run.kernel}  key {run.key_repr}  device {run.device_name} "
        f"(capability {run.capability})  triton {run.triton_version}  wall {wall}"
    )
    if not run.finished and run.run_id is not None:
        header += "  (unfinished)"

    titles = ("config", "compile s", "status", "runtime ms", "speed-up", "reason")
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for result in run.results:
        ratio = speedup(run, result)
        rows.append(
            (
                result.label,
                _num(result.compile_s, ".2f"),
                "ok, flagged" if result.flagged else result.status,
                _num(result.runtime_ms, ".4f"),
                "-" if ratio is None else f"{ratio:.2f}x",
                _reason(result),
            )
        )
        marks.append("*" if result.label == run.best_label else " ")
    widths = [max([len(title)] + [len(row[i]) for row in rows]) for i, title in enumerate(titles)]
    left_aligned = {0, 2, 5}

    def line(mark: str, cells: tuple[str, ...]) -> str:
        parts = [
            cell.ljust(width) if i in left_aligned else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return f"{mark} {'  '.join(parts)}".rstrip()

    lines = [header, line(" ", titles)]
    lines += [line(mark, row) for mark, row in zip(marks, rows, strict=True)]

    ok, failed, pruned, failures = _counts(run)
    footer = f"{len(run.results)} configs: {ok} ok, {failed} failed"
    if failures:
        footer += " (" + ", ".join(f"{status} {n}" for status, n in sorted(failures.items())) + ")"
    if pruned:
        footer += f", {pruned} pruned"
    flagged = sum(1 for result in run.results if result.flagged)
    if flagged:
        footer += f"; {flagged} ok but flagged by the output check (see reason)"
    lines.append(footer)
    best = run.best
    if best is not None:
        ratio = speedup(run, best)
        summary = f"* best: {best.label} ({_num(best.runtime_ms, '.4f')} ms"
        summary += f", {ratio:.2f}x)" if ratio is not None else ")"
    else:
        summary = "no best config"
    default = run.default
    if run.default_label is None:
        summary += "; no default config, so no speed-ups"
    elif default is None or not default.ok:
        summary += f"; the default config {run.default_label} did not run ok, so no speed-ups"
    else:
        summary += f"; speed-up vs the default config {run.default_label}"
    lines.append(summary)
    lines += choice_lines(run)
    finalists = [r for r in run.results if r.screen_ms is not None]
    if finalists:
        raced = ", ".join(f"{r.label} {r.screen_ms:.4f} -> {_num(r.runtime_ms, '.4f')} ms" for r in finalists)
        lines.append(f"final round (screening -> full timing): {raced}")
    if run.adoptions:
        lines.append(adoption_line(run))
    split = format_split(run)
    if split is not None:
        lines.append(split)
    if run.gpu_peak_bytes is not None:
        lines.append(gpu_memory_line(run.gpu_peak_bytes))
    return "\n".join(lines)


def gpu_memory_line(peak_bytes: int) -> str:
    """``"kiln's GPU memory: at most 1,280 MiB in its sandbox (...), freed when the run ended"``."""
    return (
        f"kiln's GPU memory: at most {peak_bytes / (1 << 20):,.0f} MiB in its sandbox (input copies, "
        f"scratch, L2 flush buffer; its CUDA context aside), freed when the run ended"
    )


def adoption_line(run: TuningRun) -> str:
    """``"adopted by 7 other processes of the node (waited up to 5.9 s): the same config on each"``."""
    others = "process" if run.adoptions == 1 else "processes"
    waited = "" if run.adoption_wait_s is None else f" (waited up to {run.adoption_wait_s:.1f} s)"
    return f"  adopted by {run.adoptions} other {others} of the node{waited}: the same config on each"


CHOICE_REASON_WIDTH = 200
"""Characters of a passed-over config's reason shown under the best line."""


def choice_lines(run: TuningRun) -> list[str]:
    """What the output check did to the choice: each faster flagged config passed over, or that
    no config's outputs could be confirmed (the fastest flagged one won)."""
    lines = []
    for result in run.passed_over:
        reason = " ".join((result.reason or "").split())
        if len(reason) > CHOICE_REASON_WIDTH:
            reason = reason[: CHOICE_REASON_WIDTH - 3] + "..."
        lines.append(
            f"  passed over: {result.label} ({_num(result.runtime_ms, '.4f')} ms), faster but {reason}"
        )
    if run.unconfirmed:
        flagged = sum(1 for result in run.results if result.flagged)
        lines.append(
            f"  no config's outputs could be confirmed (all {flagged} ok configs flagged): the best "
            "is the fastest of them; pass reference= to check against yours"
        )
    return lines


def to_json(run: TuningRun) -> dict[str, Any]:
    """``run`` as a JSON-able dict (strict JSON: no NaN or Infinity), with a summary."""
    ok, failed, pruned, failures = _counts(run)
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "run": run.to_json(),
        "summary": {
            "configs": len(run.results),
            "ok": ok,
            "failed": failed,
            "pruned": pruned,
            "failures_by_status": dict(sorted(failures.items())),
            "best_label": run.best_label,
            "best_runtime_ms": None if run.best is None else run.best.runtime_ms,
            "best_unconfirmed": run.unconfirmed,
            "passed_over": [result.label for result in run.passed_over],
            "speedups_vs_default": speedups(run),
        },
    }


def from_json(data: dict[str, Any]) -> TuningRun:
    """The run in a dict made by :func:`to_json`."""
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise ValueError(f"not a kiln tuning report: expected format {JSON_FORMAT!r}")
    if data.get("version") != JSON_VERSION:
        raise ValueError(
            f"kiln tuning report version {data.get('version')!r} is not supported (this kiln reads "
            f"version {JSON_VERSION}); read it with the kiln that wrote it."
        )
    return TuningRun.from_json(data["run"])


def write_json(run: TuningRun, path: Path | str) -> None:
    """Write :func:`to_json` of ``run`` to ``path`` atomically (a reader sees all of it or nothing)."""
    text = json.dumps(to_json(run), indent=1, allow_nan=False) + "\n"
    atomic_write(Path(path), text.encode())


def read_json(path: Path | str) -> TuningRun:
    """The run in a file written by :func:`write_json`."""
    return from_json(json.loads(Path(path).read_text()))

"""The HTML report's three pictures of one tuning run, as inline SVG (:mod:`.svg`).

* :func:`times_chart`: every config's runtime as a sorted bar (median, with a 20th-80th
  percentile whisker; for a config timed again in the final round, a mark at its screening
  time), the chosen config and flagged ones coloured, and below them every config that failed,
  marked with its status and cause.
* :func:`split_chart`: where the run's wall time went (:attr:`TuningRun.split`, see
  :mod:`triton_kiln.autotuner.timesplit`) as stacked bars: the tuning thread's parts (sandbox wait,
  screening, final round, other), compiling on the same scale (it overlaps them), and, when the
  native sandbox reported it, what the benchmark calls spent inside the sandbox (inputs, loading,
  checked runs, timing, round trip).
* :func:`compile_chart`: each config's compile time, longest first.
"""

from __future__ import annotations

from triton_kiln.tuning.results import ConfigResult, TuningRun
from triton_kiln.tuning.svg import Svg, nice_ticks

WIDTH = 1100
ROW = 17
LABEL_CHARS = 68

COLOURS = {
    "chosen": "#15803d",
    "ok": "#60a5fa",
    "flagged": "#f59e0b",
    "failed": "#dc2626",
    "pruned": "#9ca3af",
    "compile": "#8b5cf6",
    "axis": "#6b7280",
    "grid": "#e5e7eb",
}

AXIS_CAP = 4.0
"""The runtimes' axis ends at this many times the fastest config's (or the slowest's, if less):
the race near the winner stays readable; slower bars end at the axis, marked »."""

COMPILE_FAILURES = ("compile_error", "crashed", "timeout", "out_of_resources")


def short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (with "...")."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def common_parts(run: TuningRun) -> list[str]:
    """The ``name=value`` parts of a label that every config of the run shares (left off the plot)."""
    labels = [result.label.split(", ") for result in run.results]
    if len(labels) < 2:
        return []
    return [part for part in labels[0] if all(part in other for other in labels[1:])]


def kind(run: TuningRun, result: ConfigResult) -> str:
    """How a config is drawn: ``chosen``, ``ok``, ``flagged``, ``pruned`` or ``failed``."""
    if result.label == run.best_label:
        return "chosen"
    if result.ok:
        return "flagged" if result.flagged else "ok"
    return "pruned" if result.status == "pruned" else "failed"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f} ms"


def times_chart(run: TuningRun) -> str:
    """Sorted bars of the configs' runtimes; failures below, marked with their cause."""
    timed = sorted(
        (r for r in run.results if r.ok and r.runtime_ms is not None), key=lambda r: r.runtime_ms or 0.0
    )
    shown = {r.label for r in timed}
    rest = [r for r in run.results if r.label not in shown]
    left, right, top = 470.0, WIDTH - 190.0, 38.0
    svg = Svg(
        WIDTH, top + ROW * max(1, len(timed) + len(rest)) + 8, f"runtimes of {run.kernel}", "chart times"
    )
    high = max((r.runtime_ms_p80 or r.runtime_ms or 0.0 for r in timed), default=0.0)
    fastest = timed[0].runtime_ms or 0.0 if timed else 0.0
    ticks = nice_ticks(min(high, AXIS_CAP * fastest) if fastest > 0 else high)
    scale = (right - left) / ticks[-1]
    end = ticks[-1]  # a runtime past the axis is drawn to its end, marked, its value written out
    for tick in ticks:
        x = left + tick * scale
        svg.line(x, top - 4, x, svg.height - 4, stroke=COLOURS["grid"])
        svg.text(x, top - 8, f"{tick:g}", anchor="middle", class_="tick")
    svg.text(
        left - 8, top - 8, "runtime, ms (median; whisker: 20th-80th percentile)", anchor="end", class_="axis"
    )
    best = run.best
    common = common_parts(run)
    if any(r.screen_ms is not None for r in timed):
        svg.text(right, top - 20, "\u258e its screening time (timed again in the final round)", anchor="end",
                 class_="axis screen-key")  # fmt: skip
    if common:
        svg.text(
            left - 8, top - 20, "every config: " + short(", ".join(common), 70), anchor="end", class_="axis"
        )

    def name(result: ConfigResult) -> str:
        own = ", ".join(part for part in result.label.split(", ") if part not in common)
        return short(own or result.label, LABEL_CHARS)

    for row, result in enumerate(timed):
        y = top + row * ROW
        drawn = kind(run, result)
        svg.text(left - 8, y + 12, name(result), anchor="end", title=result.label,
                 class_=f"label {drawn}")  # fmt: skip
        runtime = result.runtime_ms or 0.0
        tip = f"{result.label}\n{_ms(runtime)} ({drawn})" + (f"\n{result.reason}" if result.reason else "")
        svg.rect(left, y + 3, min(runtime, end) * scale, ROW - 6, fill=COLOURS[drawn], title=tip,
                 class_=f"bar {drawn}", data_label=result.label, data_kind=drawn)  # fmt: skip
        if result.screen_ms is not None and result.screen_ms < end:  # timed again in the final round
            x = left + result.screen_ms * scale
            svg.rect(x - 1.5, y + 1, 3, ROW - 2, fill="#7c2d12", title=f"screening: {_ms(result.screen_ms)}",
                     class_="screen", data_label=result.label, data_ms=f"{result.screen_ms:.6g}")  # fmt: skip
        if runtime > end:
            svg.text(right - 2, y + 12, "\u00bb", anchor="end", class_="past")
        if (
            result.runtime_ms_p20 is not None
            and result.runtime_ms_p80 is not None
            and result.runtime_ms_p20 < end
        ):
            y_mid = y + ROW / 2
            low, upper = result.runtime_ms_p20 * scale, min(result.runtime_ms_p80, end) * scale
            svg.line(left + low, y_mid, left + upper, y_mid, stroke="#111827", stroke_width=1)
        note = _ms(runtime)
        if drawn == "chosen":
            note += "  \u2605 chosen"
        elif drawn == "flagged":
            faster = best is not None and best.runtime_ms is not None and runtime < best.runtime_ms
            note += "  flagged, passed over" if faster and not run.unconfirmed else "  flagged"
        elif best is not None and best.runtime_ms:
            ratio = runtime / best.runtime_ms
            note += f"  +{(ratio - 1) * 100:.1f}%" if ratio < 2 else f"  {ratio:.1f}x"
        svg.text(right + 6, y + 12, note, class_=f"value {drawn}")
    for row, result in enumerate(rest, start=len(timed)):
        y = top + row * ROW
        drawn = kind(run, result)
        svg.text(left - 8, y + 12, name(result), anchor="end", title=result.label,
                 class_=f"label {drawn}")  # fmt: skip
        cause = f"{result.status}: {result.reason}" if result.reason else result.status
        if result.ok:  # ok but never timed (a newer kiln's record?)
            cause = "ok, no runtime recorded"
        svg.text(left + 4, y + 12, "\u2715 " + short(cause, 96), title=cause, class_=f"fail {drawn}",
                 data_label=result.label, data_kind=drawn, data_status=result.status)  # fmt: skip
    return svg.render()


SERIAL_PARTS = (
    ("sandbox_wait_s", "sandbox wait", "#f472b6"),
    ("bench_s", "screening (benchmarks, checks)", "#60a5fa"),
    ("final_s", "final round", "#1d4ed8"),
    ("other_s", "other (waiting for compiles, ...)", "#d1d5db"),
)
SANDBOX_PARTS = (
    ("sandbox_inputs_s", "inputs", "#fda4af"),
    ("sandbox_load_s", "loading binaries", "#c4b5fd"),
    ("sandbox_check_s", "checked runs (output check)", "#fbbf24"),
    ("sandbox_timing_s", "timing", "#34d399"),
)


def split_chart(run: TuningRun) -> str | None:
    """Stacked bars of where the wall time went, or ``None`` for a run without a time split."""
    split = run.split
    if split is None:
        return None
    wall = run.wall_s if run.wall_s is not None else sum(split.get(key, 0.0) for key, _, _ in SERIAL_PARTS)
    serial = [(key, words, split[key], colour) for key, words, colour in SERIAL_PARTS if key in split]
    compiling = ("compile_s", "compiling, until the last compile ended", split.get("compile_s", 0.0), "")
    rows: list[tuple[str, list[tuple[str, str, float, str]]]] = [
        ("tuning thread", serial),
        ("compiling (overlaps)", [(*compiling[:3], COLOURS["compile"])]),
    ]
    inside = [(key, words, split[key], colour) for key, words, colour in SANDBOX_PARTS if key in split]
    if inside:
        calls = split.get("bench_s", 0.0) + split.get("final_s", 0.0)
        trip = calls - sum(seconds for _, _, seconds, _ in inside)
        inside.append(("round_trip_s", "round trip (messages, caller)", max(0.0, trip), "#e5e7eb"))
        rows.append(("benchmark calls", inside))
    left, right, bar = 170.0, WIDTH - 20.0, 24.0
    legend = [part for _, parts in rows for part in parts]
    height = 30 + len(rows) * (bar + 10) + 18 * ((len(legend) + 2) // 3) + 10
    svg = Svg(WIDTH, height, f"time split of {run.kernel}", "chart split")
    total = max([wall] + [sum(p[2] for p in parts) for _, parts in rows]) or 1.0
    ticks = nice_ticks(total)
    scale = (right - left) / ticks[-1]
    for tick in ticks:
        svg.line(
            left + tick * scale, 20, left + tick * scale, 20 + len(rows) * (bar + 10), stroke=COLOURS["grid"]
        )
        svg.text(left + tick * scale, 14, f"{tick:g} s", anchor="middle", class_="tick")
    for row, (name, parts) in enumerate(rows):
        y = 24 + row * (bar + 10)
        svg.text(left - 8, y + bar / 2 + 4, name, anchor="end", class_="label")
        x = left
        for key, words, seconds, colour in parts:
            share = f"{seconds / wall * 100:.0f}% of the wall time" if wall else ""
            svg.rect(x, y, seconds * scale, bar, fill=colour, title=f"{words}: {seconds:.2f} s {share}",
                     class_="part", data_part=key, data_seconds=f"{seconds:.3f}")  # fmt: skip
            x += seconds * scale
    y = 30 + len(rows) * (bar + 10)
    for index, (key, words, seconds, colour) in enumerate(legend):
        x = 20 + (index % 3) * (WIDTH - 40) / 3
        line_y = y + (index // 3) * 18
        svg.rect(x, line_y, 11, 11, fill=colour)
        svg.text(x + 16, line_y + 10, f"{words}: {seconds:.2f} s", class_="legend", data_part=key)
    return svg.render()


def compile_chart(run: TuningRun) -> str | None:
    """Columns of each config's compile time, longest first; ``None`` when none compiled."""
    compiled = sorted(
        (r for r in run.results if r.compile_s is not None), key=lambda r: r.compile_s or 0.0, reverse=True
    )
    if not compiled:
        return None
    left, top, plot = 60.0, 16.0, 150.0
    width = min(22.0, (WIDTH - left - 20) / len(compiled))
    svg = Svg(WIDTH, top + plot + 24, f"compile times of {run.kernel}", "chart compile")
    ticks = nice_ticks(compiled[0].compile_s or 0.0, 4)
    scale = plot / ticks[-1]
    for tick in ticks:
        y = top + plot - tick * scale
        svg.line(left, y, WIDTH - 20, y, stroke=COLOURS["grid"])
        svg.text(left - 6, y + 4, f"{tick:g} s", anchor="end", class_="tick")
    for index, result in enumerate(compiled):
        seconds = result.compile_s or 0.0
        failed = result.status in COMPILE_FAILURES
        colour = COLOURS["failed"] if failed else COLOURS["compile"]
        if result.label == run.best_label:
            colour = COLOURS["chosen"]
        tip = f"{result.label}\ncompile {seconds:.2f} s, {result.status}"
        svg.rect(left + index * width + 1, top + plot - seconds * scale, max(width - 2, 1.0), seconds * scale,
                 fill=colour, title=tip, class_="column", data_label=result.label,
                 data_seconds=f"{seconds:.3f}")  # fmt: skip
    svg.text(left, top + plot + 18, "configs, longest compile first (hover for the config; green: chosen, "
             "red: failed to compile)", class_="axis")  # fmt: skip
    return svg.render()

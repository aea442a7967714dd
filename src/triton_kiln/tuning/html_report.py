"""``kiln report --html PATH``: tuning runs as one self-contained HTML page.

::

    with TuningDatabase(path) as db:
        write_html("report.html", db.runs(limit=5), db.runs(limit=-1), source=str(path))

The page holds a table of every run in the database (``all_runs``), then a section per run of
``runs``: the chosen config and the ones passed over with why (faster but flagged by the output
check, rejected by it, or slower by how much: in the final round or at screening), the configs'
runtimes as sorted bars with every failure marked with its cause, the time split as stacked
bars, each config's compile time, and a table of every config. Pictures are inline SVG drawn
here (:mod:`.html_charts`); the CSS is inline; there is no JavaScript and nothing is fetched
when the page is viewed. Its Content-Security-Policy forbids scripts and every network load, so
the page stays inert even if a string from the database got through; and none does: every string
from the database (kernel names, keys, labels, error messages) is escaped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from triton_kiln.files import atomic_write
from triton_kiln.tuning.html_charts import compile_chart, kind, short, split_chart, times_chart
from triton_kiln.tuning.report import format_split, speedup
from triton_kiln.tuning.results import ConfigResult, TuningRun
from triton_kiln.tuning.svg import esc

__all__ = ["render_html", "write_html"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827; margin: 0;
       background: #f9fafb; }
main { max-width: 1140px; margin: 0 auto; padding: 16px 20px 60px; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 18px; margin: 0 0 4px; }
h3 { font-size: 14px; margin: 18px 0 6px; color: #374151; }
.nowrap, table.runs th { white-space: nowrap; } .wide { overflow-x: auto; }
svg text.past { fill: #fff; font-weight: 700; }
table.runs { font-size: 11.5px; } table.runs td.mono { font-size: 10.5px; }
.meta { color: #6b7280; font-size: 12.5px; }
section.run { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 14px 18px;
              margin: 18px 0; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #f0f0f0; vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; } td.num, th.num { text-align: right;
     font-variant-numeric: tabular-nums; }
td.reason { color: #4b5563; max-width: 460px; overflow-wrap: anywhere; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12px; }
.choice { border-left: 4px solid #15803d; background: #f0fdf4; padding: 8px 12px; margin: 10px 0; }
.warning { border-left: 4px solid #f59e0b; background: #fffbeb; padding: 8px 12px; margin: 10px 0; }
.note { color: #6b7280; font-style: italic; }
tr.chosen td { background: #f0fdf4; font-weight: 600; } tr.failed td { color: #b91c1c; }
tr.flagged td { background: #fffbeb; } tr.unfinished td { color: #9ca3af; }
.tag { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 11.5px; color: #fff; }
.tag.chosen { background: #15803d; } .tag.flagged { background: #f59e0b; }
.tag.failed { background: #dc2626; } .tag.ok { background: #60a5fa; } .tag.pruned { background: #9ca3af; }
svg.chart { display: block; max-width: 100%; height: auto; font-size: 11px; }
svg text { fill: #374151; } svg text.label { font-family: ui-monospace, Menlo, Consolas, monospace; }
svg text.label.chosen, svg text.value.chosen { fill: #15803d; font-weight: 600; }
svg text.fail { fill: #b91c1c; } svg text.fail.pruned { fill: #6b7280; }
svg text.tick, svg text.axis { fill: #6b7280; }
details summary { cursor: pointer; color: #1d4ed8; margin: 6px 0; }
"""


def _when(stamp: float | None) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def _short_when(stamp: float) -> str:
    return time.strftime("%m-%d %H:%M", time.gmtime(stamp))


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else format(value, fmt) + unit


def _anchor(run: TuningRun) -> str:
    return f"run-{run.run_id}" if run.run_id is not None else f"run-{id(run)}"


def _tag(drawn: str, text: str | None = None) -> str:
    return f'<span class="tag {esc(drawn)}">{esc(text or drawn)}</span>'


def runs_table(all_runs: Sequence[TuningRun], shown: set[str]) -> str:
    """A row per run in the database: identity, wall time, counts, best config, state."""
    head = (
        "<tr><th>run</th><th>kernel</th><th>key</th><th>device</th><th>triton</th><th>started</th>"
        '<th class="num">wall s</th><th class="num">configs</th><th class="num">ok</th>'
        '<th class="num">failed</th><th class="num">flagged</th><th>chosen config</th>'
        '<th class="num">ms</th><th>state</th></tr>'
    )
    rows = []
    for run in all_runs:
        anchor = _anchor(run)
        name = esc(run.kernel)
        kernel = f'<a href="#{esc(anchor)}">{name}</a>' if anchor in shown else name
        failed = sum(1 for r in run.results if not r.ok and r.status != "pruned")
        flagged = sum(1 for r in run.results if r.flagged)
        best = run.best
        state = "finished" if run.finished else "unfinished"
        chosen = esc(short(best.label, 36)) if best else "-"
        rows.append(
            f'<tr class="{state}" data-run="{esc(run.run_id)}"><td>{esc(run.run_id)}</td><td>{kernel}</td>'
            f'<td class="mono" title="{esc(run.key_repr)}">{esc(short(run.key_repr, 20))}</td>'
            f'<td class="nowrap">{esc(run.device_name)}</td><td>{esc(run.triton_version)}</td>'
            f'<td class="nowrap" title="{esc(_when(run.started_at))}">{esc(_short_when(run.started_at))}</td>'
            f'<td class="num">{_num(run.wall_s, ".1f")}</td>'
            f'<td class="num">{len(run.results)}</td><td class="num">{len(run.ok_results)}</td>'
            f'<td class="num">{failed}</td><td class="num">{flagged}</td>'
            f'<td class="mono" title="{esc(best.label if best else "")}">{chosen}</td>'
            f'<td class="num">{_num(best.runtime_ms if best else None, ".4f")}</td><td>{state}</td></tr>'
        )
    table = f'<table class="runs"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<div class="wide">{table}</div>'


def _passed_over(run: TuningRun) -> list[tuple[ConfigResult, str]]:
    """The configs that did not win, each with why: every ``ok`` one faster than the chosen one
    (flagged), the three nearest slower ones, and those the output check rejected."""
    best = run.best
    if best is None or best.runtime_ms is None:
        return []
    timed = sorted(
        (r for r in run.ok_results if r.label != best.label and r.runtime_ms is not None),
        key=lambda r: r.runtime_ms or 0.0,
    )
    found: list[tuple[ConfigResult, str]] = []
    slower = 0
    for result in timed:
        runtime = result.runtime_ms or 0.0
        if runtime < best.runtime_ms:
            why = result.reason or "flagged"
            found.append((result, f"faster, but {why}" if not run.unconfirmed else f"faster; {why}"))
        elif slower < 3:
            slower += 1
            extra = f"; {result.reason}" if result.reason else ""
            found.append(
                (result, f"{(runtime / best.runtime_ms - 1) * 100:.1f}% slower{_race(run, result)}{extra}")
            )
    found += [
        (r, f"rejected by the output check: {r.reason or 'wrong output'}")
        for r in run.results
        if r.status == "wrong_output"
    ]
    return found


def _race(run: TuningRun, result: ConfigResult) -> str:
    """Where a slower config lost: in the final round, or at screening (when the run had one)."""
    if result.screen_ms is not None:
        return f" in the final round (screening: {result.screen_ms:.4f} ms)"
    if any(r.screen_ms is not None for r in run.results):
        return " at screening (outside the final round's margin)"
    return ""


def choice_block(run: TuningRun) -> str:
    """The chosen config and the ones passed over, with why."""
    best = run.best
    if best is None:
        why = (
            "the run is unfinished (still going, or its process died)"
            if not run.finished
            else "no config worked"
        )
        return f'<div class="warning">No config was chosen: {esc(why)}.</div>'
    ratio = speedup(run, best)
    parts = [
        f'<div class="choice" data-chosen="{esc(best.label)}">{_tag("chosen")} '
        f'<code class="chosen">{esc(best.label)}</code><br>'
        f"{_num(best.runtime_ms, '.4f', ' ms')} (20th-80th percentile {_num(best.runtime_ms_p20, '.4f')}"
        f"-{_num(best.runtime_ms_p80, '.4f')} ms)"
        + (f", {ratio:.2f}x the default config" if ratio is not None else "")
        + f", compiled in {_num(best.compile_s, '.2f', ' s')}</div>"
    ]
    if run.unconfirmed:
        flagged = sum(1 for r in run.results if r.flagged)
        parts.append(
            f'<div class="warning">No config\'s outputs could be confirmed (all {flagged} ok configs were '
            "flagged by the output check): the chosen config is the fastest of them. Pass "
            "<code>reference=</code> to check against yours.</div>"
        )
    passed = _passed_over(run)
    if passed:
        rows = "".join(
            f'<tr class="{esc(kind(run, r))}" data-label="{esc(r.label)}">'
            f'<td class="mono">{esc(r.label)}</td>'
            f'<td class="num">{_num(r.runtime_ms, ".4f")}</td><td class="reason">{esc(why)}</td></tr>'
            for r, why in passed
        )
        parts.append(
            '<h3>Passed over</h3><table class="passed-over"><thead><tr><th>config</th>'
            f'<th class="num">ms</th><th>why it was not chosen</th></tr></thead><tbody>{rows}</tbody></table>'
        )
    return "".join(parts)


def configs_table(run: TuningRun) -> str:
    """Every config of the run, in the order measured, with its reason in full."""
    rows = []
    for index, result in enumerate(run.results, start=1):
        drawn = kind(run, result)
        ratio = speedup(run, result)
        status = "ok, flagged" if result.flagged else result.status
        rows.append(
            f'<tr class="{esc(drawn)}" data-label="{esc(result.label)}" data-status="{esc(result.status)}">'
            f'<td class="num">{index}</td><td class="mono">{esc(result.label)}</td>'
            f'<td>{_tag(drawn, status)}</td><td class="num">{_num(result.compile_s, ".2f")}</td>'
            f'<td class="num">{_num(result.runtime_ms, ".4f")}</td>'
            f'<td class="num">{_num(result.screen_ms, ".4f")}</td>'
            f'<td class="num">{"-" if ratio is None else f"{ratio:.2f}x"}</td>'
            f'<td class="num">{_num(result.max_abs_diff, ".3g")}</td>'
            f'<td class="reason">{esc(result.reason or "")}</td></tr>'
        )
    head = (
        '<tr><th class="num">#</th><th>config</th><th>status</th><th class="num">compile s</th>'
        '<th class="num">runtime ms</th><th class="num">screening ms</th><th class="num">speed-up</th>'
        '<th class="num">max |diff|</th>'
        "<th>reason</th></tr>"
    )
    return f'<table class="configs"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def run_section(run: TuningRun) -> str:
    """One run: header, choice, runtimes, time split, compile times, every config."""
    failed = sum(1 for r in run.results if not r.ok and r.status != "pruned")
    finalists = sum(1 for r in run.results if r.screen_ms is not None)
    final = f", {finalists} timed again in the final round" if finalists else ""
    state = "" if run.finished else " &middot; <strong>unfinished</strong> (still going, or its process died)"
    header = (
        f'<h2>{esc(run.kernel)} <span class="meta">run {esc(run.run_id)}</span></h2>'
        f'<div class="meta">key <code>{esc(run.key_repr)}</code> &middot; {esc(run.device_name)} '
        f"(capability {esc(run.capability)}) &middot; Triton {esc(run.triton_version)} &middot; started "
        f"{esc(_when(run.started_at))} &middot; wall {_num(run.wall_s, '.2f', ' s')} &middot; "
        f"{len(run.results)} configs, {len(run.ok_results)} ok, {failed} failed{final}{state}</div>"
    )
    split = split_chart(run)
    split_text = format_split(run)
    compiles = compile_chart(run)
    body = [
        header,
        choice_block(run),
        "<h3>Runtimes</h3>",
        times_chart(run),
        "<h3>Where the time went</h3>",
        split if split is not None else '<p class="note">No time split was recorded for this run.</p>',
        f'<p class="meta">{esc(split_text)}</p>' if split_text else "",
        "<h3>Compile times</h3>",
        compiles if compiles is not None else '<p class="note">No config was compiled.</p>',
        f"<details><summary>Every config ({len(run.results)})</summary>{configs_table(run)}</details>",
    ]
    opening = f'<section class="run" id="{esc(_anchor(run))}" data-run="{esc(run.run_id)}">'
    return opening + "".join(body) + "</section>"


def render_html(
    runs: Sequence[TuningRun],
    all_runs: Sequence[TuningRun],
    *,
    source: str,
    generated_at: float | None = None,
) -> str:
    """The page: ``all_runs`` in a table, a section for each of ``runs``."""
    sections = [run_section(run) for run in runs]
    shown = {_anchor(run) for run in runs}
    stamp = _when(time.time() if generated_at is None else generated_at)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>kiln tuning report</title><style>{CSS}</style></head><body><main>"
        f'<h1>kiln tuning report</h1><div class="meta">{esc(source)} &middot; {len(all_runs)} runs '
        f"&middot; written {esc(stamp)}</div>"
        f"<h3>Every run in the database</h3>{runs_table(all_runs, shown)}"
        + ("".join(sections) or '<p class="note">No runs to show.</p>')
        + "</main></body></html>\n"
    )


def write_html(
    path: Path | str, runs: Sequence[TuningRun], all_runs: Sequence[TuningRun], *, source: str
) -> Path:
    """Write :func:`render_html` to ``path`` atomically; returns the path."""
    target = Path(path)
    atomic_write(target, render_html(runs, all_runs, source=source).encode())
    return target

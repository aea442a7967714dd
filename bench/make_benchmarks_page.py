"""Write docs/BENCHMARKS.md from bench/results: one table per benchmark, kiln against its baselines.

Every file under ``bench/results`` is one benchmark on one device, named
``<benchmark>-<device>.json`` after the script ``bench/<benchmark>.py`` that wrote it, and holds
``device``, ``date``, ``commit`` and ``command`` at its top level. This script reads them all and
writes the page; ``tests/test_benchmarks_page.py`` fails when the committed page is not what it
writes. Run from the repository root (no GPU needed)::

    python bench/make_benchmarks_page.py            # writes docs/BENCHMARKS.md
    python bench/make_benchmarks_page.py --check    # exit 1 if docs/BENCHMARKS.md differs
    python bench/make_benchmarks_page.py --add /tmp/ranks.json h100   # -> bench/results/ranks-h100.json

``--add`` files a benchmark's output as the current result for its device: it names the file
after the script in the output's command and fills in ``device``, ``date``, ``commit`` (this
checkout's ``HEAD``) and ``command`` where the output lacks them.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import machine_state

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "BENCHMARKS.md"
# The page links files outside docs/ by their address in the repository, so the docs build
# (mkdocs --strict) can resolve every link; the address is pyproject.toml's Source URL (tomllib
# is 3.11+, kiln supports 3.10).
SOURCE = re.search(r'^Source = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]  # type: ignore[index]
BLOB = f"{SOURCE}/blob/main"


@dataclass(frozen=True)
class Row:
    """One comparison: a measure of kiln's arm against the same measure of one baseline arm."""

    case: str
    measure: str
    kiln: float | None
    baseline_name: str
    baseline: float | None
    run: str = ""  # the run this row comes from, where a file joins several


Extractor = Callable[[dict[str, Any]], Iterator[Row]]
# The triton_parallel arm: stock triton.autotune with each tuning's configs compiled in a pool first
PARALLEL = "triton.autotune, configs compiled in parallel"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _autotune(data: dict[str, Any]) -> Iterator[Row]:
    for name, kernel_set in data["sets"].items():
        triton, kiln = kernel_set.get("triton", {}), kernel_set.get("kiln", {})
        yield Row(
            name,
            "first tuned result (s)",
            _num(kiln.get("first_result_s")),
            "triton.autotune",
            _num(triton.get("first_result_s")),
        )
        parallel = _num((kernel_set.get("triton_parallel") or {}).get("first_result_s"))
        if parallel is not None:  # runs before the arm existed have no such row
            yield Row(name, "first tuned result (s)", _num(kiln.get("first_result_s")), PARALLEL, parallel)
        harness = kernel_set.get("harness_ms", {})
        yield Row(
            name,
            "chosen config, Triton's harness (ms)",
            _num(harness.get("kiln_choice")),
            "triton.autotune",
            _num(harness.get("triton_choice")),
        )


def _compile_batch(data: dict[str, Any]) -> Iterator[Row]:
    for name, kernel_set in data["sets"].items():
        summary = kernel_set["summary"]
        for arm in ("kiln-cold", "kiln-warm"):
            if arm not in summary:
                continue
            for base in ("fork", "spawn", "seq"):
                if base in summary:
                    yield Row(
                        f"{name} ({kernel_set['n_configs']} configs)",
                        f"{arm} wall (s)",
                        _num(summary[arm]["median_wall_s"]),
                        base,
                        _num(summary[base]["median_wall_s"]),
                    )


def _corpus(data: dict[str, Any]) -> Iterator[Row]:
    total = _num(data["kernels"])
    yield Row("kernels identical to Triton's binary", "count", _num(data["identical"]), "kernels", total)


def _farm(data: dict[str, Any]) -> Iterator[Row]:
    walls = data["summary"]["median_wall_s"]
    for arm, wall in walls.items():
        if arm != "local":
            yield Row(
                "72-config matmul", "median wall (s)", _num(walls["local"]), f"Ray arm {arm}", _num(wall)
            )


def _ok_runs(median_run: dict[str, Any], runs: list[dict[str, Any]] | None) -> str:
    """How many runs an arm's median is of: ``3``, or ``1 of 2`` where a run failed (a run past
    the bench's run limit counts, as the longest)."""
    ok = median_run.get("median_of")
    return f"{ok} of {len(runs)}" if runs and ok != len(runs) else str(ok)


def _stamp(data: dict[str, Any]) -> str:
    """The date and commit a file names: its own, or for a file joining runs that each name
    theirs (``merged_from``), the span of their dates and every commit in order."""
    runs = [run for run in data.get("merged_from") or [] if isinstance(run, dict)]
    dates = sorted({str(run["date"])[:10] for run in runs if run.get("date")})
    commits = list(dict.fromkeys(str(run["commit"])[:12] for run in runs if run.get("commit")))
    if len(dates) <= 1 and len(commits) <= 1:
        return f"date: {data['date']}; commit: `{data['commit'][:12]}`"
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    named = ", ".join(f"`{commit}`" for commit in commits)
    return f"dates: {span}; commits: {named} ({len(runs)} runs joined, each in `merged_from`)"


def _helion(data: dict[str, Any]) -> Iterator[Row]:
    measures = (("autotune wall (s)", "autotune_s"), ("chosen config runtime (ms)", "runtime_ms"))
    # the kiln arms the run has: kiln's defaults, then its loop with Helion's own final
    # verification, with kiln's final round, and with its screening too
    named = (
        ("kiln", ""),
        ("kiln-verify", ", Helion's final verification"),
        ("kiln-race", ", kiln's final round"),
        ("kiln-screen", ", kiln's final round and screening"),
    )
    baselines = (("fork", "Helion fork precompile"), ("spawn", "Helion spawn precompile"))
    for row in data["compare"]:
        runs = row.get("runs") or {}
        arms = [(arm, name) for arm, name in named if row.get(arm)]
        for base, base_name in baselines:
            helion = row.get(base)
            if not helion:
                continue
            for arm, name in arms:
                kiln = row.get(arm) or {}
                # with several runs per arm, each arm's median-wall run is compared, and its
                # pick's runtime beside the median of the picks' runtimes over the runs
                of = {
                    "autotune_s": f", median of runs: kiln {_ok_runs(kiln, runs.get(arm))}, "
                    f"Helion {_ok_runs(helion, runs.get(base))}",
                    "runtime_ms": ", in the median-wall run",
                }
                for measure, key in measures:
                    yield Row(
                        row["kernel"],
                        f"{measure}{name}{of[key] if runs else ''}",
                        _num(kiln.get(key)),
                        base_name,
                        _num(helion.get(key)),
                    )
                if runs.get(arm) and runs.get(base):
                    yield Row(
                        row["kernel"],
                        f"chosen config runtime (ms){name}, median over the runs",
                        _num(kiln.get("runtime_ms_median")),
                        base_name,
                        _num(helion.get("runtime_ms_median")),
                    )


def _inductor(data: dict[str, Any]) -> Iterator[Row]:
    measures = (
        ("first", "cold first call (s)"),
        ("warm", "warm first call (s)"),
        ("runtime", "runtime (ms)"),
    )
    for row in data["rows"]:
        case = f"{row['model']}, {row['mode']}"
        for key, measure in measures:
            unit = "ms" if key == "runtime" else "s"
            yield Row(
                case,
                measure,
                _num(row.get(f"kiln_{key}_{unit}")),
                "stock Inductor",
                _num(row.get(f"stock_{key}_{unit}")),
            )


def _choice_probe(data: dict[str, Any]) -> Iterator[Row]:
    for pair, compare in data["compare"].items():
        summary = compare.get("summary", {})
        yield Row(
            pair,
            "first call (s)",
            _num(summary.get("kiln_first_s")),
            "stock Inductor",
            _num(summary.get("stock_first_s")),
        )


def _run_of(row: dict[str, Any]) -> str:
    """The run a row of a joined file comes from (its ``from_run``: date and commit), or ``""``."""
    source = row.get("from_run") or {}
    return f"{source.get('date', '')} {str(source.get('commit', ''))[:8]}".strip()


def _faults(data: dict[str, Any]) -> Iterator[Row]:
    by_case: dict[str, dict[str, Any]] = {}
    for row in data["rows"]:
        by_case.setdefault(row["case"], {})[row["arm"]] = row
    for case, arms in by_case.items():
        stock = arms.get("stock", {})
        for arm, row in arms.items():
            if arm != "stock":
                yield Row(
                    case,
                    f"{arm}: model compiled and right (1 = yes)",
                    float(bool(row["compiled"] and row["output_right"])),
                    "stock Inductor",
                    float(bool(stock.get("compiled") and stock.get("output_right"))),
                    _run_of(row),
                )


def _gil(data: dict[str, Any]) -> Iterator[Row]:
    medians = data["medians"]
    yield Row(
        "main thread, kiln's threads beside it",
        "work units per s",
        _num(medians["beside_units_per_s"]),
        "main thread alone",
        _num(medians["alone_units_per_s"]),
    )


def _warm(data: dict[str, Any]) -> Iterator[Row]:
    stock, kiln = data["arms"]["stock"], data["arms"]["kiln"]
    found = re.search(r"--model (\S+) --mode (\S+)", data["command"])
    case = f"{found[1]}, {found[2]}" if found else "model"
    for key, measure in (("cold_first_s", "cold first call (s)"), ("warm_first_s", "warm first call (s)")):
        yield Row(case, measure, _num(kiln.get(key)), "stock Inductor", _num(stock.get(key)))


def _launch(data: dict[str, Any]) -> Iterator[Row]:
    calls = data["calls"]["us_per_call_median"]
    for arm in ("kiln_tuned", "kiln_bundle", "kiln_launcher"):
        if arm in calls:
            for base in ("triton_jit", "torch_op"):
                yield Row(arm, "host us per call", _num(calls[arm]), base, _num(calls.get(base)))
    for name, row in data.get("conventions", {}).get("rows", {}).items():
        yield Row(
            f"convention: {name}",
            "host us per call",
            _num(row["kiln_us"]),
            "triton.autotune",
            _num(row["triton_us"]),
        )


def _output_check(data: dict[str, Any]) -> Iterator[Row]:
    for key in ("decode_ms", "nonfinite_ms", "compare_close_ms", "fingerprint_ms"):
        yield Row(
            f"{data['mb']} MB {data['dtype']}",
            key.removesuffix("_ms") + " (ms)",
            _num(data[key]),
            "read of the output (ms)",
            _num(data["read_fresh_ms"]),
        )


def _ranks(data: dict[str, Any]) -> Iterator[Row]:
    lone = {row["arm"]: row for row in data["rows"] if row["processes"] == 1}
    for row in data["rows"]:
        case = f"{row['arm']}, {row['processes']} processes on {row['gpus']} GPU(s)"
        yield Row(
            case,
            "slowest first tuned call (s)",
            _num(row["first_s_max"]),
            f"{row['arm']}, 1 process",
            _num(lone.get(row["arm"], {}).get("lone_first_s", row["lone_first_s"])),
        )


def _realworld(data: dict[str, Any]) -> Iterator[Row]:
    for op in data["ops"]:
        run = _run_of(op)
        name = op["op"]
        yield Row(
            name,
            "first call, tuning included (s)",
            _num(op.get("kiln_first_s")),
            "triton.autotune",
            _num(op.get("triton_first_s")),
            run,
        )
        parallel = _num(op.get("triton_parallel_first_s"))
        if parallel is not None:  # runs before the arm existed have no such row
            yield Row(
                name, "first call, tuning included (s)", _num(op.get("kiln_first_s")), PARALLEL, parallel, run
            )
        yield Row(
            name,
            "op runtime (ms)",
            _num(op.get("kiln_op_ms")),
            "triton.autotune",
            _num(op.get("triton_op_ms")),
            run,
        )


def _sandbox(data: dict[str, Any]) -> Iterator[Row]:
    boxes = data["sandboxes"]
    yield Row(
        "first result",
        "seconds",
        _num(boxes["native"]["first_result_s"]),
        "torch sandbox",
        _num(boxes["torch"]["first_result_s"]),
    )


_FOOTPRINT_MEASURES = (  # (measure, kiln's field, stock Triton's field) of each scenario's row
    ("kiln's GPU memory (MiB)", "kiln_gpu_mib", "triton_gpu_mib"),
    ("kiln's processes", "kiln_processes", "triton_processes"),
    ("first call (s)", "first_call_s", "triton_first_call_s"),
    ("op (ms)", "op_ms", "triton_op_ms"),
)


def _footprint(data: dict[str, Any]) -> Iterator[Row]:
    for row in data["rows"]:
        for measure, kiln, triton in _FOOTPRINT_MEASURES:
            yield Row(row["scenario"], measure, _num(row[kiln]), "stock Triton", _num(row[triton]))


def _import_cost(data: dict[str, Any]) -> Iterator[Row]:
    kiln, triton = data["arms"]["kiln"], data["arms"]["triton"]
    case = "import " + ", ".join(kiln["modules"])
    yield Row(
        case, "wall, install() included (s)", _num(kiln["import_s"]), "stock Triton", _num(triton["import_s"])
    )
    yield Row(
        case, "processes started", float(len(kiln["started"])), "stock Triton", float(len(triton["started"]))
    )


def _startup_hook(data: dict[str, Any]) -> Iterator[Row]:
    for arm, figures in data["arms"].items():
        yield Row(
            f"python -c pass, {arm}",
            "interpreter start (ms)",
            _num(figures["hook_median_ms"]),
            "no startup hook",
            _num(figures["plain_median_ms"]),
        )


EXTRACTORS: dict[str, Extractor] = {
    "autotune": _autotune,
    "compile_batch": _compile_batch,
    "corpus": _corpus,
    "farm": _farm,
    "footprint": _footprint,
    "helion_autotune": _helion,
    "import_cost": _import_cost,
    "inductor": _inductor,
    "inductor_choice_probe": _choice_probe,
    "inductor_faults": _faults,
    "inductor_gil": _gil,
    "inductor_warm": _warm,
    "launch": _launch,
    "output_check_cost": _output_check,
    "ranks": _ranks,
    "realworld": _realworld,
    "sandbox_start": _sandbox,
    "startup_hook": _startup_hook,
}


def summary_of(script: Path) -> str:
    """The first paragraph of a benchmark script's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    text = " ".join(doc.split("\n\n", 1)[0].split())
    return re.sub(r"\s*\(issue \d+[^)]*\)", "", text)


def split_name(path: Path) -> tuple[str, str]:
    """``inductor_warm-h100.json`` -> ``("inductor_warm", "h100")``."""
    benchmark, _, device = path.stem.rpartition("-")
    if not benchmark or benchmark not in EXTRACTORS:
        raise SystemExit(
            f"{path.name}: not <benchmark>-<device>.json for a known benchmark; "
            f"add an extractor to bench/make_benchmarks_page.py"
        )
    return benchmark, device


def _fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _ratio(row: Row) -> str:
    if row.kiln is None or row.baseline is None or row.baseline == 0:
        return "-"
    return f"{row.kiln / row.baseline:.2f}"


HEADER = """# Benchmarks

Generated by `python bench/make_benchmarks_page.py` from the files under `bench/results/` (one file
per benchmark and device: see [bench/README.md]({blob}/bench/README.md)); do not edit by hand.

Each table compares kiln's arm with one baseline per row. **ratio = kiln / baseline**: for times,
below 1 means kiln is faster; for counts and rates the row says what the two numbers are. Each
table names the device, date, commit and command of the run it comes from; where a file joins
several runs, each row names its own run (date and commit). A `-` is a figure the run did not
measure; earlier runs are in the git history of `bench/results/`.
"""


def _last_meta(data: dict[str, Any]) -> dict[str, Any]:
    """A file's ``meta``; where it joins several runs (a list), the last run's."""
    meta = data.get("meta") or {}
    meta = meta[-1] if isinstance(meta, list) and meta else meta
    return meta if isinstance(meta, dict) else {}


def _conditions(data: dict[str, Any]) -> list[str]:
    """What the reader must know of how a file's runs were made: whether their processes had
    Python bytecode (``machine_state.bytecode``, in the file or its meta's host; without it each
    new process compiles torch from source), and the file's own ``caveats``."""
    record = data.get("bytecode") or (_last_meta(data).get("host") or {}).get("bytecode")
    lines = []
    if isinstance(record, dict):
        if record.get("torch_cached"):
            lines.append(
                f"Python bytecode: kept, as a pip installation has it (`{record.get('cache_prefix')}`)"
            )
        else:
            lines.append("Python bytecode: none; each new process compiled torch from source at its start")
    lines.extend(f"note: {caveat}" for caveat in data.get("caveats") or [])
    return lines


def render() -> str:
    parts = [HEADER.format(blob=BLOB)]
    for path in sorted(RESULTS.glob("*.json")):
        benchmark, device = split_name(path)
        data = json.loads(path.read_text())
        rows = list(EXTRACTORS[benchmark](data))
        merged = any(row.run for row in rows)
        parts.append(f"\n## {benchmark} on {data['device']}\n")
        parts.append(f"{summary_of(ROOT / 'bench' / f'{benchmark}.py')}\n")
        parts.append(f"- file: [`bench/results/{path.name}`]({BLOB}/bench/results/{path.name})")
        parts.append(f"- device: {data['device']} (`{device}`); {_stamp(data)}")
        parts.append(f"- command: `{data['command']}`")
        parts.extend(f"- {line}" for line in _conditions(data))
        parts.append("")
        head = "| case | measure | kiln | baseline | baseline value | ratio |"
        rule = "|---|---|---:|---|---:|---:|"
        if merged:
            head, rule = head + " run |", rule + "---|"
        parts.append(head)
        parts.append(rule)
        for row in rows:
            line = (
                f"| {row.case} | {row.measure} | {_fmt(row.kiln)} | {row.baseline_name} | "
                f"{_fmt(row.baseline)} | {_ratio(row)} |"
            )
            parts.append(line + (f" {row.run} |" if merged else ""))
    return "\n".join(parts) + "\n"


def add(output: Path, device: str) -> Path:
    """File ``output`` as ``bench/results/<benchmark>-<device>.json``, with its four fields."""
    data = json.loads(output.read_text())
    meta = _last_meta(data)
    command = data.get("command") or meta.get("command")
    found = re.search(r"bench/(\w+)\.py", command or "")
    if found is None or found[1] not in EXTRACTORS:
        raise SystemExit(f"{output}: its command ({command!r}) names no benchmark script of bench/")
    commit = machine_state.commit()
    when = str(data.get("date") or meta.get("date_utc") or datetime.now(timezone.utc).date())[:10]
    stamped = {
        "device": data.get("device") or meta.get("device") or device,
        "date": when,
        "commit": data.get("commit") or commit,
        "command": command,
    }
    stamped.update({key: value for key, value in data.items() if key not in stamped})
    target = RESULTS / f"{found[1]}-{device}.json"
    target.write_text(json.dumps(stamped, indent=1) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page differs")
    parser.add_argument(
        "--add", nargs=2, metavar=("OUTPUT", "DEVICE"), help="file a benchmark's output, then write the page"
    )
    args = parser.parse_args(argv)
    if args.add:
        print(add(Path(args.add[0]), args.add[1]).relative_to(ROOT))
    page = render()
    if args.check:
        if PAGE.read_text() != page:
            print(
                f"{PAGE.relative_to(ROOT)} is not what bench/make_benchmarks_page.py writes; run it",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rows, comparisons, medians and tables of ``bench/inductor.py`` (the parent's side; torch is
imported only to compare saved outputs).

A run record (``inductor.py``'s ``run_once``) is ``{"run": i, "order": [...], "stock": {"cold":
result, "warm": result}, "kiln": {...}, "compare": {...}}`` where each result is what one child
wrote (``inductor_child.py``) plus its exit code and directory. :func:`summarize` turns a row's run
records into the row; :func:`merge` joins the run records of several JSON files (same model and
mode; records with the same run index and different arms become one run, compared again where
their output files still exist).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from inductor_models import compact_coordinate_descent

ARMS = ("stock", "kiln")
ROW_KEYS = (
    "model",
    "mode",
    "stock_first_s",
    "kiln_first_s",
    "stock_warm_s",
    "kiln_warm_s",
    "stock_runtime_ms",
    "kiln_runtime_ms",
    "outputs_match",
)
SAME_TOL = 1e-3  # the tolerance Inductor's benchmark harness passes to same() for inference


def _load(path: Path) -> Any:
    import torch

    data = torch.load(path)
    return data["out"] if path.name == "outputs.pt" else data["fp64"]


def compare_outputs(ref_file: Path, got_file: Path, fp64_file: Path | None) -> dict[str, Any]:
    """``got`` against ``ref`` by ``torch._dynamo.utils.same`` (allclose at ``SAME_TOL``, else the
    float64 eager output's RMSE rule: ``got``'s error at most 3x ``ref``'s for 16-bit outputs)."""
    if not ref_file.exists() or not got_file.exists():
        return {"match": None, "detail": "an output file is missing"}
    import torch
    from torch._dynamo.utils import same

    ref, got = _load(ref_file), _load(got_file)
    fp64 = _load(fp64_file) if fp64_file is not None and fp64_file.exists() else None
    notes: list[str] = []

    def log_error(msg: str, *args: Any) -> None:
        notes.append(msg % args if args else msg)

    if fp64 is not None:
        ok = bool(same(ref, got, fp64_ref=fp64, tol=SAME_TOL, log_error=log_error))
    else:  # same() needs the float64 output past its allclose; without it, allclose alone
        ok = ref.shape == got.shape and bool(torch.allclose(ref, got, atol=SAME_TOL, rtol=SAME_TOL))
    detail: dict[str, Any] = {"match": ok, "tol": SAME_TOL, "fp64_reference": fp64 is not None}
    if ref.shape == got.shape:
        a, b = ref.float(), got.float()
        detail["bitwise_equal"] = bool(torch.equal(ref, got))
        detail["max_abs_diff"] = float((a - b).abs().max()) if a.numel() else 0.0
        detail["max_abs_ref"] = float(a.abs().max()) if a.numel() else 0.0
        if fp64 is not None:
            detail["rmse_vs_fp64"] = {
                "ref": float(torch.sqrt(torch.mean(torch.square(fp64 - ref.double())))),
                "got": float(torch.sqrt(torch.mean(torch.square(fp64 - got.double())))),
            }
    else:
        detail["shapes"] = [list(ref.shape), list(got.shape)]
    if notes:
        detail["same_log"] = notes[-5:]
    return detail


def _file(record: dict[str, Any], arm: str, phase: str, name: str) -> Path | None:
    result = record.get(arm, {}).get(phase)
    if not result or "dir" not in result:
        return None
    return Path(result["dir"]) / name


def compare_run(record: dict[str, Any]) -> dict[str, Any]:
    """kiln's cold output against stock's, and each arm's warm output against its cold one."""
    compare: dict[str, Any] = {}
    fp64 = _file(record, "stock", "cold", "reference.pt")
    stock, kiln = _file(record, "stock", "cold", "outputs.pt"), _file(record, "kiln", "cold", "outputs.pt")
    if stock is not None and kiln is not None:
        compare["kiln_vs_stock"] = compare_outputs(stock, kiln, fp64)
    for arm in ARMS:
        cold, warm = _file(record, arm, "cold", "outputs.pt"), _file(record, arm, "warm", "outputs.pt")
        if cold is not None and warm is not None:
            compare[f"{arm}_warm_vs_cold"] = compare_outputs(cold, warm, fp64)
    return compare


def _median(values: list[Any]) -> float | None:
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(nums) if nums else None


def _field(runs: list[dict[str, Any]], arm: str, phase: str, name: str) -> list[Any]:
    return [run.get(arm, {}).get(phase, {}).get(name) for run in runs if arm in run]


def median_split(splits: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs of every phase's count and seconds, of time_spent and of the counters."""
    splits = [s for s in splits if s]
    if not splits:
        return {}
    out: dict[str, Any] = {"runs": len(splits)}
    keys = sorted({k for s in splits for k in s.get("phases", {})})
    out["phases"] = {
        k: {
            field: _median([s.get("phases", {}).get(k, {}).get(field, 0.0) for s in splits])
            for field in ("count", "total_s", "max_s")
        }
        for k in keys
    }
    for part in ("time_spent", "inductor_metrics"):
        names = sorted({k for s in splits for k in s.get(part, {})})
        out[part] = {k: _median([s.get(part, {}).get(k, 0) for s in splits]) for k in names}
    groups = sorted({g for s in splits for g in s.get("counters", {})})
    out["counters"] = {
        g: {
            k: _median([s.get("counters", {}).get(g, {}).get(k, 0) for s in splits])
            for k in sorted({k for s in splits for k in s.get("counters", {}).get(g, {})})
        }
        for g in groups
    }
    for name in ("first_call_s", "outside_frame_compile_s"):
        out[name] = _median([s.get(name) for s in splits])
    return out


def summarize(model: str, mode: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    per_run: dict[str, list[Any]] = {}
    for arm in ARMS:
        per_run[f"{arm}_first_s"] = _field(runs, arm, "cold", "first_s")
        # the cold process's limit: its compile work over the cores plus its choices' timings
        per_run[f"{arm}_limit_s"] = _field(runs, arm, "cold", "limit_s")
        per_run[f"{arm}_warm_s"] = _field(runs, arm, "warm", "first_s")
        # the paired runtime where the run has one (both arms' blocks on one core, in turn), else
        # the cold process's blocks (every run before the paired runtime was built)
        cold_runtime = _field(runs, arm, "cold", "runtime_ms")
        per_run[f"{arm}_runtime_ms"] = [
            run["paired"][f"{arm}_ms"]
            if run.get("paired", {}).get(f"{arm}_ms") is not None
            else cold_runtime[i]
            for i, run in enumerate(r for r in runs if arm in r)
        ]
    per_run["outputs_match"] = [run.get("compare", {}).get("kiln_vs_stock", {}).get("match") for run in runs]
    matches = per_run["outputs_match"]
    row: dict[str, Any] = {"model": model, "mode": mode}
    for key in ROW_KEYS[2:-1]:
        row[key] = _median(per_run[key])
    row["outputs_match"] = None if not matches or None in matches else all(matches)
    for arm in ARMS:
        limits = [v for v in per_run[f"{arm}_limit_s"] if isinstance(v, float)]
        row[f"{arm}_limit_s"] = _median(limits) if limits else None
        first, limit = row.get(f"{arm}_first_s"), row[f"{arm}_limit_s"]
        row[f"{arm}_first_over_limit"] = first / limit if isinstance(first, float) and limit else None
    row.update({f"{key}_runs": values for key, values in per_run.items()})
    for arm in ARMS:
        row[f"{arm}_warm_matches_cold_runs"] = [
            run.get("compare", {}).get(f"{arm}_warm_vs_cold", {}).get("match") for run in runs if arm in run
        ]
    paired = [run.get("paired", {}) for run in runs]
    row["runtime_source_runs"] = [
        "paired" if p.get("stock_ms") is not None and p.get("kiln_ms") is not None else "cold" for p in paired
    ]
    row["runtime_paired_ratio_runs"] = [p.get("kiln_over_stock") for p in paired]
    paired_ratios = [r for r in row["runtime_paired_ratio_runs"] if r is not None]
    # kiln's block over stock's block of the same round, median over every round of every run
    all_rounds = [r for p in paired for r in p.get("kiln_over_stock_per_round", [])]
    row["runtime_paired_ratio"] = _median(all_rounds) if all_rounds else None
    row["runtime_paired_rounds"] = len(all_rounds)
    row["runtime_paired_ratio_range"] = [min(paired_ratios), max(paired_ratios)] if paired_ratios else None
    # the other runtime measures: the cold process's blocks (the headline before the paired
    # runtime), each call synchronized (the measure before CUDA-event blocks), and the warm
    # process's blocks (the same binaries, a second sample of the host's noise)
    for arm in ARMS:
        for name, phase, field in (
            ("runtime_cold_ms", "cold", "runtime_ms"),
            ("runtime_wall_ms", "cold", "runtime_wall_ms"),
            ("warm_runtime_ms", "warm", "runtime_ms"),
        ):
            values = _field(runs, arm, phase, field)
            row[f"{arm}_{name}"] = _median(values)
            row[f"{arm}_{name}_runs"] = values
    # where a call's time goes (inductor_models.launch_diagnostics; older runs lack it): the
    # GPU kernels' own time per call (host noise excluded) and the host's time to issue one call
    for arm in ARMS:
        for name, field in (
            ("gpu_kernel_ms", "gpu_kernel_ms_per_call"),
            ("host_ms", "host_ms_per_call"),
            ("kiln_code_ms", "kiln_code_ms_per_call"),  # older runs lack it
        ):
            values = [
                run.get(arm, {}).get("cold", {}).get("launch", {}).get(field)
                for run in runs
                if run.get(arm, {}).get("cold", {}).get("launch", {}).get(field) is not None
            ]
            row[f"{arm}_{name}"] = _median(values) if values else None
            row[f"{arm}_{name}_runs"] = values
    row["stock_split"] = median_split([run.get("stock", {}).get("cold", {}).get("split", {}) for run in runs])
    row["kiln_split"] = median_split([run.get("kiln", {}).get("cold", {}).get("split", {}) for run in runs])
    ratios = {}
    for name in (
        "first_s",
        "warm_s",
        "runtime_ms",
        "runtime_cold_ms",
        "runtime_wall_ms",
        "warm_runtime_ms",
        "gpu_kernel_ms",
        "host_ms",
    ):
        stock, kiln = row[f"stock_{name}"], row[f"kiln_{name}"]
        ratios[f"kiln/stock {name}"] = kiln / stock if stock and kiln is not None else None
    row["ratios"] = ratios
    row["errors"] = {
        f"run{run['run']} {arm} {phase}": result["error"]
        for run in runs
        for arm in ARMS
        for phase, result in run.get(arm, {}).items()
        if "error" in result
    }
    row["runs"] = runs
    return row


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    metas = [m for p in parts for m in (p["meta"] if isinstance(p["meta"], list) else [p["meta"]])]
    grouped: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    extra_runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for part in parts:
        for row in part["rows"]:
            by_index = grouped.setdefault((row["model"], row["mode"]), {})
            for run in row["runs"]:
                for arm in ARMS:  # files written before the child folded them
                    for phase in run.get(arm, {}).values():
                        if isinstance(phase, dict) and "coordinate_descent" in phase:
                            records = phase["coordinate_descent"]
                            phase["coordinate_descent"] = compact_coordinate_descent(records)
                held = by_index.get(run["run"])
                if held is None:
                    by_index[run["run"]] = dict(run)
                elif any(arm in held for arm in ARMS if arm in run):  # same index, same arm: keep both
                    extra_runs.setdefault((row["model"], row["mode"]), []).append(run)
                else:
                    held.update({arm: run[arm] for arm in ARMS if arm in run})
                    held["order"] = [*held.get("order", []), *run.get("order", [])]
                    held["compare"] = compare_run(held)
    rows = []
    for (model, mode), by_index in grouped.items():
        runs = [by_index[i] for i in sorted(by_index)] + extra_runs.get((model, mode), [])
        rows.append(summarize(model, mode, runs))
    return {"meta": metas, "rows": rows}


def _num(value: Any, fmt: str) -> str:
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return format(value, fmt)
    return "-"


def grid(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *rows]
    )


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "mode", "first s stock", "kiln", "x", "limit s stock", "kiln", "warm s stock", "kiln"]
    head += ["runtime ms stock", "kiln", "x", "paired x", "outputs", "runs", "errors"]
    lines = []
    for r in rows:
        ratios = r.get("ratios", {})
        lines.append(
            [
                r["model"],
                r["mode"],
                _num(r.get("stock_first_s"), ".1f"),
                _num(r.get("kiln_first_s"), ".1f"),
                _num(ratios.get("kiln/stock first_s"), ".2f"),
                _num(r.get("stock_limit_s"), ".1f"),
                _num(r.get("kiln_limit_s"), ".1f"),
                _num(r.get("stock_warm_s"), ".2f"),
                _num(r.get("kiln_warm_s"), ".2f"),
                _num(r.get("stock_runtime_ms"), ".3f"),
                _num(r.get("kiln_runtime_ms"), ".3f"),
                _num(ratios.get("kiln/stock runtime_ms"), ".3f"),
                _num(r.get("runtime_paired_ratio"), ".3f"),
                {True: "match", False: "DIFFER", None: "-"}[r.get("outputs_match")],
                str(len(r.get("runs", []))),
                "; ".join(f"{k}: {v[:60]}" for k, v in r.get("errors", {}).items()) or "-",
            ]
        )
    return grid(head, lines)


FAMILIES = ("_template_autotuning", "_template_precompiling")


def phase_families(phases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Keys that differ by op (``mm_template_autotuning``, ``convolution_template_autotuning``...)
    summed into one ``(all *<suffix>)`` entry each (a sum: where they overlap in time, as
    precompiles in threads may, it exceeds the wall time they took)."""
    out: dict[str, dict[str, Any]] = {}
    for suffix in FAMILIES:
        members = [p for name, p in phases.items() if name.endswith(suffix)]
        if len(members) > 1:
            out[f"(all *{suffix})"] = {
                "count": sum(p.get("count") or 0 for p in members),
                "total_s": sum(p.get("total_s") or 0.0 for p in members),
            }
    return out


def split_table(row: dict[str, Any], arm: str, min_share: float = 0.002) -> str:
    """One arm's split: phases by seconds (share of the first call), then the counters."""
    split = row.get(f"{arm}_split") or {}
    first = split.get("first_call_s")
    title = f"{row['model']} {row['mode']}, {arm}: first call {_num(first, '.1f')} s "
    title += f"(median of {split.get('runs', 0)} runs); phases nest (see inductor_models.py)"
    phases = sorted(
        [*split.get("phases", {}).items(), *phase_families(split.get("phases", {})).items()],
        key=lambda kv: -(kv[1].get("total_s") or 0.0),
    )
    lines = []
    for name, p in phases:
        share = (p.get("total_s") or 0.0) / first if first else None
        if share is not None and share < min_share:
            continue
        lines.append([name, _num(p.get("count"), ".0f"), _num(p.get("total_s"), ".2f"), _num(share, ".1%")])
    lines.append(
        [
            "(first call outside entire_frame_compile)",
            "",
            _num(split.get("outside_frame_compile_s"), ".2f"),
            "",
        ]
    )
    counters = [
        [f"{group}.{name}", _num(value, ".0f"), "", ""]
        for group, values in split.get("counters", {}).items()
        for name, value in values.items()
        if group in ("inductor", "aot_autograd", "frames", "stats")
    ]
    return f"\n{title}\n" + grid(["phase / counter", "count", "seconds", "share"], lines + counters)

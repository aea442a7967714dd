"""Why max-autotune picks differ between stock Inductor and kiln (issue 20): every template
autotune's choices and timings, in both arms, from fresh caches, side by side.

On ResNet-50 max-autotune (2026-11-25, H100) kiln's compiled model made 13 extern (ATen) calls
where stock's made 1; its GPU kernels were 2-7% faster and its wall time 16-20% slower (the
paired runtime), because an ATen convolution costs the host more than a Triton launch. This
script records, in one cold process per arm on a part of the model (``--layers``: the stem and
the first N of ResNet-50's four stages), for every ``InductorBenchmarker.benchmark_gpu`` call:

* what was timed (the choice's kernel name and its launchers' class for a Triton template, or
  the extern call), the time Inductor got (ms), the host's time to issue 10 calls of it with no
  synchronization (us per call), and the CPU the process's children (compile pools) spent during
  the benchmark, per second of it (how many cores were busy compiling while it timed);
* every autotune's table (``AlgorithmSelectorCache.log_results``: op, sizes, each choice's time
  and description) and its pick.

Then per op: each arm's pick, and for choices present in both (matched by description), kiln's
time over stock's, split into Triton templates and extern calls.

Run on a GPU machine from the repository root::

    python bench/inductor_choice_probe.py --layers 1 --out probe.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inductor_models

HERE = Path(__file__).resolve().parent


def _model(layers: int, batch: int) -> tuple[Any, Any]:
    import torch
    import torchvision
    from torch import nn

    torch.manual_seed(0)
    full = torchvision.models.resnet50(weights=None)
    stages = [full.layer1, full.layer2, full.layer3, full.layer4][:layers]
    model = nn.Sequential(full.conv1, full.bn1, full.relu, full.maxpool, *stages)
    model = model.eval().to(device="cuda", dtype=torch.bfloat16)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(batch, 3, 224, 224, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    return model, x


def _what(fn: Any) -> dict[str, Any]:
    """What a benchmarked callable runs: a Triton template's kernel (and its launchers' class),
    or something else (an extern call)."""
    target = getattr(fn, "func", None)
    owner = getattr(target, "__self__", None)
    launchers = getattr(owner, "launchers", None)
    if owner is not None and launchers is not None:
        return {
            "kind": "triton",
            "kernel": getattr(getattr(owner, "fn", None), "__name__", None),
            "launchers": sorted({type(launcher).__name__ for launcher in launchers}),
        }
    return {"kind": "other", "repr": repr(fn)[:120]}


def child(args: argparse.Namespace) -> int:
    import torch
    from torch._inductor import select_algorithm
    from torch._inductor.runtime import benchmarking

    if args.arm == "kiln":
        import triton_kiln.inductor

        triton_kiln.inductor.install()
    benches: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    original = benchmarking.InductorBenchmarker.benchmark_gpu

    def benchmark_gpu(self: Any, _callable: Any, *a: Any, **k: Any) -> Any:
        cpu_before, started = inductor_models.children_cpu_s(), time.perf_counter()
        result = original(self, _callable, *a, **k)
        took = time.perf_counter() - started
        busy = (inductor_models.children_cpu_s() - cpu_before) / took if took > 0 else None
        issued = time.perf_counter()
        for _ in range(10):
            _callable()
        host_us = (time.perf_counter() - issued) * 1e5  # per call, of 10
        torch.cuda.synchronize()
        record = {"ms": result if isinstance(result, float) else None, "host_us": host_us, "busy_cores": busy}
        record.update(_what(_callable))
        benches.append(record)
        return result

    benchmarking.InductorBenchmarker.benchmark_gpu = benchmark_gpu  # type: ignore[method-assign]
    log_results = select_algorithm.AlgorithmSelectorCache.log_results

    def record_results(name: str, input_nodes: Any, timings: Any, *a: Any, **k: Any) -> Any:
        rows = []
        for choice, ms in timings.items():
            rows.append(
                {
                    "name": getattr(choice, "name", repr(choice)),
                    "description": getattr(choice, "description", ""),
                    "extern": type(choice).__name__ == "ExternKernelCaller",
                    "ms": ms if math.isfinite(ms) else None,
                }
            )
        sizes = []
        for node in input_nodes:
            try:
                sizes.append("x".join(str(s) for s in node.get_size()))
            except Exception:  # a size that is not plain: recorded as unknown
                sizes.append("?")
        timed = [r for r in rows if r["ms"] is not None]
        best = min(timed, key=lambda r: r["ms"]) if timed else None
        tables.append({"op": name, "sizes": ", ".join(sizes), "choices": rows, "pick": best})
        return log_results(name, input_nodes, timings, *a, **k)

    select_algorithm.AlgorithmSelectorCache.log_results = staticmethod(record_results)  # type: ignore[method-assign]
    model, x = _model(args.layers, args.batch)
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    started = time.perf_counter()
    compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        compiled(x)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    from torch._dynamo.utils import counters

    holds = None
    if args.arm == "kiln":
        from triton_kiln.pool.pause import PAUSE

        holds = {"holds": PAUSE.holds, "interrupted": PAUSE.interrupted}
    out = {
        "arm": args.arm,
        "kiln_holds": holds,
        "first_s": first_s,
        "extern_calls": counters["inductor"].get("extern_calls"),
        "benches": benches,
        "tables": tables,
    }
    Path(args.json).write_text(json.dumps(out, default=repr))
    return 0


def _compare(stock: dict[str, Any], kiln: dict[str, Any]) -> dict[str, Any]:
    def key(table: dict[str, Any]) -> str:
        return f"{table['op']}({table['sizes']})"

    kiln_tables = {}
    for table in kiln["tables"]:
        kiln_tables.setdefault(key(table), []).append(table)
    ops = []
    ratios: dict[str, list[float]] = {"triton": [], "extern": []}
    for table in stock["tables"]:
        others = kiln_tables.get(key(table))
        if not others:
            continue
        other = others.pop(0)
        by_description = {(c["extern"], c["description"]): c for c in other["choices"]}
        for choice in table["choices"]:
            mate = by_description.get((choice["extern"], choice["description"]))
            if mate and choice["ms"] and mate["ms"]:
                ratios["extern" if choice["extern"] else "triton"].append(mate["ms"] / choice["ms"])
        pick_s, pick_k = table["pick"], other["pick"]
        ops.append(
            {
                "op": key(table),
                "stock_pick": None
                if pick_s is None
                else [pick_s["extern"], pick_s["description"][:80], pick_s["ms"]],
                "kiln_pick": None
                if pick_k is None
                else [pick_k["extern"], pick_k["description"][:80], pick_k["ms"]],
            }
        )
    summary: dict[str, Any] = {"ops": len(ops)}
    summary["picks_differ"] = sum(
        1
        for op in ops
        if op["stock_pick"] and op["kiln_pick"] and op["stock_pick"][:2] != op["kiln_pick"][:2]
    )
    for arm, data in (("stock", stock), ("kiln", kiln)):
        picks = [t["pick"] for t in data["tables"] if t["pick"]]
        summary[f"{arm}_extern_picks"] = sum(1 for p in picks if p["extern"])
        summary[f"{arm}_extern_calls"] = data.get("extern_calls")
        summary[f"{arm}_first_s"] = data.get("first_s")
        summary[f"{arm}_kiln_holds"] = data.get("kiln_holds")
        for kind in ("triton", "other"):
            rows = [b for b in data["benches"] if b["kind"] == kind]
            summary[f"{arm}_{kind}_benches"] = len(rows)
            if rows:
                summary[f"{arm}_{kind}_host_us_median"] = statistics.median(b["host_us"] for b in rows)
                busy = [b["busy_cores"] for b in rows if b["busy_cores"] is not None]
                summary[f"{arm}_{kind}_busy_cores_median"] = statistics.median(busy) if busy else None
        summary[f"{arm}_launchers"] = sorted(
            {name for b in data["benches"] for name in b.get("launchers", [])}
        )
    for kind, values in ratios.items():
        summary[f"kiln_over_stock_{kind}_median"] = statistics.median(values) if values else None
        summary[f"kiln_over_stock_{kind}_n"] = len(values)
    return {"summary": summary, "ops": ops}


def parent(args: argparse.Namespace) -> int:
    import inductor

    root = Path(tempfile.mkdtemp(prefix="kiln-choice-probe-"))
    results: dict[str, Any] = {}
    try:
        for arm in args.arms.split(","):
            caches = root / arm / "caches"
            caches.mkdir(parents=True)
            target = root / arm / "result.json"
            cmd = [sys.executable, __file__, "--child", "--arm", arm, "--json", str(target)]
            cmd += ["--layers", str(args.layers), "--batch", str(args.batch)]
            print(f"[probe] {arm}", file=sys.stderr, flush=True)
            with (root / arm / "stderr.log").open("w") as err:
                code = subprocess.run(
                    cmd, env=inductor.arm_env(caches), stdout=err, stderr=subprocess.STDOUT, check=False
                ).returncode
            if code != 0 or not target.exists():
                tail = (root / arm / "stderr.log").read_text(errors="replace").splitlines()[-20:]
                results[arm] = {"error": f"exit code {code}", "tail": tail}
                continue
            results[arm] = json.loads(target.read_text())
        if "error" not in results.get("stock", {"error": 1}) and "error" not in results.get(
            "kiln", {"error": 1}
        ):
            results["compare"] = _compare(results["stock"], results["kiln"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=repr))
    print(json.dumps(results.get("compare", {}).get("summary", results), indent=1, default=repr))
    for op in results.get("compare", {}).get("ops", []):
        print(op["op"][:70], "| stock:", op["stock_pick"], "| kiln:", op["kiln_pick"])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--arm", default="stock", choices=("stock", "kiln"))
    parser.add_argument("--arms", default="stock,kiln")
    parser.add_argument("--json", default=None)
    parser.add_argument("--layers", type=int, default=1, help="ResNet-50 stages after the stem (0-4)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("KILN_PROGRESS", "0")
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())

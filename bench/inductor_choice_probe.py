"""Why max-autotune picks differ between stock Inductor and kiln: every template
autotune's choices and timings, in both arms, from fresh caches, side by side.

Where kiln's compiled model makes other extern (ATen) calls than stock's (on ResNet-50
max-autotune, H100, a kiln build made 13 where stock made 1: GPU kernels 2-7% faster, wall time
16-20% slower in the paired runtime, an ATen convolution costing the host more than a Triton
launch), this script shows why. It records, in one cold process per arm on a part of the
model (``--layers``: the stem and the first N of ResNet-50's four stages), for every
``InductorBenchmarker.benchmark_gpu`` call:

* what was timed (the choice's kernel name and its launchers' class for a Triton template, or
  the extern call), the time Inductor got (ms), the host's time to issue 10 calls of it with no
  synchronization (us per call), and the CPU the process's children (compile pools) spent during
  the benchmark, per second of it (how many cores were busy compiling while it timed);
* every autotune's table (``AlgorithmSelectorCache.log_results``: op, sizes, each choice's time
  and description) and its pick.

Then per op: each arm's pick, and for choices present in both (matched by description), kiln's
time over stock's, split into Triton templates and extern calls, and the op's shift (the median
of those ratios within the op).

For the per-op shifts and a compiled model that runs slower, it also records:

* per benchmark: the op it belongs to, the ``ptxas`` processes alive among this process's
  descendants, the GPU's SM clock (MHz, NVML) before and after, and the compile results' classes
  (``StaticTritonCompileResult`` or ``TritonCompileResult``: which launcher is timed);
* the compiled part-model itself: every ``CachingAutotuner`` it holds (kernel, chosen config,
  compile result class, a hash of the cubin it launches), its GPU kernel time per call by
  kernel (``torch.profiler``) and its wall time per call;
* arms repeat (``--arms stock,kiln,stock,kiln``): the second stock run against the first is the
  A/A control, the noise of Inductor's own picks; an arm ``kiln+noquiet`` runs kiln with
  ``KILN_INDUCTOR_QUIET_BENCHMARKS=0``.

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
            "results": sorted({type(r).__name__ for r in getattr(owner, "compile_results", []) or []}),
        }
    return {"kind": "other", "repr": repr(fn)[:120]}


def _ptxas_alive() -> int:
    """``ptxas`` processes among this process's descendants now."""
    import psutil

    count = 0
    for proc in psutil.Process().children(recursive=True):
        try:
            count += proc.name() == "ptxas"
        except psutil.Error:  # gone since the scan
            continue
    return count


def _sm_clock_reader() -> Any:
    """A function returning the GPU's SM clock in MHz (NVML), or ``None`` where NVML is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # no NVML: clocks are not recorded
        return lambda: None


def _file_hash(path: Any) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except (OSError, TypeError):
        return None


def _final_kernels() -> list[dict[str, Any]]:
    """Every ``CachingAutotuner`` alive (the compiled model's kernels): name, chosen config,
    compile result classes and a hash of each result's cubin."""
    rows = []
    for obj in inductor_models.live_autotuners():
        launchers = list(getattr(obj, "launchers", []) or [])
        config = getattr(launchers[0], "config", None) if launchers else None
        results = list(getattr(obj, "compile_results", []) or [])
        cubins = []
        for result in results:
            kernel = getattr(result, "kernel", None)
            path = getattr(kernel, "cubin_path", None) or getattr(kernel, "_cubin_path", None)
            asm = getattr(kernel, "asm", None)
            if path:
                cubins.append(_file_hash(path))
            elif isinstance(asm, dict) and isinstance(asm.get("cubin"), bytes):
                import hashlib

                cubins.append(hashlib.sha256(asm["cubin"]).hexdigest()[:16])
            else:
                cubins.append(None)
        rows.append(
            {
                "kernel": getattr(getattr(obj, "fn", None), "__name__", None),
                "launchers": len(launchers),
                "config": None
                if config is None
                else {
                    "kwargs": dict(config.kwargs),
                    "num_warps": config.num_warps,
                    "num_stages": config.num_stages,
                },
                "results": [type(result).__name__ for result in results],
                "cubins": cubins,
            }
        )
    return sorted(rows, key=lambda row: str(row["kernel"]))


def _final_profile(fn: Any, calls: int = 20) -> dict[str, Any]:
    """The compiled model's GPU kernel time per call by kernel (``torch.profiler``) and its wall
    time per call (median of 5 blocks of 50 calls, synchronized)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = {}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None)
        if total is None:
            total = getattr(event, "cuda_time_total", 0.0)
        if total:
            per_kernel[event.key] = per_kernel.get(event.key, 0.0) + total / calls
    blocks = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - started) * 1e3 / 50)
    return {
        "gpu_us_per_call": sum(per_kernel.values()),
        "gpu_us_by_kernel": dict(sorted(per_kernel.items(), key=lambda kv: -kv[1])),
        "wall_ms_per_call_blocks": blocks,
        "wall_ms_per_call": statistics.median(blocks),
    }


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
    sm_clock = _sm_clock_reader()

    def benchmark_gpu(self: Any, _callable: Any, *a: Any, **k: Any) -> Any:
        ptxas, clock_before = _ptxas_alive(), sm_clock()
        cpu_before, started = inductor_models.children_cpu_s(), time.perf_counter()
        result = original(self, _callable, *a, **k)
        took = time.perf_counter() - started
        clock_after = sm_clock()
        busy = (inductor_models.children_cpu_s() - cpu_before) / took if took > 0 else None
        issued = time.perf_counter()
        for _ in range(10):
            _callable()
        host_us = (time.perf_counter() - issued) * 1e5  # per call, of 10
        torch.cuda.synchronize()
        record = {
            "ms": result if isinstance(result, float) else None,
            "host_us": host_us,
            "busy_cores": busy,
            "op_index": len(tables),
            "ptxas_alive": ptxas,
            "sm_mhz": [clock_before, clock_after],
        }
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
    try:
        final = {"kernels": _final_kernels(), **_final_profile(lambda: _no_grad_call(compiled, x))}
    except Exception as error:  # the part-model's analysis failed: the timings above still count
        final = {"error": repr(error)}
    out = {
        "arm": args.arm,
        "final": final,
        "kiln_holds": holds,
        "first_s": first_s,
        "extern_calls": counters["inductor"].get("extern_calls"),
        "benches": benches,
        "tables": tables,
    }
    Path(args.json).write_text(json.dumps(out, default=repr))
    return 0


def _no_grad_call(fn: Any, x: Any) -> Any:
    import torch

    with torch.no_grad():
        return fn(x)


def _loaded_by_name(kernels: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The kernels that have a launcher, by name."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in kernels:
        if row.get("launchers"):
            by_name.setdefault(str(row["kernel"]), []).append(row)
    return by_name


def _compare_final(stock: dict[str, Any], kiln: dict[str, Any]) -> dict[str, Any]:
    """The two compiled part-models: GPU and wall time per call, and kernel by kernel whether the
    chosen config, the compile result class and the cubin are the same. Kernels are matched by
    name among those with a launcher (a loaded kernel); a name that several such kernels share in
    either arm (a template's choices keep its generic name) is not matched but counted
    (``ambiguous``): matching those by name paired unrelated kernels."""
    a, b = stock.get("final"), kiln.get("final")
    if not a or not b or "error" in a or "error" in b:
        return {}
    mine_by_name, theirs_by_name = _loaded_by_name(a["kernels"]), _loaded_by_name(b["kernels"])
    same_config = differ_config = same_cubin = differ_cubin = unmatched = ambiguous = 0
    classes: dict[str, int] = {}
    slower = []
    for name, rows in mine_by_name.items():
        others = theirs_by_name.get(name, [])
        if len(rows) > 1 or len(others) > 1:
            ambiguous += 1
            continue
        if not others:
            unmatched += 1
            continue
        mine, other = rows[0], others[0]
        if mine["config"] == other["config"]:
            same_config += 1
            if mine["cubins"] and other["cubins"] and mine["cubins"][0] == other["cubins"][0]:
                same_cubin += 1
            else:
                differ_cubin += 1
        else:
            differ_config += 1
        pair = f"{','.join(mine['results'])} / {','.join(other['results'])}"
        classes[pair] = classes.get(pair, 0) + 1
    for name, us in a["gpu_us_by_kernel"].items():
        other_us = b["gpu_us_by_kernel"].get(name)
        if other_us is not None and us > 0:
            slower.append((name[:60], round(us, 2), round(other_us, 2), round(other_us / us, 3)))
    slower.sort(key=lambda row: -(row[2] - row[1]))
    return {
        "gpu_us_per_call": [a["gpu_us_per_call"], b["gpu_us_per_call"]],
        "gpu_ratio": b["gpu_us_per_call"] / a["gpu_us_per_call"] if a["gpu_us_per_call"] else None,
        "wall_ms_per_call": [a["wall_ms_per_call"], b["wall_ms_per_call"]],
        "wall_ratio": b["wall_ms_per_call"] / a["wall_ms_per_call"],
        "kernels": [len(a["kernels"]), len(b["kernels"])],
        "same_config": same_config,
        "differ_config": differ_config,
        "same_cubin_of_same_config": same_cubin,
        "differ_cubin_of_same_config": differ_cubin,
        "unmatched": unmatched,
        "ambiguous": ambiguous,
        "result_classes": classes,
        "most_slower_kernels": slower[:8],
    }


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
        within: list[float] = []
        for choice in table["choices"]:
            mate = by_description.get((choice["extern"], choice["description"]))
            if mate and choice["ms"] and mate["ms"]:
                ratios["extern" if choice["extern"] else "triton"].append(mate["ms"] / choice["ms"])
                within.append(mate["ms"] / choice["ms"])
        pick_s, pick_k = table["pick"], other["pick"]
        ops.append(
            {
                "op": key(table),
                "shift": round(statistics.median(within), 3) if within else None,
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
    summary["op_shifts"] = [op["shift"] for op in ops]
    for arm, data in (("stock", stock), ("kiln", kiln)):
        rows = [b for b in data["benches"] if b["kind"] == "triton"]
        summary[f"{arm}_ptxas_alive_max"] = max((b.get("ptxas_alive") or 0 for b in rows), default=None)
        summary[f"{arm}_benches_with_ptxas"] = sum(1 for b in rows if b.get("ptxas_alive"))
        clocks = [b["sm_mhz"][0] for b in rows if b.get("sm_mhz") and b["sm_mhz"][0]]
        summary[f"{arm}_sm_mhz_min_median"] = [min(clocks), statistics.median(clocks)] if clocks else None
        summary[f"{arm}_result_classes"] = sorted({c for b in rows for c in b.get("results", [])})
    return {"summary": summary, "ops": ops, "final": _compare_final(stock, kiln)}


def parent(args: argparse.Namespace) -> int:
    import inductor

    root = Path(tempfile.mkdtemp(prefix="kiln-choice-probe-"))
    results: dict[str, Any] = {}
    labels = arm_labels(args.arms.split(","))
    try:
        for label, spec in labels:
            arm, _, variant = spec.partition("+")
            caches = root / label / "caches"
            caches.mkdir(parents=True)
            target = root / label / "result.json"
            cmd = [sys.executable, __file__, "--child", "--arm", arm, "--json", str(target)]
            cmd += ["--layers", str(args.layers), "--batch", str(args.batch)]
            env = inductor.arm_env(caches)
            env.update(VARIANTS[variant])
            print(f"[probe] {label}", file=sys.stderr, flush=True)
            with (root / label / "stderr.log").open("w") as err:
                code = subprocess.run(
                    cmd, env=env, stdout=err, stderr=subprocess.STDOUT, check=False
                ).returncode
            if code != 0 or not target.exists():
                tail = (root / label / "stderr.log").read_text(errors="replace").splitlines()[-20:]
                results[label] = {"error": f"exit code {code}", "tail": tail}
                continue
            results[label] = json.loads(target.read_text())
        results["compare"] = {}
        for first, second in pairs_to_compare([label for label, _ in labels]):
            if "error" in results[first] or "error" in results[second]:
                continue
            results["compare"][f"{second} / {first}"] = _compare(results[first], results[second])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=repr))
    for name, compared in results["compare"].items():
        print(f"== {name}")
        print(json.dumps(compared["summary"], default=repr))
        print(json.dumps(compared["final"], default=repr))
        for op in compared["ops"]:
            print(
                " ",
                op["op"][:60],
                "| shift",
                op["shift"],
                "| first:",
                op["stock_pick"],
                "| second:",
                op["kiln_pick"],
            )
    for label, _ in labels:
        if "error" in results[label]:
            print(f"{label}: {results[label]['error']}", *results[label]["tail"][-5:], sep="\n  ")
    return 0


VARIANTS: dict[str, dict[str, str]] = {"": {}, "noquiet": {"KILN_INDUCTOR_QUIET_BENCHMARKS": "0"}}
"""Arm variants (``kiln+noquiet``): the environment each adds."""


def arm_labels(specs: list[str]) -> list[tuple[str, str]]:
    """``stock,kiln,stock`` -> ``[("stock-1", "stock"), ("kiln-1", "kiln"), ("stock-2", "stock")]``."""
    seen: dict[str, int] = {}
    labels = []
    for spec in specs:
        arm, _, variant = spec.partition("+")
        if arm not in ("stock", "kiln") or variant not in VARIANTS:
            raise SystemExit(
                f"unknown arm {spec!r}: use stock, kiln or kiln+{{{','.join(v for v in VARIANTS if v)}}}"
            )
        seen[spec] = seen.get(spec, 0) + 1
        labels.append((f"{spec}-{seen[spec]}", spec))
    return labels


def pairs_to_compare(labels: list[str]) -> list[tuple[str, str]]:
    """Each arm against the stock run before it (the first stock run for arms before any), and
    each repeat of an arm against its first run (the A/A controls: Inductor's own noise)."""
    stocks = [label for label in labels if label.startswith("stock-")]
    pairs = []
    for index, label in enumerate(labels):
        spec = label.rsplit("-", 1)[0]
        if not label.startswith("stock-") and stocks:
            before = [s for s in stocks if labels.index(s) < index]
            pairs.append((before[-1] if before else stocks[0], label))
        if not label.endswith("-1"):
            pairs.append((f"{spec}-1", label))
    return pairs


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

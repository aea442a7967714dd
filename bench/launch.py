"""Host cost of one kernel launch, and process start to first tuned result through a bundle.

Run from the repository root on a machine with a GPU::

    python bench/launch.py --json /tmp/launch.json

Part 1, host microseconds per call for a tiny kernel (``x[i] += 1`` over 1024 elements), each
arm measured the same way: the stream is first kept busy with ``torch.cuda._sleep`` so the
GPU never holds the host back, then a batch of calls is timed on the host only; batches are
repeated and interleaved across arms, and medians reported. Arms:

* ``triton_jit``: ``kernel[grid](x, n, BLOCK=1024)`` (Triton's JIT dispatch);
* ``triton_compiled``: the ``CompiledKernel`` Triton returned, ``ck[grid](x, n, 1024)``;
* ``kiln_tuned``: a ``kiln.autotune``'d kernel, tuned once, ``tuned[grid](x, n)`` (fast path);
* ``kiln_tuned_bound``: the same with ``kernel[grid]`` bound once, outside the loop
  (``call = tuned[grid]`` then ``call(x, n)``);
* ``kiln_tuned_meta_grid``: the same with a grid function of the meta-parameters;
* ``kiln_bundle``: that tuned kernel saved to a bundle and loaded back in this process
  (``kiln.load_bundle(path, register=False)["inc_kernel"][grid](x, n)``);
* ``kiln_launcher``: kiln's launcher object alone (``launcher.launch(grid, args)``);
* ``torch_op``: ``x.add_(1)``;
* ``cuda_graph``: replay of a CUDA graph holding one launch of the kernel.

Part 2 (``--bundle``): wall seconds from starting a new Python process to its first tuned
result, (a) tuning from scratch with ``kiln.autotune`` (fresh caches and database) and (b)
loading a bundle written from that tuning (``kiln.load_bundle``, no Triton compiler imported),
with an empty kiln cache except for kiln's C launcher (built once per machine and Python).

Part 3, ``conventions`` (``--conventions-only`` runs it alone): host microseconds per call of
each calling convention libraries use (keywords, defaults, ``None`` arguments, constexprs at call
time, grid functions, ``run(grid=...)``, ``@triton.heuristics`` over and under the autotuner, host
``TensorDescriptor`` arguments with a block-shape ``pre_hook``), ``triton.autotune`` vs
``kiln.autotune`` on the same kernel, measured as above; see ``bench/launch_conventions.py``::

    python bench/launch.py --conventions-only --json /tmp/launch-conventions.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from launch_conventions import bench_conventions, conventions_table, section_failed


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def _time_batch(call: Callable[[], Any], batch: int) -> float:
    """Host microseconds per call over one batch, with the GPU kept busy meanwhile."""
    torch.cuda._sleep(50_000_000)  # ~25 ms of GPU work queued ahead of the batch
    start = time.perf_counter()
    for _ in range(batch):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / batch * 1e6


def bench_calls(batches: int, batch: int) -> dict[str, Any]:
    import triton_kiln as kiln

    n = 1024
    x = torch.zeros(n, device="cuda")
    grid = (1,)
    grid3 = (1, 1, 1)  # CompiledKernel takes three dimensions
    compiled = inc_kernel[grid](x, n, BLOCK=1024)
    tuned = kiln.autotune(
        # Both configs cover x with the tuple grid (1,): only num_warps differs. (With BLOCK=512
        # among them, a run where it won left half of x untouched by the tuple-grid arms.)
        [kiln.Config({"BLOCK": 1024}, num_warps=4), kiln.Config({"BLOCK": 1024}, num_warps=8)],
        key=["n"],
    )(inc_kernel)
    tuned[grid](x, n)  # tunes (both configs) and registers the fast entry
    tuned[grid](x, n)
    entry = next(e for table in tuned._variants.tables.tables.values() for e in table.values())
    launcher = entry.launcher
    full_args = (x, n, entry.config.kwargs["BLOCK"])
    meta_grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    tuned[meta_grid](x, n)

    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        inc_kernel[grid](x, n, BLOCK=1024)
    side.synchronize()
    with torch.cuda.graph(graph, stream=side):
        inc_kernel[grid](x, n, BLOCK=1024)

    bound = tuned[grid]
    bundle_dir = Path(tempfile.mkdtemp(prefix="kiln-launch-bundle-"))
    bundled = kiln.load_bundle(kiln.save_bundle(bundle_dir / "b", tuned), register=False)["inc_kernel"]
    arms: dict[str, Callable[[], Any]] = {
        "triton_jit": lambda: inc_kernel[grid](x, n, BLOCK=1024),
        "triton_compiled": lambda: compiled[grid3](x, n, 1024),
        "kiln_tuned": lambda: tuned[grid](x, n),
        "kiln_tuned_bound": lambda: bound(x, n),
        "kiln_tuned_meta_grid": lambda: tuned[meta_grid](x, n),
        "kiln_bundle": lambda: bundled[grid](x, n),
        "kiln_launcher": lambda: launcher.launch(grid, full_args),
        "torch_op": lambda: x.add_(1),
        "cuda_graph": graph.replay,
    }
    torch.cuda.synchronize()
    before = float(x[0])
    for call in arms.values():  # warm every path
        _time_batch(call, 50)
    samples: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(batches):
        for name, call in arms.items():
            samples[name].append(_time_batch(call, batch))
    torch.cuda.synchronize()
    # Every call of every arm adds 1 to every element: a launch that was dropped or went wrong shows.
    expected = before + len(arms) * (50 + batches * batch)
    if not bool((x == expected).all()):
        raise SystemExit(f"launch bench: x is {x[:4].tolist()}..., expected {expected} everywhere")
    shutil.rmtree(bundle_dir, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "us_per_call_median": medians,
        "us_per_call_p20_p80": {
            name: [statistics.quantiles(v, n=5)[0], statistics.quantiles(v, n=5)[-1]]
            for name, v in samples.items()
        },
        "kiln_launcher_is_fast": launcher.is_fast,
        "fallback_reason": launcher.fallback_reason,
        "batches": batches,
        "batch": batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--batch", type=int, default=400)
    parser.add_argument("--bundle", action="store_true", help="also time process start -> first tuned result")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the bundle part")
    parser.add_argument(
        "--conventions-only",
        action="store_true",
        help="time only the calling conventions, kiln.autotune vs triton.autotune (part 3)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": "python " + shlex.join(sys.argv),
    }
    if not args.conventions_only:
        result["calls"] = bench_calls(args.batches, args.batch)
    result["conventions"] = bench_conventions(args.batches, args.batch, _time_batch)
    if args.bundle and not args.conventions_only:
        result["bundle"] = bench_bundle(args.repeats)
    print(json.dumps(result, indent=1))
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    failed = section_failed(result["conventions"])
    if failed:
        raise SystemExit(f"launch bench: conventions failed or gave wrong outputs: {', '.join(failed)}")


def table(result: dict[str, Any]) -> str:
    lines: list[str] = []
    if "calls" in result:
        calls = result["calls"]["us_per_call_median"]
        torch_us = calls["torch_op"]
        lines += [f"{'arm':<24}{'us/call':>10}{'vs torch op':>14}", "-" * 48]
        for name, us in calls.items():
            lines.append(f"{name:<24}{us:>10.2f}{us / torch_us:>13.2f}x")
        lines.append("target: kiln_tuned <= 5 us and <= torch_op")
    if "conventions" in result:
        if lines:
            lines.append("")
        lines.append(conventions_table(result["conventions"]))
    if "bundle" in result:
        b = result["bundle"]
        lines.append("")
        lines.append(f"{'process start -> first tuned result':<40}{'median s':>10}")
        for name in b:
            lines.append(f"{name:<40}{statistics.median(b[name]):>10.3f}")
        lines.append("target: from_bundle_s < 1 s (torch_floor_s: import torch, CUDA init, one torch op)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- part 2

_CHILD_PRELUDE = """
import time, sys
t0 = time.perf_counter()
import torch
t_torch = time.perf_counter() - t0
"""

_CHILD_TUNE = (
    _CHILD_PRELUDE
    + """
sys.path.insert(0, {src!r}); sys.path.insert(0, {bench!r})
import triton, kiln
from launch import inc_kernel
tuned = kiln.autotune([kiln.Config({{"BLOCK": b}}, num_warps=w) for b in (256, 512, 1024) for w in (2, 4)],
                      key=["n"])(inc_kernel)
x = torch.zeros(1 << 20, device="cuda")
tuned[lambda m: (triton.cdiv(m["n"], m["BLOCK"]),)](x, x.numel())
torch.cuda.synchronize()
elapsed = time.perf_counter() - t0
assert float(x[0]) == 1.0
kiln.save_bundle({bundle!r}, tuned)
print("RESULT", elapsed)
"""
)

_CHILD_FLOOR = (
    _CHILD_PRELUDE
    + """
x = torch.zeros(1 << 20, device="cuda")
x.add_(1)
torch.cuda.synchronize()
elapsed = time.perf_counter() - t0
assert float(x[0]) == 1.0
print("RESULT", elapsed)
"""
)

_CHILD_LOAD = (
    _CHILD_PRELUDE
    + """
sys.path.insert(0, {src!r})
import triton_kiln as kiln
bundle = kiln.load_bundle({bundle!r})
inc = bundle["inc_kernel"]
x = torch.zeros(1 << 20, device="cuda")
inc[lambda m: ((m["n"] + m["BLOCK"] - 1) // m["BLOCK"],)](x, x.numel())
torch.cuda.synchronize()
elapsed = time.perf_counter() - t0
assert float(x[0]) == 1.0
print("RESULT", elapsed)
print("IMPORT_TORCH", t_torch)
"""
)


def _child(code: str, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds from spawning the child to its exit, its own seconds after start, import torch."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    values = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("RESULT", "IMPORT_TORCH"):
            values[parts[0]] = float(parts[1])
    return wall, values.get("RESULT", float("nan")), values.get("IMPORT_TORCH", float("nan"))


def bench_bundle(repeats: int) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    out: dict[str, list[float]] = {
        "torch_floor_s": [],
        "tune_from_scratch_s": [],
        "from_bundle_s": [],
        "from_bundle_in_process_s": [],
        "import_torch_s": [],
    }
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="kiln-launch-bench-") as tmp:
            env = dict(os.environ)
            env["KILN_CACHE_DIR"] = f"{tmp}/kiln"
            env["KILN_TUNING_DB"] = f"{tmp}/tuning.sqlite3"
            env["TRITON_CACHE_DIR"] = f"{tmp}/triton"
            fmt = {"src": str(root / "src"), "bench": str(root / "bench"), "bundle": f"{tmp}/bundle"}
            out["torch_floor_s"].append(_child(textwrap.dedent(_CHILD_FLOOR), env)[0])
            out["tune_from_scratch_s"].append(_child(textwrap.dedent(_CHILD_TUNE.format(**fmt)), env)[0])
            # Nothing cached but kiln's C launcher, which is built once per machine (not per bundle).
            shutil.copytree(f"{tmp}/kiln/native", f"{tmp}/kiln-empty/native")
            env["KILN_CACHE_DIR"] = f"{tmp}/kiln-empty"
            env["KILN_TUNING_DB"] = f"{tmp}/empty.sqlite3"
            wall, inner, torch_s = _child(textwrap.dedent(_CHILD_LOAD.format(**fmt)), env)
            out["from_bundle_s"].append(wall)
            out["from_bundle_in_process_s"].append(inner)
            out["import_torch_s"].append(torch_s)
    return out


if __name__ == "__main__":
    main()

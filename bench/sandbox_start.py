"""How soon each benchmark sandbox gives its first result, and what handing inputs over costs.

Run from the repository root on a machine with a GPU::

    python bench/sandbox_start.py --json /tmp/sandbox_start.json

Part 1, per sandbox (the torch one, ``kiln.sandbox.client.Sandbox``, and the native one,
``kiln.sandbox.native_client.NativeSandbox``), ``--repeats`` fresh processes each, alternating:

* ``first_result_s``: from ``start()`` to the first benchmark's result (a tiny kernel, 1 ms of
  warm-up and timing): process start, imports, CUDA context, inputs, loading the binary;
* ``steady_s``: the same benchmark again in the now warm process;
* ``ready_s``: first_result_s - steady_s (the start alone); for the native sandbox also its own
  report, spawn to hello (``ready_reported_s``).

Part 2: one ``--size-mb`` float32 input handed to the native sandbox through CUDA IPC and as a
host copy (``use_ipc=False``): ``set_inputs`` plus sending and the sandbox's copy, in ms
(medians over ``--repeats``).

The kernel is compiled through kiln's pool before anything is timed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import triton
import triton.language as tl

from triton_kiln import CompilePool, CompileRequest, GPUTarget
from triton_kiln.launch.native import native
from triton_kiln.sandbox import BenchSpec
from triton_kiln.sandbox.native_client import NativeSandbox
from triton_kiln.sandbox.torch_client import Sandbox


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _spec(pool: CompilePool, n: int) -> BenchSpec:
    major, minor = torch.cuda.get_device_capability()
    request = CompileRequest(
        copy_kernel,
        {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
        {"BLOCK": 1024},
        options={"num_warps": 4},
        target=GPUTarget("cuda", major * 10 + minor, 32),
    )
    artifact = pool.compile(request)
    return BenchSpec(
        key=artifact.key,
        group=pool.triton_files(artifact),
        hash=str(artifact.metadata.get("hash", artifact.key)),
        arg_names=["x_ptr", "out_ptr", "n", "BLOCK"],
        signature=dict(request.signature),
        constexprs=dict(request.constexprs),
        grid=(triton.cdiv(n, 1024),),
        warmup=1.0,
        rep=1.0,
    )


def _args(n: int) -> dict[str, Any]:
    x = torch.randn(n, device="cuda")
    return {"x_ptr": x, "out_ptr": torch.empty_like(x), "n": n, "BLOCK": 1024}


def _start_once(kind: str, spec: BenchSpec, args: dict[str, Any]) -> dict[str, float]:
    device = torch.cuda.current_device()
    sandbox: Any = NativeSandbox(device) if kind == "native" else Sandbox(device)
    started = time.perf_counter()
    sandbox.start()
    sandbox.set_inputs(args, [], [])
    first = sandbox.bench(spec)
    first_s = time.perf_counter() - started
    again = time.perf_counter()
    second = sandbox.bench(spec)
    steady_s = time.perf_counter() - again
    sandbox.close()
    if first.status != "ok" or second.status != "ok":
        raise RuntimeError(f"{kind} sandbox failed: {first} / {second}")
    row = {"first_result_s": first_s, "steady_s": steady_s, "ready_s": first_s - steady_s}
    if kind == "native":
        row["ready_reported_s"] = float(sandbox.ready_s or 0.0)
    return row


def _transfer_once(use_ipc: bool, spec: BenchSpec, size_mb: int) -> float:
    n = size_mb * (1 << 20) // 4
    args = _args(n)
    spec = BenchSpec(**{**spec.__dict__, "grid": (1,)})  # the transfer is timed, not the kernel
    sandbox = NativeSandbox(torch.cuda.current_device(), use_ipc=use_ipc)
    sandbox.start()
    sandbox.set_inputs(_args(1024), [], [])
    assert sandbox.bench(spec).status == "ok"  # warm: hello received, binary loaded
    started = time.perf_counter()
    sandbox.set_inputs(args, [], [])
    outcome = sandbox.bench(spec)
    total = time.perf_counter() - started
    sandbox.close()
    if outcome.status != "ok":
        raise RuntimeError(f"transfer run failed: {outcome}")
    via = outcome.sandbox["inputs"]
    if use_ipc and via["via_ipc"] != 2:
        raise RuntimeError(f"expected both tensors over IPC, got {via}")
    return 1000.0 * (total - outcome.sandbox["bench_s"] - outcome.sandbox["load_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/sandbox_start.py needs a GPU")
    native()  # kiln's C module is built once per machine: not part of any sandbox's start
    with tempfile.TemporaryDirectory() as cache, CompilePool(cache_dir=Path(cache), workers=2) as pool:
        spec = _spec(pool, 1 << 20)
        args = _args(1 << 20)
        runs: dict[str, list[dict[str, float]]] = {"torch": [], "native": []}
        for _ in range(options.repeats):
            for kind in ("torch", "native"):
                runs[kind].append(_start_once(kind, spec, args))
        transfer: dict[str, list[float]] = {"ipc": [], "host": []}
        for _ in range(options.repeats):
            transfer["ipc"].append(_transfer_once(True, spec, options.size_mb))
            transfer["host"].append(_transfer_once(False, spec, options.size_mb))
    summary = {
        kind: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for kind, rows in runs.items()
    }
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "repeats": options.repeats,
        "sandboxes": summary,
        "runs": runs,
        "input_transfer_ms": {
            "size_mb": options.size_mb,
            "ipc": statistics.median(transfer["ipc"]),
            "host_copy": statistics.median(transfer["host"]),
            "runs": transfer,
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if options.json is not None:
        options.json.write_text(text + "\n")
    print(f"\n{'sandbox':<8} {'first result s':>15} {'ready s':>9} {'steady s':>9}", file=sys.stderr)
    for kind, row in summary.items():
        print(
            f"{kind:<8} {row['first_result_s']:>15.3f} {row['ready_s']:>9.3f} {row['steady_s']:>9.3f}",
            file=sys.stderr,
        )
    moved = result["input_transfer_ms"]
    print(
        f"\ninputs ({options.size_mb} MB + {options.size_mb} MB): CUDA IPC {moved['ipc']:.1f} ms, "
        f"host copies {moved['host_copy']:.1f} ms",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

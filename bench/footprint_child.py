"""One process of ``bench/footprint.py``: run an op once, time it, and say what it holds.

::

    footprint.py (parent)                      this process
      fresh or kept TRITON_CACHE_DIR /           kiln arms: kiln.install() (op) or
      KILN_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR     triton_kiln.inductor.install() (inductor)
      argv: --arm --kind --out [--idle-wait]     the op's first call (synchronized), do_bench
      reads --out (JSON)                  <--    3 s later: the GPU memory of each descendant
                                                 process (nvidia-smi), their count, seconds since
                                                 install; again after --idle-wait seconds when asked

The op is ``realworld_ops``'s ``liger_dyt_fwdbwd_16384x4096`` (Liger's DyT, forward and
backward) for ``--kind op``; for ``--kind inductor`` the same DyT written in torch and compiled
with ``torch.compile``; ``--kind install`` imports the op's modules (kiln installed for the kiln
arm) and calls nothing. Any failure exits non-zero with the error in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

OP = "liger_dyt_fwdbwd_16384x4096"
SETTLE_S = 3.0  # 3 s after the first call, the caller alive
INSTALLED_AT: list[float] = []  # time.monotonic() when kiln was installed (or the stock op imported)


def gpu_memory_by_pid() -> dict[int, float]:
    """MiB of GPU memory per process, as ``nvidia-smi`` lists its compute processes."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise RuntimeError("nvidia-smi is not on PATH: the GPU memory of kiln's processes cannot be read")
    done = subprocess.run(
        [smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[int, float] = {}
    for line in done.stdout.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit():
            found[int(pid)] = found.get(int(pid), 0.0) + float(mib.strip() or 0)
    return found


def measure() -> dict[str, Any]:
    """This process's descendants (kiln's processes, or Triton's/Inductor's) and GPU memory."""
    import psutil

    me = psutil.Process()
    children = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    names = []
    for proc in children:
        try:
            names.append(" ".join(proc.cmdline()[:4])[:120])
        except psutil.Error:
            names.append(str(proc.pid))
    memory = gpu_memory_by_pid()
    if os.getpid() not in memory:
        raise RuntimeError(
            f"nvidia-smi lists no GPU memory for this process (pid {os.getpid()}), which holds a "
            f"CUDA context: its pids are of another PID namespace ({sorted(memory)}). Run the "
            f"benchmark where nvidia-smi sees this container's pids."
        )
    return {
        # what started ahead at install() closes KILN_IDLE_S after it: the parent checks this
        "since_install_s": round(time.monotonic() - INSTALLED_AT[0], 2) if INSTALLED_AT else None,
        "child_gpu_mib": sum(memory.get(p.pid, 0.0) for p in children),
        "child_processes": len(children),
        "children": names,
        "caller_gpu_mib": memory[os.getpid()],
    }


def dyt_torch(x: Any, alpha: Any, gamma: Any, beta: Any) -> Any:
    import torch

    return gamma * torch.tanh(alpha * x) + beta


def build(kind: str, arm: str) -> Any:
    """The op's callable (what a first call and ``do_bench`` run), kiln installed for kiln arms;
    ``None`` for ``--kind install`` (the op's modules imported, nothing called)."""
    import torch

    if kind in ("op", "install"):
        if arm == "kiln":
            import triton_kiln as kiln

            kiln.install()
        INSTALLED_AT.append(time.monotonic())
        import realworld_ops

        op = realworld_ops.OPS[OP]
        for module in op.modules:
            __import__(module)
        return op.build().run if kind == "op" else None
    if arm == "kiln":
        import triton_kiln.inductor

        triton_kiln.inductor.install()
    INSTALLED_AT.append(time.monotonic())
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.float32, requires_grad=True)
    gamma = torch.randn(4096, device="cuda", dtype=torch.float32, requires_grad=True)
    beta = torch.randn(4096, device="cuda", dtype=torch.float32, requires_grad=True)
    compiled = torch.compile(dyt_torch)

    def run() -> Any:
        y = compiled(x, alpha, gamma, beta)
        y.sum().backward()
        return y

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", choices=("triton", "kiln"), required=True)
    parser.add_argument("--kind", choices=("op", "inductor", "install"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--idle-wait", type=float, default=0.0, help="measure again after this")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"arm": args.arm, "kind": args.kind, "pid": os.getpid()}
    try:
        import torch
        import triton

        run = build(args.kind, args.arm)
        if run is None:  # --kind install: this process's CUDA context, and no call
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            result["first_call_s"] = result["op_ms"] = None
        else:
            torch.cuda.synchronize()
            started = time.perf_counter()
            run()
            torch.cuda.synchronize()
            result["first_call_s"] = time.perf_counter() - started
            result["op_ms"] = float(triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median"))
        time.sleep(SETTLE_S)
        result["after"] = measure()
        if args.idle_wait > 0:
            time.sleep(args.idle_wait)
            result["idle"] = measure()
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())

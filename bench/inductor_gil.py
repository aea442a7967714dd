"""What ``kiln.inductor``'s work in the caller's process costs the caller's main thread (the
cold default-mode gap), measured on the CPU machine.

On the H100, kiln's cold ResNet-50 process spent 0.3-1.1 s longer in Inductor's code generation
than stock's, with 1367-2740 voluntary context switches of its main thread against stock's 50-111:
kiln's threads do, in the caller, what Inductor's worker processes do in stock (load each kernel's
module, build its requests, put the binaries in Triton's cache, load them, pickle the kernel).
This script measures that cost without a GPU::

    python bench/inductor_gil.py --kernels 24 --repeats 3 --out /tmp/inductor_gil.json

The main thread runs a fixed pure-Python loop (units of ~0.1 ms: dicts, strings, sorting, what
code generation does). Each repeat, alternately: the loop alone for ``--window-s``; then the loop
while ``--kernels`` compile jobs are submitted exactly as Inductor submits them
(``AsyncCompile.process_pool().submit(_worker_compile_triton, ...)``), until all are done. The
jobs are the fixture kernels of ``tests/support/inductor_fixtures`` (real Inductor-generated sources),
renamed, compiled once for sm_90 into a kiln cache before the first repeat; each repeat points
``TRITON_CACHE_DIR`` at a fresh directory and adds a comment to every module (a new module for
Inductor's module cache, the same kernel source for kiln's key), so every compile is a hit in
kiln's cache and what runs is kiln's in-process work only. The only fake is Inductor's GPU-driver
check, as in the tests.

Two arms, one after the other in one process: ``threads`` (``install(sidecar=False)``: each
job's in-process work in the caller's threads, as before the sidecar) and ``sidecar`` (the
default: that work in kiln's Inductor sidecar process, the caller only unpickles results).

Reported per arm, per repeat and as medians: the loop's units per second alone and beside the
jobs, the main thread's lost seconds (the window less the units done at the alone rate) and per
kernel, the main thread's voluntary context switches, the CPU seconds of kiln's threads in the
caller, and the sidecar's CPU seconds.

No stock arm: stock Inductor's workers would compile for real (there is no cache of theirs to
hit), and they cannot be given this script's fake GPU driver; the GPU benchmarks
(``bench/inductor.py``, ``bench/inductor_warm.py``) compare with stock end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "src"), str(ROOT / "tests")]

import inductor_models  # noqa: E402

KINDS = ("pointwise", "reduction", "persistent_reduction", "template_mm")
"""The fixture kernels of ``tests/support/inductor_fixtures`` the jobs cycle through."""


def unit() -> int:
    """One unit of the main thread's pure-Python work (~0.1 ms on the CPU machine)."""
    table = {i: str(i) for i in range(1500)}
    return len(sorted(table.values(), key=len))


def loop_for(seconds: float) -> int:
    """Units done in ``seconds``."""
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        unit()
        done += 1
    return done


def kernel_sources(count: int) -> list[tuple[str, str]]:
    """``count`` (name, source) pairs: the fixture kernels in turn, each renamed apart."""
    from support.inductor_support import KERNELS, source

    kinds = [KINDS[i % len(KINDS)] for i in range(count)]
    return [source(kind, rename=f"{KERNELS[kind]}_gil{i}") for i, kind in enumerate(kinds)]


def submit_all(sources: list[tuple[str, str]]) -> list[Any]:
    """Each kernel's job, submitted as ``AsyncCompile.triton`` submits it."""
    from support.inductor_support import submit

    return [submit(name, text) for name, text in sources]


def kiln_threads_cpu() -> float:
    spent = inductor_models.thread_families(inductor_models.cpu_since({}))
    return sum(v for k, v in spent.items() if k.startswith("kiln"))


def sidecar_cpu() -> float:
    """CPU seconds of kiln's Inductor sidecar so far (0 without one)."""
    from triton_kiln.inductor import hooks

    pool = hooks.current_pool()
    pid = pool.sidecar.stats.pid if pool is not None and pool.sidecar is not None else None
    return inductor_models.process_cpu_s(pid) or 0.0


def measure(sources: list[tuple[str, str]], window_s: float, root: Path, index: str) -> dict[str, Any]:
    alone_before = inductor_models.main_thread_counters()
    alone_units = loop_for(window_s)
    alone = inductor_models.counters_since(alone_before)
    rate = alone_units / window_s

    os.environ["TRITON_CACHE_DIR"] = str(root / f"triton-{index}")  # fresh: kiln seeds it again
    kiln_before = kiln_threads_cpu()
    sidecar_before = sidecar_cpu()
    before = inductor_models.main_thread_counters()
    started = time.perf_counter()
    # a new module per repeat (Inductor's module caches, the sidecar's included, miss as they would
    # on new kernels); the kernels' own source, and so kiln's cache key, are the same
    futures = submit_all([(name, f"{text}\n# repeat {index}\n") for name, text in sources])
    units = 0
    while not all(f.done() for f in futures):
        unit()
        units += 1
    elapsed = time.perf_counter() - started
    beside = inductor_models.counters_since(before)
    for future in futures:
        future.result()  # a failed job is the run's failure
    lost_s = elapsed - units / rate
    return {
        "alone_units_per_s": round(rate, 1),
        "beside_units_per_s": round(units / elapsed, 1),
        "jobs_s": round(elapsed, 4),
        "main_lost_s": round(lost_s, 4),
        "main_lost_ms_per_kernel": round(lost_s * 1e3 / len(sources), 3),
        "main_nvcsw_alone": alone.get("nvcsw"),
        "main_nvcsw_beside": beside.get("nvcsw"),
        "kiln_threads_cpu_s": round(kiln_threads_cpu() - kiln_before, 4),
        "sidecar_cpu_s": round(sidecar_cpu() - sidecar_before, 4),
    }


def wait_for_sidecar(timeout_s: float = 300.0) -> None:
    """Until kiln's Inductor sidecar takes jobs (the repeats measure it, not the caller's threads
    that serve jobs while it starts); at once without one."""
    from triton_kiln.inductor import hooks

    pool = hooks.current_pool()
    if pool is None or pool.sidecar is None:
        return
    pool.start_sidecar()
    deadline = time.monotonic() + timeout_s
    while pool.sidecar.phase == "starting" and time.monotonic() < deadline:
        time.sleep(0.05)
    if pool.sidecar.phase != "ready":
        raise RuntimeError(f"kiln's Inductor sidecar is not ready: {pool.sidecar.stats}")


def run_arm(arm: str, sources: list[tuple[str, str]], args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One arm: installed, every kernel compiled once into kiln's cache, then the repeats."""
    import triton_kiln.inductor
    from triton_kiln.inductor import hooks
    from triton_kiln.inductor.sidecar import Sidecar

    # the sidecar gets the same one fake as this process (tests/support/inductor_sidecar_fake_gpu.py)
    hooks._sidecar = lambda threads, timeout: Sidecar(
        threads, timeout, preload=("support.inductor_sidecar_fake_gpu",)
    )
    triton_kiln.inductor.install(sidecar=arm == "sidecar")
    try:
        setup = time.perf_counter()
        for future in submit_all(sources):  # compiled once, for real, into kiln's cache
            future.result()
        setup_s = time.perf_counter() - setup
        wait_for_sidecar()
        repeats = [measure(sources, args.window_s, root, f"{arm}-{i}") for i in range(args.repeats)]
    finally:
        triton_kiln.inductor.uninstall()
    medians = {k: statistics.median(r[k] for r in repeats) for k in repeats[0]}
    return {"setup_compile_s": round(setup_s, 3), "repeats": repeats, "medians": medians}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=24, help="compile jobs per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=2.0, help="the loop alone, per repeat")
    parser.add_argument("--arms", nargs="+", choices=("threads", "sidecar"), default=["threads", "sidecar"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="kiln-inductor-gil-"))
    os.environ.setdefault("KILN_PROGRESS", "0")
    os.environ["KILN_CACHE_DIR"] = str(root / "kiln")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton-setup")

    os.environ["PYTHONPATH"] = os.pathsep.join(  # the sidecar finds the fake's module
        p for p in (str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")) if p
    )

    import torch
    from torch._inductor.runtime import triton_helpers

    from triton_kiln.pool import get_pool

    triton_helpers.set_driver_to_gpu = lambda: None  # the only fake: there is no GPU driver here
    sources = kernel_sources(args.kernels)
    arms = {arm: run_arm(arm, sources, args, root) for arm in args.arms}
    result = {
        "meta": {
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "kernels": args.kernels,
        },
        "arms": arms,
    }
    get_pool().shutdown(wait=True, cancel_futures=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(f"\n{args.kernels} kernels, medians of {args.repeats} repeats:", file=sys.stderr)
    for arm, data in arms.items():
        m = data["medians"]
        print(
            f"  {arm:8s} main loop {m['alone_units_per_s']:.0f} units/s alone, {m['beside_units_per_s']:.0f}"
            f" beside kiln's jobs; main thread lost {m['main_lost_s']:.3f} s"
            f" ({m['main_lost_ms_per_kernel']:.1f} ms per kernel); voluntary switches"
            f" {m['main_nvcsw_alone']:.0f} alone, {m['main_nvcsw_beside']:.0f} beside; kiln's threads"
            f" {m['kiln_threads_cpu_s']:.3f} s CPU here, the sidecar {m['sidecar_cpu_s']:.3f} s",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

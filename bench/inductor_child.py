"""One arm of ``bench/inductor.py`` for one model and mode, in a process of its own (started by it).

::

    inductor.py (parent)                              this process (one arm, one phase)
      per run and arm: fresh TORCHINDUCTOR_CACHE_DIR,   build the model and inputs (seeded), run it
      TRITON_CACHE_DIR, KILN_CACHE_DIR (shared by the    eagerly once (CUDA, cuBLAS, cuDNN ready)
      arm's cold and warm phases only)           -->     kiln arm: triton_kiln.inductor.install()
      argv: --arm --model --mode --phase --dir           timed: torch.compile, first call, sync
                                                         Inductor's split; runtime (ms, median)
      reads DIR/result.json, DIR/outputs.pt      <--     outputs (and, with --reference, the
                                                         model's float64 eager output)

Arms: ``stock`` (torch.compile as installed) and ``kiln`` (``triton_kiln.inductor.install()``,
``sandbox_benchmarks`` with ``--kiln-sandbox``, inside the timed region: the pool's start is kiln's
cost). A kiln arm without ``triton_kiln.inductor`` fails at once with :class:`KilnInductorMissing`.
Diagnostic arms (``bench/inductor_warm.py``): ``kiln_threads`` (``install(sidecar=False)``: each
compile job's in-process work in this process's threads, as before kiln's Inductor sidecar),
``kiln_eager`` (``install()``, then kiln's pool started at once, as ``install()`` did before the
pool waited for Inductor's first lowering) and ``stock_pool`` (stock Inductor, with kiln's pool
started beside it and never used). Kiln's arms record what the sidecar did (``kiln_sidecar``:
its start-up, when it was ready and when the first job came, measured from the install, its
jobs, fallbacks and CPU seconds).
Phases: ``cold`` (fresh caches), ``warm`` (a second process on the cold phase's caches: what
the next process pays) and ``paired`` (a third, on the same caches, that times blocks of calls
when ``bench/inductor.py`` asks, in turn with the other arm's: see :func:`serve_paired`).
``result.json`` is written whatever happens: a failure is data.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inductor_models
import machine_state

ARMS = ("stock", "kiln", "kiln_threads", "kiln_eager", "stock_pool")
MODES = ("max-autotune-no-cudagraphs", "default")
KILN_MODULE = "triton_kiln.inductor"


class KilnInductorMissing(RuntimeError):
    """The kiln arm was asked for, and this checkout has no ``triton_kiln.inductor``."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"the kiln arm needs {KILN_MODULE} (install(*, sandbox_benchmarks=False), "
            f"uninstall(), installed()), and it cannot be imported here: {detail}. Run from a "
            "checkout that has it (src/ is put on PYTHONPATH), or pass --arms stock."
        )


def install_kiln(sandbox: bool, sidecar: bool = True) -> dict[str, Any]:
    """``triton_kiln.inductor.install(sandbox_benchmarks=sandbox, sidecar=sidecar)``; what was
    installed, from where."""
    import importlib

    try:
        module = importlib.import_module(KILN_MODULE)
    except ModuleNotFoundError as exc:
        raise KilnInductorMissing(f"{type(exc).__name__}: {exc}") from exc
    module.install(sandbox_benchmarks=sandbox, sidecar=sidecar)
    if not module.installed():
        raise RuntimeError(f"{KILN_MODULE}.install() returned but installed() is False")
    return {"module": getattr(module, "__file__", None), "sandbox_benchmarks": sandbox, "sidecar": sidecar}


def children_report() -> dict[str, int]:
    """This process's child processes now (every level): how many, and how many are kiln's (its
    sidecar, zygotes, workers); the rest are Inductor's (its SubprocPool sidecar and workers)."""
    import psutil

    children = psutil.Process().children(recursive=True)
    kiln = 0
    for child in children:
        try:
            kiln += "triton_kiln" in " ".join(child.cmdline())
        except psutil.Error:
            continue
    return {"all": len(children), "kiln": kiln}


def sidecar_report(installed_at: float) -> dict[str, Any] | None:
    """What kiln's Inductor sidecar did (times in seconds after ``installed_at``, a monotonic
    time), or ``None`` without one."""
    from triton_kiln.inductor import hooks

    pool = hooks.current_pool()
    sidecar = pool.sidecar if pool is not None else None
    if sidecar is None:
        return None
    stats = sidecar.stats

    def since(moment: float | None) -> float | None:
        return None if moment is None else round(moment - installed_at, 4)

    cpu = inductor_models.process_cpu_s(stats.pid)
    return {
        "phase": sidecar.phase,
        "spawned_s": since(stats.spawned_at),
        "ready_s": since(stats.ready_at),
        "startup_s": stats.startup_s,
        "first_job_s": since(stats.first_job_at),
        "jobs": stats.jobs,
        "fallbacks": stats.fallbacks,
        "died": stats.died,
        "cpu_s": None if cpu is None else round(cpu, 3),
    }


PAIRED_PREFIX = "KILN-PAIRED "
"""Lines this process writes on stdout in the ``paired`` phase (a JSON object after the prefix);
anything else on stdout (a library's print) is not the protocol's."""


def _tell(message: dict[str, Any]) -> None:
    sys.stdout.write(PAIRED_PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


def serve_paired(call: Any, device: str, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The ``paired`` phase (``bench/inductor.py``'s paired runtime): with the model compiled from
    the arm's warm caches, wait for this process's compile pools to go quiet, hold the main thread
    on ``--pin-cpu``, warm up, say ``ready``, then time one block of ``--block-iters`` calls
    (:func:`inductor_models.block_runtime_ms`) each time the parent writes ``block`` on stdin,
    until ``quit``. The parent runs one process per arm on the same CPU and asks them in turn, so
    both arms' blocks are taken on one core, interleaved in time: the host's drift from process to
    process and minute to minute, which swamps a launch-bound model's wall runtime, falls on both
    arms alike."""
    result["stage"] = "paired settle"
    result["paired_settle"] = inductor_models.wait_children_quiet()
    if args.pin_cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.pin_cpu})  # this thread only (Linux): pools keep their cores
        result["paired_cpu"] = args.pin_cpu
    for _ in range(args.warmup):
        call()
    inductor_models.sync(device)
    result["stage"] = "paired blocks"
    blocks: list[float] = []
    result["paired_blocks_ms"] = blocks
    _tell({"ready": True, "settle": result["paired_settle"]})
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        if command != "block":
            _tell({"error": f"unknown command {command!r}"})
            continue
        (block_ms,) = inductor_models.block_runtime_ms(call, device, 1, args.block_iters)
        blocks.append(block_ms)
        _tell({"block_ms": block_ms})
    result["paired_threads_cpu_s"] = inductor_models.thread_families(inductor_models.thread_cpu_s())


def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    result["stage"] = "machine"
    result["machine_before"] = machine_state.snapshot()  # before this process does anything
    result["stage"] = "import"
    started = time.perf_counter()
    import torch

    result["import_torch_s"] = time.perf_counter() - started
    result["torch"] = torch.__version__
    device = args.device if args.device != "auto" else inductor_models.device_name()
    result["device"] = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu"
    result["stage"] = "model"
    model, inputs = inductor_models.build(args.model, device, args.batch, args.attention)
    with torch.no_grad():
        model(*inputs)  # eager once: CUDA context, cuBLAS/cuDNN handles ready in every arm alike
    inductor_models.sync(device)
    result["settings"] = inductor_models.inductor_settings()

    result["speed_probe_s"] = inductor_models.speed_probe_s()
    result["stage"] = "compile"
    threads_before = inductor_models.thread_cpu_s()
    started = time.perf_counter()
    # Inductor's modules, which torch.compile imports on every path (a warm process's cached
    # graph included): imported first in both arms, so kiln_install_s is kiln's own work only
    inductor_models.import_inductor()
    result["import_inductor_s"] = time.perf_counter() - started
    main_before = inductor_models.main_thread_counters()
    installing = time.perf_counter()
    installed_at = time.monotonic()
    if args.arm in ("kiln", "kiln_threads", "kiln_eager"):
        result["stage"] = "kiln install"
        result["kiln"] = install_kiln(args.kiln_sandbox, sidecar=args.arm != "kiln_threads")
    if args.arm in ("kiln_eager", "stock_pool"):  # kiln's pool started now, not at the first lowering
        from triton_kiln.pool import get_pool

        get_pool().start()
    if args.arm in ("kiln", "kiln_threads", "kiln_eager"):
        result["kiln_install_s"] = time.perf_counter() - installing
        result["stage"] = "compile"
    # after kiln's install (which wraps the same method): every coordinate descent, either arm
    coordesc, stop_recording = inductor_models.record_coordinate_descent()
    cache_events, stop_cache_events = inductor_models.record_cache_events()
    work = inductor_models.FirstCallWork()
    work.start()
    compiled = torch.compile(model, mode=None if args.mode == "default" else args.mode)
    with torch.no_grad():
        out = compiled(*inputs)
    inductor_models.sync(device)
    result["first_s"] = time.perf_counter() - started
    # the compile work and the choices' timings, and the limit they make (the main thread's
    # lowering is outside it)
    result["first_call_work"] = work.stop(len(os.sched_getaffinity(0)))
    result["limit_s"] = result["first_call_work"]["limit_s"]
    stop_cache_events()
    result["cache_events"] = cache_events  # why a graph was lowered again (a warm process's)
    # CPU seconds this process's threads spent in the first call, summed by thread family (the
    # main thread; kiln's job threads and pool manager; Inductor's and torch's own threads)
    result["threads_cpu_first_call_s"] = inductor_models.thread_families(
        inductor_models.cpu_since(threads_before)
    )
    result["main_thread_first_call"] = inductor_models.counters_since(main_before)
    if args.arm.startswith("kiln"):
        result["kiln_sidecar"] = sidecar_report(installed_at)
    result["children_after_first_call"] = children_report()
    result["split"] = inductor_models.inductor_split(result["first_s"])
    stop_recording()  # the model's runtime is measured as a user runs it
    result["coordinate_descent"] = inductor_models.compact_coordinate_descent(list(coordesc))  # first call
    if args.phase == "paired":

        def paired_call() -> Any:
            with torch.no_grad():
                return compiled(*inputs)

        serve_paired(paired_call, device, args, result)
        return

    if args.iters > 0:
        result["stage"] = "runtime"

        def call() -> Any:
            with torch.no_grad():
                return compiled(*inputs)

        stats = inductor_models.runtime_stats(
            call, device, args.iters, args.warmup, args.blocks, args.block_iters
        )
        result.update(stats)
        result["launch"] = inductor_models.launch_diagnostics(call, device)
        if device == "cuda":
            # the same calls with the arm's compile pool stopped: whether what it leaves running
            # (kiln's pool, or Inductor's SubprocPool) slows them
            if args.arm != "stock":
                import triton_kiln.inductor
                from triton_kiln.pool import get_pool

                triton_kiln.inductor.uninstall()
                get_pool().shutdown(wait=True)
            if args.arm in ("stock", "stock_pool"):
                from torch._inductor.async_compile import shutdown_compile_workers

                shutdown_compile_workers()

            def blocks_median() -> float:
                return statistics.median(
                    inductor_models.block_runtime_ms(call, device, args.blocks, args.block_iters)
                )

            result["runtime_ms_pool_stopped"] = blocks_median()
            # and with this thread held on one core (the last): whether where the process runs,
            # rather than what it holds, makes one arm's host slower
            if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
                allowed = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {max(allowed)})
                try:
                    result["runtime_ms_pinned"] = blocks_median()
                finally:
                    os.sched_setaffinity(0, allowed)
        result["split_after_runtime"] = {
            "counters": inductor_models.inductor_split().get("counters", {})  # recompiles show here
        }
    result["stage"] = "outputs"
    torch.save({"out": out.detach().cpu()}, args.dir / "outputs.pt")
    if args.reference:
        result["stage"] = "reference"
        ref = inductor_models.fp64_reference(model, inputs)
        torch.save({"fp64": ref.detach().cpu()}, args.dir / "reference.pt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", required=True, choices=ARMS)
    parser.add_argument("--model", required=True, choices=inductor_models.MODELS)
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--phase", required=True, choices=("cold", "warm", "paired"))
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--attention", choices=("flex", "manual"), default="flex")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--iters", type=int, default=100, help="timed calls for the runtime (0: none)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=20, help="blocks of back-to-back calls (runtime_ms)")
    parser.add_argument("--block-iters", type=int, default=50, help="calls per block")
    parser.add_argument("--kiln-sandbox", action="store_true", help="install(sandbox_benchmarks=True)")
    parser.add_argument("--reference", action="store_true", help="also save the float64 eager output")
    parser.add_argument("--pin-cpu", type=int, default=None, help="paired phase: the main thread's CPU")
    args = parser.parse_args(argv)
    if args.batch is None:
        args.batch = inductor_models.default_batch(args.model)
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "arm": args.arm,
        "model": args.model,
        "mode": args.mode,
        "phase": args.phase,
        "batch": args.batch,
        "python": platform.python_version(),
        "pid": os.getpid(),
    }
    code = 0
    try:
        run(args, result)
        result["stage"] = "done"
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        result["traceback_tail"] = traceback.format_exc()[-3000:]
        code = 3 if isinstance(exc, KilnInductorMissing) else 1
        print(f"[inductor_child] {args.arm} {args.phase}: {result['error']}", file=sys.stderr, flush=True)
    (args.dir / "result.json").write_text(json.dumps(result, indent=1, default=repr))
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())

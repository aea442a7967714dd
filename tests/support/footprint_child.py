"""A fresh process for tests/test_footprint.py: what kiln starts in it, reported as one JSON line.

``python footprint_child.py MODE DB``, kiln importable, ``KILN_*`` from the environment:

* ``decorate``: ``kiln.install()``, then every autotuned kernel of Liger and FLA defined
  (``liger_kernel.ops``, ``fla.ops``, ``fla.modules``; the ones installed); what each of
  prewarm's key look-ups started (a thread, or nothing) and whether the key is kept after;
  with ``KILN_PREWARM=1``, the pool that install() started, once ready;
* ``tune``: a kiln-tuned kernel tuned for ``n=4096`` (its configs really compiled, in the pool);
* ``db``: the same kernel, every key found in ``DB`` (the database ``tune`` wrote);
* ``KILN_TEST_INSTALL=1`` (``tune``, ``db``): ``kiln.install()`` first, so the program record is
  kept and replayed (``KILN_PROGRAM_RECORD``);
* ``idle``: ``tune``, then wait for ``KILN_IDLE_S`` to release the pool, then tune ``n=8192`` in fp16 (new
  compiles).

A GPU is the one thing faked, and only where kiln looks for it (``gpu_present``, the local
target ``sm_90``, a stand-in for the benchmark's timings): the machine has none. Every process
started (``subprocess.Popen``, ``os.fork``, ``os.posix_spawn``: Python's audit events) is
recorded from the first line, before kiln is imported.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

started: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        started.append(f"{event} {args[0]!r}")
    elif event in ("os.fork", "os.posix_spawn", "os.forkpty"):
        started.append(event)


sys.addaudithook(_audit)

import psutil  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

import triton_kiln as kiln  # noqa: E402
from triton_kiln import triton_compat  # noqa: E402
from triton_kiln.launch import native  # noqa: E402
from triton_kiln.sandbox import BenchOutcome, registry  # noqa: E402
from triton_kiln.tuning import TuningDatabase  # noqa: E402

SM90 = triton_compat.GPUTarget("cuda", 90, 32)


def _fake_gpu() -> None:
    registry.gpu_present = lambda: True  # type: ignore[assignment]
    triton_compat.local_target = lambda: SM90  # type: ignore[assignment]


class _Timings:
    """The benchmark's stand-in: BLOCK=128 is fastest."""

    owns_timing = False

    def __init__(self, tuner: Any, args: Any, kwargs: Any) -> None:
        self.tuner = tuner

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        ms = {64: 2.0, 128: 1.0, 256: 3.0}[candidate.config.kwargs["BLOCK"]]
        return BenchOutcome("ok", timings=[ms, ms, ms])

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


def _kernel(db: str) -> Any:
    from support.kernels import scale_kernel

    configs = [kiln.Config({"BLOCK": b}, num_warps=4) for b in (64, 128, 256)]
    tuner = kiln.autotune(configs, key=["n"], database=TuningDatabase(db), sandbox=False)(scale_kernel)
    tuner._bencher_factory = _Timings
    return tuner


def _call(tuner: Any, n: int, dtype: Any = torch.float32) -> None:
    x = torch.ones(n, dtype=dtype)
    tuner.run(x, torch.empty_like(x), n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=True)


def _children() -> list[str]:
    """This process's descendants (an exited one not yet reaped included); one that is gone
    while they are listed (a worker closing after its idle time) is not one."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.is_running():
                alive.append(f"{child.pid} {child.name()}")
        except psutil.Error:
            continue
    return alive


def _wait_no_children(timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while _children() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _children()


def main() -> None:
    mode, db = sys.argv[1], sys.argv[2]
    report: dict[str, Any] = {"mode": mode}
    _fake_gpu()
    began = time.perf_counter()
    if mode == "decorate":
        import importlib

        from triton_kiln.autotuner import prewarm

        key_threads: list[Any] = []
        key_ahead = prewarm.key_ahead

        def recording_key_ahead(key_dir: Any) -> Any:
            thread = key_ahead(key_dir)
            key_threads.append(thread)
            return thread

        prewarm.key_ahead = recording_key_ahead  # type: ignore[assignment]
        kiln.install()
        report["install_s"] = time.perf_counter() - began
        modules = []
        libraries = ("liger_kernel.ops", "fla.ops", "fla.modules")
        for name in libraries if os.environ.get("FOOTPRINT_LIBRARIES") != "0" else ():
            try:
                importlib.import_module(name)
                modules.append(name)
            except ImportError:
                pass
        report["modules"] = modules
        tuners = set()
        for m in list(sys.modules.values()):
            if m is None or not m.__name__.startswith(("liger_kernel", "fla")):
                continue
            for value in list(vars(m).values()):
                obj = value
                while isinstance(obj, triton.runtime.KernelInterface):  # heuristics over autotune...
                    if isinstance(obj, kiln.Autotuner):
                        tuners.add(id(obj))
                    obj = getattr(obj, "fn", None)
        report["kernels"] = len(tuners)
        report["decorate_s"] = time.perf_counter() - began
        report["key_ahead"] = [None if t is None else t.name for t in key_threads]
        for thread in threading.enumerate():
            if thread.name == "kiln-prewarm":  # KILN_PREWARM=auto looks in the database in it
                thread.join(60)
        report["prewarm_started"] = prewarm._started
        if prewarm._started:  # KILN_PREWARM=1, or auto on a cache where nothing is tuned
            from triton_kiln.pool.pool import get_pool

            report["pool_ready"] = get_pool().wait_ready(60)
            report["children_prewarmed"] = _children()
        for thread in key_threads:
            if thread is not None:
                thread.join(60)
        from triton_kiln import settings

        key_dir = settings.current().triton_key_dir
        report["key_kept"] = triton_compat.stored_triton_key(key_dir) is not None
        kiln.uninstall()
    else:
        if os.environ.get("KILN_TEST_INSTALL") == "1":
            kiln.install()
        tuner = _kernel(db)
        _call(tuner, 4096)
        report["first_call_s"] = time.perf_counter() - began
        report["loaded_from"] = tuner.loaded_from
        report["best"] = dict(tuner.best_config.kwargs)
        from triton_kiln.pool.pool import get_pool

        pool = get_pool()
        report["pool_started"] = pool.started
        report["children_after_call"] = _children()
        if mode == "idle":
            report["children_after_idle"] = _wait_no_children(60)
            report["idle_releases"] = pool.stats.idle_releases
            _call(tuner, 8192, torch.float16)  # new binaries: the pool has work again
            report["second_loaded_from"] = tuner.loaded_from
            report["second_best"] = dict(tuner.best_config.kwargs)
            report["idle_restarts"] = pool.stats.idle_restarts
            report["zygote_ready_s"] = pool.stats.zygote_ready_s
    report["launcher_loaded"] = native._module is not None
    report["sandboxes"] = len(registry._SANDBOXES)
    report["children"] = _children()
    report["started"] = started
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

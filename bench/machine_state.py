"""What else the machine is doing when a benchmark process starts (bench/inductor_child.py),
which host a benchmark ran on (:func:`host`: bench/realworld.py, autotune.py, ranks.py), whether
its processes keep Python bytecode (:func:`bytecode`) and which commit it measured
(:func:`commit`).

A warm ResNet-50 process with kiln imported torch more slowly than stock's in all 7 runs on the
H100 (median 1.17x), before kiln was imported at all. This records, before ``import torch``,
whether processes left by the run's earlier process (kiln's zygote and workers, Inductor's
compile workers, sandboxes) are still alive or busy, and how busy the machine's CPUs are.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

MARKERS = ("triton_kiln", "compile_worker", "subproc_pool", "kiln")


def snapshot(sample_s: float = 0.5) -> dict[str, Any]:
    """CPU use of the whole machine and of every other process over ``sample_s``, the
    benchmark-related processes still alive, and the CPUs' current frequency."""
    me = os.getpid()
    procs = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        if proc.info["pid"] == me:
            continue
        try:
            proc.cpu_percent(None)  # starts this process's sample
            procs.append(proc)
        except psutil.Error:
            continue
    psutil.cpu_percent(None)
    started = time.perf_counter()
    time.sleep(sample_s)
    busy = []
    related = []
    for proc in procs:
        try:
            percent = proc.cpu_percent(None)
            line = " ".join(proc.info.get("cmdline") or [])[:120]
        except psutil.Error:
            continue
        if percent >= 5.0:
            busy.append({"pid": proc.info["pid"], "cpu_percent": percent, "cmd": line})
        if any(marker in line for marker in MARKERS):
            related.append({"pid": proc.info["pid"], "cpu_percent": percent, "cmd": line})
    freq = psutil.cpu_freq()
    return {
        "sample_s": round(time.perf_counter() - started, 3),
        "machine_cpu_percent": psutil.cpu_percent(None),
        "busy_processes": sorted(busy, key=lambda p: -p["cpu_percent"])[:10],
        "related_processes": related[:40],
        "related_count": len(related),
        "cpu_mhz": round(freq.current, 1) if freq else None,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cpus": psutil.cpu_count(logical=True),
    }


def host() -> dict[str, Any]:
    """The host, recorded in a benchmark's meta so that runs on different machines can be told
    apart: its CPU model (two H200 hosts' compile floors can differ by 28-51%), logical CPUs,
    current frequency, and the load averages as the run starts (another job on a shared host
    shows there)."""
    model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    freq = psutil.cpu_freq()
    return {
        "cpu_model": model,
        "logical_cpus": psutil.cpu_count(logical=True),
        "cpu_mhz": round(freq.current, 1) if freq else None,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "bytecode": bytecode(),
    }


def bytecode() -> dict[str, Any]:
    """How the benchmark's processes, and the children that inherit their environment, keep
    Python bytecode: ``dont_write`` (``PYTHONDONTWRITEBYTECODE``: a module not already compiled
    is compiled from source in every new process) and ``cache_prefix`` (``PYTHONPYCACHEPREFIX``,
    where bytecode is kept; None: beside the sources) and ``torch_cached`` (whether torch's
    ``__init__`` has bytecode where this interpreter would read it; None without torch).

    An installation made by pip has bytecode; the GPU machine's image has none and forbids
    writing it, so there every new process compiles the modules it imports from source (~10 s for
    torch): a spawned compile worker, each config's child in Helion's spawn precompile and a
    sandbox pay it at every start, a forked child does not. Runs with and without bytecode are
    not comparable; ``.ci/gpu/gpu_session.sh`` keeps it under ``/tmp/bench-pycache``, filled
    before its first phase, unless ``GPU_SESSION_BYTECODE=0``."""
    return {
        "dont_write": bool(sys.flags.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")),
        "cache_prefix": os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix,
        "torch_cached": _has_bytecode("torch"),
    }


def _has_bytecode(package: str) -> bool | None:
    """Whether ``package``'s ``__init__`` has bytecode at the path imports read (without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(importlib.util.cache_from_source(spec.origin)).is_file()


def commit(*, mark_dirty: bool = False) -> str | None:
    """The checkout's HEAD (with ``-dirty`` appended when ``mark_dirty`` and the tree has
    changes), or None where there is no git repository, such as a tree copied to a GPU machine,
    whose runs name their commit with an option instead."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head and mark_dirty and git("status", "--porcelain"):
        return f"{head}-dirty"
    return head or None

"""Real faults in Triton's compile of chosen kernels, in every process of a fault run.

``bench/inductor_faults.py`` puts this directory first on ``PYTHONPATH`` and sets
``BENCH_FAULT``; its ``sitecustomize`` then calls :func:`install_from_env` at the start of
every Python process of the run: the model's process, Inductor's compile workers (their
``PYTHONPATH`` is the parent's ``sys.path``), kiln's zygote and workers (they inherit the
environment). Each gets a Triton stage hook (``triton_kiln.triton_compat.install_stages_hook``,
so every supported Triton's hook protocol) that, for a kernel whose name starts with one of
``BENCH_FAULT_NAMES`` and whose ``num_warps`` / ``num_stages`` match ``BENCH_FAULT_WARPS``
/ ``BENCH_FAULT_STAGES`` (comma-separated; empty: any), in the cubin stage (after LLVM
codegen, before ptxas; as ``tests/support/faults.py``):

* ``abort``: prints a C++-style assertion and calls libc ``abort()`` (SIGABRT): the compile
  dies as an LLVM assertion would;
* ``ima``: adds to the kernel's PTX, first thing, a store to address 0 by every thread: the
  binary compiles and loads, and its launch is an illegal memory access (sticky in its context).

Every firing appends a JSON line (pid, parent pid, kernel, warps, stages, fault) to
``BENCH_FAULT_LOG``, so a run shows where the fault went off, or that it never did.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

ASSERTION = "LinearLayout.cpp:512: reshapeOuts: Assertion `bench-injected' failed."
_ENTRY_BODY = re.compile(r"(\.entry\s+[\w$]+\s*\([^)]*\)[^{]*\{)", re.S)
BAD_STORE = """
	{
	.reg .b64 	%bench_null;
	.reg .b32 	%bench_zero;
	mov.u64 	%bench_null, 0;
	mov.u32 	%bench_zero, 0;
	st.volatile.global.u32 	[%bench_null], %bench_zero;
	}
"""


def _ints(text: str) -> set[int]:
    return {int(x) for x in text.split(",") if x.strip()}


class FaultSpec:
    """Which kernels a run's fault hits, read from the environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.fault = env["BENCH_FAULT"]
        if self.fault not in ("abort", "ima"):
            raise ValueError(f"BENCH_FAULT={self.fault!r}: expected abort or ima")
        self.names = tuple(n for n in env.get("BENCH_FAULT_NAMES", "").split(",") if n)
        if not self.names:
            raise ValueError("BENCH_FAULT_NAMES is empty: name the kernels the fault hits")
        self.warps = _ints(env.get("BENCH_FAULT_WARPS", ""))
        self.stages = _ints(env.get("BENCH_FAULT_STAGES", ""))
        self.log = env.get("BENCH_FAULT_LOG", "")

    def hits(self, name: str, num_warps: int, num_stages: int) -> bool:
        return (
            name.startswith(self.names)
            and (not self.warps or num_warps in self.warps)
            and (not self.stages or num_stages in self.stages)
        )

    def record(self, name: str, num_warps: int, num_stages: int) -> None:
        if not self.log:
            return
        line = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "kernel": name,
            "num_warps": num_warps,
            "num_stages": num_stages,
            "fault": self.fault,
            "time": time.time(),
        }
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


def at_entry(ptx: str, code: str) -> str:
    """``ptx`` with ``code`` (PTX statements) first in its kernel's body."""
    patched, count = _ENTRY_BODY.subn(lambda m: m.group(1) + code, ptx, count=1)
    if count != 1:
        raise ValueError("no .entry body found in the PTX: cannot add the fault")
    return patched


def add_bad_store(ptx: str) -> str:
    """``ptx`` with a store to address 0 at the start of its kernel's body."""
    return at_entry(ptx, BAD_STORE)


def abort() -> None:
    import ctypes

    os.write(2, f"python: {ASSERTION}\n".encode())
    ctypes.CDLL(None).abort()


def make_editor(spec: FaultSpec) -> Any:
    def edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
        if "cubin" not in stages:  # not the CUDA backend
            return
        make_cubin = stages["cubin"]
        warps, num_stages = int(options.num_warps), int(options.num_stages)

        def cubin_stage(src: Any, metadata: dict[str, Any]) -> Any:
            name = str(metadata.get("name", ""))
            if spec.hits(name, warps, num_stages):
                spec.record(name, warps, num_stages)
                if spec.fault == "abort":
                    abort()
                src = add_bad_store(src)
            return make_cubin(src, metadata)

        stages["cubin"] = cubin_stage

    return edit


_installed: list[str] = []


def install_from_env(env: dict[str, str] | None = None) -> bool:
    """Install the hook when ``BENCH_FAULT`` is set; True if it was."""
    env = dict(os.environ) if env is None else env
    if not env.get("BENCH_FAULT"):
        return False
    from triton_kiln.triton_compat import install_stages_hook

    spec = FaultSpec(env)
    install_stages_hook(make_editor(spec), f"bench-fault-{spec.fault}")
    _installed.append(spec.fault)
    return True


def installed() -> list[str]:
    """The faults this process installed (for tests: a compile worker reports its own)."""
    return list(_installed)

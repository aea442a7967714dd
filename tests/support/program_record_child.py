"""A program for tests/test_program_record.py: ``kiln.install()``, then the import of a kernel
module (``record_kernels``, which the test writes and may change between runs), then the first
call of a plain ``@triton.jit`` kernel, driven as tests/test_jit_routing.py drives routed compiles
(``warmup``: no GPU here; Triton's active driver is the only fake).

Between its imports and its first call it waits for the program record's replay, then for the
compiles the replay started; what the pool had done by then, and after the call, is printed as one
``REPORT {json}`` line.
"""

from __future__ import annotations

import json
import logging
import sys

import torch
from triton.runtime import driver

import triton_kiln as kiln
from support import jit_support
from triton_kiln import program
from triton_kiln.pool import get_pool

driver._active = jit_support.FakeDriver()  # type: ignore[attr-defined]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
logging.getLogger("kiln.program").setLevel(logging.INFO)

kiln.install()
import record_kernels  # noqa: E402 - the program's own import, after install() as a library's would be

report: dict[str, object] = {}
replay = program.wait_for_replay(60)  # with a remote cache, its record is fetched in a thread
report["replayed"] = replay is not None
if replay is not None:
    assert replay.wait(120), "the replay did not finish"
    report["started"] = replay.started
    report["skipped"] = dict(replay.skipped)
    for future in replay.futures:  # compiled, or (a remote cache) fetched
        future.result(timeout=120)
pool = get_pool()
report["pool_started_before_call"] = pool.started
report["compiled_before_call"] = pool.stats.compiled
report["done_before_call"] = replay is not None and all(f.done() for f in replay.futures)
report["memory_hits_before_call"] = pool.stats.memory_hits
F32 = torch.float32
record_kernels.add_kernel.warmup(F32, F32, F32, 1024, BLOCK=128, grid=(1,))  # the first call
report["compiled_after_call"] = pool.stats.compiled
report["submitted_after_call"] = pool.stats.submitted
kiln.uninstall()
print("REPORT " + json.dumps(report), flush=True)

"""Real bundles for the attack tests: one sm_90 compile of ``add_kernel``, written by kiln."""

from __future__ import annotations

from pathlib import Path

import triton_kiln as kiln
from support import kernels
from support.basics import SM90, wait_no_processes
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner.compile_requests import request_for
from triton_kiln.bundle.format import KernelRecord, entry_for
from triton_kiln.launch.spec import LaunchSpec
from triton_kiln.tuning.configs import config_json as _config_json

CONFIG = kiln.Config({"BLOCK": 1024}, num_warps=4)


def compile_parts(cache_dir: Path) -> tuple[KernelRecord, CompiledArtifact]:
    """A kernel record with one real entry, and its artifact (compiled in a pool of one worker)."""
    import torch

    pool = kiln.CompilePool(workers=1, cache_dir=cache_dir)
    try:
        tuner = kiln.autotune([CONFIG], key=["n"], pool=pool, target=SM90, database=False)(kernels.add_kernel)
        x = torch.zeros(4096)
        request, bound = request_for(tuner.fn, CONFIG, (x, x, x, 4096), {}, SM90)
        artifact = pool.compile(request)
        entry = entry_for(
            "add_kernel",
            artifact,
            LaunchSpec.from_request(request),
            {"n": bound.args["n"]},
            _config_json(CONFIG),
            None,
            "tuned",
        )
        record = tuner._variants.kernel_record()
        record.entries.append(entry)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    left = wait_no_processes(pool.pool_id)
    assert not left, f"processes leaked: {left}"
    return record, artifact

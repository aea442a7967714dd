"""The output check's kernel, compiled by kiln's pool for the tuning device, for the sandbox.

The native sandbox compares outputs on the GPU (:mod:`triton_kiln.sandbox.device_check`) with
:func:`triton_kiln.sandbox.compare_kernel.output_summary_kernel`. The sandbox never compiles (it has no
Triton); the tuner submits one request per variant the inputs' dtypes need to its pool, ahead of
every config (highest priority), when a tuning run starts. The artifacts land in kiln's disk
cache, so a machine compiles them once; later runs and processes get them at once::

    SandboxBencher(...)          -> submit(pool, target, dtypes)        {dtype: Future}
    first bench, before inputs   -> specs(pool, futures, timeout)      {dtype: spec}
                                 -> sandbox.set_compare_kernels(specs)  (sent with the inputs)

A variant that fails to compile, or is not ready in time, leaves its dtype to the host check.
With the variants comes :func:`~triton_kiln.sandbox.compare_kernel.fingerprint_kernel` (key
``"fingerprint"``), which names a new representative on the device; without it, its bytes are
read to the host and hashed there, to the same name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from triton_kiln.artifacts import triton_files as layout
from triton_kiln.compile.request import CompileRequest

log = logging.getLogger("kiln.autotune")

ARG_NAMES = ["out_ptr", "ref_ptr", "before_ptr", "part_ptr", "n"]
PRIORITY = 1e9  # ahead of every config (guess_compile_cost is a small relative number)


def requests(target: Any, dtypes: Iterable[str]) -> dict[str, CompileRequest]:
    """One request per dtype of ``dtypes`` the kernel has a variant for (same variant: same key)."""
    from triton_kiln.sandbox import compare_kernel as kernel

    found = {}
    for dtype in sorted(set(dtypes)):
        variant = kernel.VARIANTS.get(dtype)
        if variant is None:
            continue
        kind, pointer = variant
        found[dtype] = CompileRequest(
            kernel.output_summary_kernel,
            kernel.signature(pointer),
            {"KIND": kind, "BLOCK": kernel.BLOCK},
            options={"num_warps": 4},
            target=target,
        )
    if found:  # outputs checked on the device are named there too
        found[kernel.FINGERPRINT] = CompileRequest(
            kernel.fingerprint_kernel,
            dict(kernel.FINGERPRINT_SIGNATURE),
            {"BLOCK": kernel.BLOCK},
            options={"num_warps": 4},
            target=target,
        )
    return found


def submit(pool: Any, target: Any, dtypes: Iterable[str]) -> dict[str, Future[Any]]:
    """Compile the variants ``dtypes`` need, before anything else queued in ``pool``."""
    return {
        dtype: pool.submit(request, priority=PRIORITY) for dtype, request in requests(target, dtypes).items()
    }


def specs(pool: Any, futures: dict[str, Future[Any]], timeout_s: float) -> dict[str, dict[str, Any]]:
    """The sandbox's spec of each variant compiled within ``timeout_s`` (the others: host check)."""
    from triton_kiln.sandbox import compare_kernel as kernel

    found: dict[str, dict[str, Any]] = {}
    for dtype, future in futures.items():
        try:
            artifact = future.result(timeout=timeout_s)
        except FutureTimeout:
            log.info("kiln: the output check's kernel for %s is not compiled yet: checked on the host", dtype)
            continue
        except Exception as exc:
            log.info(
                "kiln: the output check's kernel for %s failed to compile (%s): checked on the host",
                dtype,
                exc,
            )
            continue
        shared = {
            "key": artifact.key,
            "group": layout.triton_files(pool.store, artifact),
            "hash": str(artifact.metadata.get("hash", artifact.key)),
        }
        if dtype == kernel.FINGERPRINT:
            found[dtype] = shared | {
                "arg_names": list(kernel.FINGERPRINT_SIGNATURE),
                "signature": dict(kernel.FINGERPRINT_SIGNATURE),
                "constexprs": {"BLOCK": kernel.BLOCK},
            }
            continue
        kind, pointer = kernel.VARIANTS[dtype]
        found[dtype] = shared | {
            "arg_names": list(ARG_NAMES),
            "signature": kernel.signature(pointer),
            "constexprs": {"KIND": kind, "BLOCK": kernel.BLOCK},
        }
    return found

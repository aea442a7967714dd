"""What a tuning run is recorded, and looked up, under in the tuning database: its identity (the
kernel's source and configs, the key, the GPU, Triton's version) and the finished run's record."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.autotuner.compile_requests import Candidate
from triton_kiln.autotuner.gpu import device_identity
from triton_kiln.autotuner.plan import LocalDevice
from triton_kiln.tuning.results import ConfigResult, TuningRun


def run_identity(
    name: str,
    candidates: Sequence[Candidate],
    key: tuple[Any, ...],
    target: Any,
    device: LocalDevice | None = None,
) -> dict[str, str]:
    """The database's columns for a run of kernel ``name`` over ``candidates`` for ``key``: the
    kernel's source and configs (``kernel_key``), the key, the GPU (``device``, else the current
    one) and Triton's version."""
    device_name, capability = (device.name, device.capability) if device else device_identity(target)
    spec = candidates[0].request.spec
    configs = json.dumps([c.label for c in candidates])
    kernel_key = hashlib.sha256(f"{spec.identity}|{configs}".encode()).hexdigest()
    return {
        "kernel": name,
        "kernel_key": kernel_key,
        "key_repr": json.dumps([repr(v) for v in key]),
        "device_name": device_name,
        "capability": capability,
        "triton_version": triton_compat.triton_version(),
    }


def finished_run(
    identity: dict[str, str],
    results: tuple[ConfigResult, ...],
    best_label: str,
    default_label: str,
    wall_s: float,
    split: dict[str, float] | None,
    first_result_s: float | None,
    gpu_peak_bytes: int | None,
) -> TuningRun:
    """The :class:`TuningRun` a run that just finished is, as the database records it."""
    return TuningRun(
        kernel=identity["kernel"],
        kernel_key=identity["kernel_key"],
        key_repr=identity["key_repr"],
        device_name=identity["device_name"],
        capability=identity["capability"],
        triton_version=identity["triton_version"],
        results=results,
        best_label=best_label,
        default_label=default_label,
        started_at=time.time() - wall_s,
        wall_s=wall_s,
        first_result_s=first_result_s,
        split=split,
        gpu_peak_bytes=gpu_peak_bytes,
    )

"""What a tuning run is recorded (and looked up) under in the tuning database."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.autotuner.specialize import Candidate


def run_identity(
    name: str, candidates: Sequence[Candidate], key: tuple[Any, ...], target: Any
) -> dict[str, str]:
    """The database's columns for a run of kernel ``name`` over ``candidates`` for ``key``: the
    kernel's source and configs (``kernel_key``), the key, the GPU and Triton's version."""
    device_name, capability = device_identity(target)
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


def device_identity(target: Any) -> tuple[str, str]:
    """The current GPU's name and capability; without one (a bencher that needs none), the target."""
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(device)
            return torch.cuda.get_device_name(device), f"{major}.{minor}"
    except ImportError:
        pass
    return f"no GPU ({target.backend} target)", str(target.arch)

"""What a tuning run is recorded (and looked up) under in the tuning database."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triton_kiln import triton_compat
from triton_kiln.autotuner.specialize import Candidate
from triton_kiln.errors import NoGPUError
from triton_kiln.tuning.results import ConfigResult, TuningRun

if TYPE_CHECKING:
    from triton_kiln.autotuner.autotuner import Autotuner


@dataclass(frozen=True)
class LocalDevice:
    """The GPU a process tunes on: its kind (``name``, ``capability``: what a run is keyed by) and
    which physical GPU it is (``uuid``; ``""`` when unknown). Tests stand in a fake one here
    (``Autotuner._device``), with the bencher."""

    name: str
    capability: str
    uuid: str = ""


def local_device(target: Any) -> LocalDevice:
    """The current GPU (name, capability, uuid); without one (a bencher that needs none), the target."""
    name, capability = device_identity(target)
    uuid = ""
    try:
        import torch

        if torch.cuda.is_available():
            uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except (ImportError, AttributeError, RuntimeError):
        uuid = ""
    return LocalDevice(name, capability, uuid)


def tuning_device(tuner: Autotuner) -> LocalDevice:
    """The GPU a tuning run of ``tuner`` benchmarks on (a test's stand-in: ``tuner._device``).

    Raises :class:`~triton_kiln.errors.NoGPUError` before anything is recorded when there is none.
    """
    if tuner._device is not None:
        return tuner._device
    target = tuner._local_target()
    require_gpu(tuner, target)
    return local_device(target)


def require_gpu(tuner: Autotuner, target: Any, *, launch: bool = False) -> None:
    """:class:`~triton_kiln.errors.NoGPUError` unless this machine has a GPU of ``target``'s kind
    to benchmark ``tuner``'s configs on (or a test stands in a bencher that needs none); with
    ``launch``, to launch its one config on."""
    if tuner._bencher_factory is not None and not launch:
        return
    local = triton_compat.local_target()
    if local is not None and local.backend == target.backend:
        return
    name = tuner.base_fn.__name__
    wanted = f"{target.backend}:{target.arch}"
    here = "no GPU" if local is None else f"a {local.backend}:{local.arch} GPU, not a {target.backend} one"
    needs = (
        f"a call launches its one config on a {target.backend} GPU, so nothing ran"
        if launch
        else f"a tuning run benchmarks every config on a {target.backend} GPU, so nothing was tuned "
        "or recorded"
    )
    raise NoGPUError(
        f"kiln.autotune: {name} was called with target={wanted!r}, and this machine has {here}: "
        f"{needs}. To compile the configs without a GPU (into kiln's cache, for a GPU machine "
        f"later), use triton_kiln.precompile({name}, *args) or `kiln compile MODULE:{name} "
        f"--target {wanted}`; to {'launch' if launch else 'tune'}, call {name} on a machine with that GPU."
    )


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

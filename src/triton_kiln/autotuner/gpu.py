"""The GPU a tuning run benchmarks on: which one it is, and the check that this machine has one."""

from __future__ import annotations

from typing import Any

from triton_kiln import triton_compat
from triton_kiln.autotuner.plan import LocalDevice, Services, TuningPlan
from triton_kiln.errors import NoGPUError


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


def tuning_device(plan: TuningPlan, services: Services) -> LocalDevice:
    """The GPU a tuning run benchmarks on (a test's stand-in: ``services.device``).

    Raises :class:`~triton_kiln.errors.NoGPUError` before anything is recorded when there is none
    (unless a test stands in a bencher that needs none).
    """
    device = services.device()
    if device is not None:
        return device
    target = services.target()
    if services.stand_in() is None:
        require_gpu(plan.name, target)
    return local_device(target)


def require_gpu(name: str, target: Any, *, launch: bool = False) -> None:
    """:class:`~triton_kiln.errors.NoGPUError` unless this machine has a GPU of ``target``'s kind
    to benchmark kernel ``name``'s configs on; with ``launch``, to launch its one config on."""
    local = triton_compat.local_target()
    if local is not None and local.backend == target.backend:
        return
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

"""The errors :mod:`triton_kiln.inductor` raises into Inductor, and the one ``install()`` raises on a torch
it cannot route."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from triton_kiln.errors import JobFailure, KilnError


class InductorConfigCrashedError(KilnError, RuntimeError):
    """One config of an Inductor kernel could not be compiled: its kiln worker crashed, hung
    past the job timeout or passed the memory limit (``__cause__`` is kiln's
    :class:`~triton_kiln.errors.JobFailure`). Raised where Inductor compiles a single config (coordinate
    descent, runtime autotune), which then treats the config as failed."""

    def __init__(self, kernel: str, source_file: str, config: str, failure: JobFailure) -> None:
        self.kernel = kernel
        self.source_file = source_file
        self.config = config
        self.failure = failure
        super().__init__(
            f"Inductor kernel {kernel} ({source_file}): config {config} could not be compiled: {failure}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel, self.source_file, self.config, self.failure))


class InductorKernelError(KilnError, RuntimeError):
    """Every config of an Inductor kernel failed in kiln's pool (crashes, hangs, memory): the
    kernel cannot be compiled. Names the kernel, its generated source file and what each config
    died of (the signal, or the timeout)."""

    def __init__(self, kernel: str, source_file: str, failures: Sequence[tuple[str, JobFailure]]) -> None:
        self.kernel = kernel
        self.source_file = source_file
        self.failures = tuple(failures)
        what = "; ".join(f"config {config}: {_reason(failure)}" for config, failure in self.failures)
        super().__init__(
            f"Inductor kernel {kernel} (generated source {source_file}) has no config that compiled: "
            f"{what}. Every config's compile died in kiln's pool (the compiler crashed or hung), so "
            f"the graph cannot use this kernel; run the source file's kernel through triton.compile "
            f"alone to reproduce it, and report the printed assertion to Triton."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel, self.source_file, self.failures))


class InductorRuntimeAutotuneError(KilnError, RuntimeError):
    """Every config of an Inductor kernel failed when its runtime autotune timed it in kiln's
    sandbox with the call's inputs (a crash, an illegal memory access, a hang): the kernel is not
    run in your process, whose CUDA context it would break. Names the kernel and each config's
    failure."""

    def __init__(self, kernel: str, failures: Sequence[tuple[str, str]]) -> None:
        self.kernel = kernel
        self.failures = tuple(failures)
        what = "; ".join(f"config {config}: {failure}" for config, failure in self.failures)
        super().__init__(
            f"Inductor kernel {kernel}: every config failed when timed in kiln's sandbox with this "
            f"call's inputs ({what}), so it was not run here. Check the inputs this call passes "
            f"(indices in range, sizes as compiled); TORCH_LOGS=output_code shows the kernel's source."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel, self.failures))


def _reason(failure: JobFailure) -> str:
    """kiln's headline for the failure: signal or timeout, seconds, likely cause."""
    return failure.headline()


class InductorUnsupportedError(KilnError, RuntimeError):
    """This torch's Inductor lacks a private attribute kiln replaces (a release kiln does not
    support renamed or dropped it), so nothing is routed."""

    def __init__(self, torch_version: str, missing: list[str], outcome: str = "nothing is routed") -> None:
        self.torch_version = torch_version
        self.missing = missing
        super().__init__(
            f"kiln.inductor cannot route this torch's Inductor (torch {torch_version}): it has no "
            f"{', '.join(missing)}, which kiln replaces (kiln supports torch {SUPPORTED_TORCH}); "
            f"{outcome}. Use a supported torch, or leave KILN_INDUCTOR unset and call "
            "torch.compile without kiln.inductor.install()."
        )


SUPPORTED_TORCH = "2.11 and 2.13"
"""The torch releases whose Inductor kiln is tested against (docs/INDUCTOR.md, "Versions")."""

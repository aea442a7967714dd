"""Errors of kiln's Helion integration (subclasses of :class:`triton_kiln.errors.KilnError`; all pickle)."""

from __future__ import annotations

from typing import Any

from triton_kiln.errors import KilnError


class UnsupportedHelionError(KilnError, ImportError):
    """The installed Helion is not one whose private autotuner API kiln's adapter was written for."""

    def __init__(self, found: str, supported: tuple[str, ...], detail: str = "") -> None:
        self.found = found
        self.supported = supported
        self.detail = detail
        message = (
            f"triton_kiln.helion supports Helion {', '.join(supported)} (it adapts Helion's private "
            f"precompile API, which changes between releases); found Helion {found}"
        )
        if detail:
            message += f" ({detail})"
        message += (
            f". Install a supported one, e.g. pip install 'helion=={supported[-1]}', or run Helion "
            f"without kiln (its default fork precompile)."
        )
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.found, self.supported, self.detail))


class BaselineCompileError(KilnError):
    """The compile of Helion's reference config (its accuracy baseline) failed in kiln's pool.

    Helion compiles and runs that config in the autotuning process itself; kiln compiles it
    first in its pool, so a crash there is this error instead of a dead process.
    """

    def __init__(self, kernel: str, configs: tuple[str, ...], reason: str) -> None:
        self.kernel = kernel
        self.configs = configs
        self.reason = reason
        tried = "; ".join(configs)
        super().__init__(
            f"Helion's reference config for {kernel!r} (the accuracy baseline every candidate is "
            f"checked against) failed to compile in kiln's pool, so autotuning cannot start. "
            f"Tried: {tried}. Last failure: {reason}\n"
            f"The autotuning process was not affected. Pass "
            f"@helion.kernel(autotune_baseline_fn=...) (an eager PyTorch version of the kernel) to "
            f"skip the reference config, or report the compiler failure above to Triton."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel, self.configs, self.reason))


class SandboxCudaError(KilnError, RuntimeError):
    """A config's kernel hit a sticky CUDA error (an illegal memory access...) in kiln's benchmark
    sandbox. Its text holds the CUDA error's, so Helion classifies it as it classifies that error
    from its own benchmark worker: the config is skipped and the search goes on."""

    def __init__(self, job: str, error: str) -> None:
        self.job = job
        self.error = error
        super().__init__(
            f"{job} hit a sticky CUDA error in kiln's benchmark sandbox: {error}. The config was "
            f"skipped and the sandbox replaced; the autotuning process's CUDA context was not touched."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.error))

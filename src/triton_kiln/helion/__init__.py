"""kiln inside Helion: every config's Triton compile in kiln's crash-isolated pool and (unless
``KILN_HELION_SANDBOX=0``) every benchmark in kiln's sandbox process.

One line turns it on::

    import helion, triton_kiln.helion

    @helion.kernel(autotuner_fn=triton_kiln.helion.autotuner_fn)   # this kernel
    def softmax(x: torch.Tensor) -> torch.Tensor: ...

    triton_kiln.helion.install()                                    # or: every kernel of the process

Helion still generates the code, searches, builds its benchmark jobs and classifies failures;
kiln replaces its precompile step (a fork per config), compiles the reference config (the
accuracy baseline) before Helion runs it in-process, and (unless ``KILN_HELION_SANDBOX=0``) runs
Helion's benchmark jobs (timing, accuracy check against Helion's baseline output, final
selection) in kiln's call sandbox, each config as soon as its compile lands. A C++ ``abort()`` in
Triton's compiler (and, in the sandbox, an illegal memory access or a hang) then fails one
config, which Helion skips, instead of the autotuning process or its CUDA context. Binaries land
in the Triton cache directory Helion's benchmark reads, so nothing is compiled twice.

Data flow: :mod:`triton_kiln.helion.adapter`; every Helion name it uses, with the versions they
were read against: :mod:`triton_kiln.helion.compat`. Which pool and target: :func:`configure`
(:mod:`.config`). Also :mod:`.process` (a compile future as the process Helion waits on),
:mod:`.requests` (a captured launch as kiln's compile request; Triton's cache seeded),
:mod:`.sandbox_worker` (Helion's benchmark worker on kiln's sandbox), :mod:`.sandbox_jobs` (what
runs in the sandbox), :mod:`.stream` (benchmarks as compiles land), :mod:`.finalists` (kiln's
final round for Helion's finalists, ``KILN_HELION_FINAL_ROUND``) and :mod:`.errors`. Supported
Helion versions: ``SUPPORTED_HELION`` (1.5.0, 1.5.1; :mod:`.versions`).

Imports: Helion (in :mod:`.compat` only), kiln's public API (its pool), ``triton_compat`` and
the top-level errors; no part of kiln imports this package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from triton_kiln.helion.config import configure
from triton_kiln.helion.errors import BaselineCompileError, UnsupportedHelionError
from triton_kiln.helion.versions import SUPPORTED_HELION


def autotuner_fn(bound_kernel: Any, args: Sequence[object], **kwargs: object) -> Any:
    """Helion's ``autotuner_fn`` setting: Helion's default autotuner, compiling and benchmarking
    through kiln."""
    from triton_kiln.helion import adapter

    return adapter.autotuner_fn(bound_kernel, args, **kwargs)


def install() -> None:
    """Every Helion autotune of this process compiles and benchmarks through kiln (kiln's pool and
    benchmark sandbox start now, in the background)."""
    from triton_kiln.helion import adapter

    adapter.install()


def uninstall() -> None:
    """Back to Helion's own precompile and benchmark worker for autotunes started from now on."""
    from triton_kiln.helion import adapter

    adapter.uninstall()


def installed() -> bool:
    from triton_kiln.helion import adapter

    return adapter.installed()


__all__ = [
    "SUPPORTED_HELION",
    "BaselineCompileError",
    "UnsupportedHelionError",
    "autotuner_fn",
    "configure",
    "install",
    "installed",
    "uninstall",
]

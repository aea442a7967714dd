"""kiln: crash-proof, parallel compilation of Triton kernels.

Quick start::

    from triton_kiln import CompilePool, CompileRequest, GPUTarget

    with CompilePool() as pool:
        request = CompileRequest(my_kernel, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 1024},
                                 options={"num_warps": 4}, target=GPUTarget("cuda", 90, 32))
        artifact = pool.compile(request)          # CompiledArtifact: cubin + launch metadata
        kernel = pool.load_kernel(request, artifact)   # Triton CompiledKernel, no recompile

This package holds kiln's public names, each loaded from its part on first use (``import
triton_kiln`` imports neither Triton nor any part), and one package per part (docs/ARCHITECTURE.md):
compile requests, artifacts, the pool and the farm, the sandbox, the autotuner and tuning
results, the launcher and bundles, routing (``install``/``uninstall``), the integrations
(``inductor``, ``helion``) and the command line (``cli``). Packages import each other in one
direction only (``tests/test_import_graph.py``); the top-level modules (settings, errors,
files, framing, procs, notices, progress_bar, terminal, version) are shared by all of them.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# kiln's loggers are "kiln.*" (kiln.pool, kiln.autotune, ...). As the logging HOWTO asks of a
# library, kiln adds no handler but this one: the application decides what is shown. (Without
# it, an application with no logging set up would get kiln's WARNING lines on stderr through
# logging.lastResort.) To see kiln's lines: logging.basicConfig(level=logging.INFO), see
# docs/WATCHING.md.
logging.getLogger("kiln").addHandler(logging.NullHandler())

# Names are imported on first use, so that ``import triton_kiln`` (and a process that only loads a
# bundle) does not import Triton.
_LAZY: dict[str, str] = {
    "as_completed": "concurrent.futures",
    "Config": "triton",
    "CompiledArtifact": "triton_kiln.artifacts.artifact",
    "to_triton_kernel": "triton_kiln.artifacts.triton_files",
    "AutotuneError": "triton_kiln.autotuner",
    "Autotuner": "triton_kiln.autotuner",
    "autotune": "triton_kiln.autotuner",
    "precompile": "triton_kiln.autotuner",
    "Bundle": "triton_kiln.bundle",
    "BundleError": "triton_kiln.bundle",
    "BundleMissError": "triton_kiln.bundle",
    "load_bundle": "triton_kiln.bundle",
    "save_bundle": "triton_kiln.bundle",
    "CompilePool": "triton_kiln.pool",
    "PoolStats": "triton_kiln.pool",
    "get_pool": "triton_kiln.pool",
    "CompileRequest": "triton_kiln.compile.request",
    "Settings": "triton_kiln.settings",
    "ArtifactStore": "triton_kiln.artifacts.store",
    "CacheWarning": "triton_kiln.artifacts.store",
    "CacheWriteWarning": "triton_kiln.artifacts.store",
    "AutotuneArgumentWarning": "triton_kiln.autotuner.arguments",
    "GPUTarget": "triton_kiln.triton_compat",
    "KernelLauncher": "triton_kiln.launch",
    "JitCompileCrashedError": "triton_kiln.routing.jit",
    "install": "triton_kiln.routing.autotune",
    "uninstall": "triton_kiln.routing.autotune",
}
_ERRORS = (
    "ArtifactError",
    "CompileTimeoutError",
    "JobFailure",
    "KernelSpecError",
    "KilnError",
    "MissingMetadataError",
    "NoGPUError",
    "PoolClosedError",
    "RemoteCompileError",
    "RequestError",
    "SettingsError",
    "TargetError",
    "WorkerCrashedError",
    "WorkerMemoryError",
    "ZygoteDiedError",
    "ZygoteError",
)
_LAZY.update(dict.fromkeys(_ERRORS, "triton_kiln.errors"))

if TYPE_CHECKING:
    from concurrent.futures import as_completed

    from triton import Config

    from triton_kiln.artifacts.artifact import CompiledArtifact
    from triton_kiln.artifacts.store import ArtifactStore, CacheWarning, CacheWriteWarning
    from triton_kiln.artifacts.triton_files import to_triton_kernel
    from triton_kiln.autotuner import AutotuneError, Autotuner, autotune, precompile
    from triton_kiln.autotuner.arguments import AutotuneArgumentWarning
    from triton_kiln.bundle import Bundle, BundleError, BundleMissError, load_bundle, save_bundle
    from triton_kiln.compile.request import CompileRequest
    from triton_kiln.errors import (
        ArtifactError,
        CompileTimeoutError,
        JobFailure,
        KernelSpecError,
        KilnError,
        MissingMetadataError,
        NoGPUError,
        PoolClosedError,
        RemoteCompileError,
        RequestError,
        SettingsError,
        TargetError,
        WorkerCrashedError,
        WorkerMemoryError,
        ZygoteDiedError,
        ZygoteError,
    )
    from triton_kiln.launch import KernelLauncher
    from triton_kiln.pool import CompilePool, PoolStats, get_pool
    from triton_kiln.routing.jit import JitCompileCrashedError
    from triton_kiln.settings import Settings
    from triton_kiln.triton_compat import GPUTarget


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


from triton_kiln.version import __version__ as __version__  # noqa: E402

__all__ = [
    "ArtifactError",
    "ArtifactStore",
    "AutotuneArgumentWarning",
    "AutotuneError",
    "Autotuner",
    "Bundle",
    "BundleError",
    "BundleMissError",
    "CacheWarning",
    "CacheWriteWarning",
    "CompilePool",
    "CompileRequest",
    "CompileTimeoutError",
    "CompiledArtifact",
    "Config",
    "GPUTarget",
    "JitCompileCrashedError",
    "JobFailure",
    "KernelLauncher",
    "KernelSpecError",
    "KilnError",
    "MissingMetadataError",
    "NoGPUError",
    "PoolClosedError",
    "PoolStats",
    "RemoteCompileError",
    "RequestError",
    "Settings",
    "SettingsError",
    "TargetError",
    "WorkerCrashedError",
    "WorkerMemoryError",
    "ZygoteDiedError",
    "ZygoteError",
    "as_completed",
    "autotune",
    "get_pool",
    "install",
    "load_bundle",
    "precompile",
    "save_bundle",
    "to_triton_kernel",
    "uninstall",
]


def _check_environment() -> None:
    """At import, never raising (``triton_kiln.settings``): report ``KILN_*`` names that are not
    settings, once; with ``KILN_AUTOTUNE`` set, :func:`triton_kiln.routing.autotune.install_from_environment`;
    with ``KILN_INDUCTOR`` set (not in kiln's own processes),
    :func:`triton_kiln.inductor.install_from_environment`."""
    import os

    if not any(var.startswith("KILN_") for var in os.environ):
        return  # the common case costs no settings import, no parse and no Triton import
    from triton_kiln import settings

    settings.warn_unknown_variables()
    variables = settings.variables()
    if os.environ.get(variables["autotune"], "").strip() not in ("", "0"):
        from triton_kiln.routing.autotune import install_from_environment

        install_from_environment()
    if os.environ.get(variables["inductor"], "").strip() not in ("", "0") and not _in_kiln_child():
        from triton_kiln.inductor import install_from_environment as install_inductor

        install_inductor()


def _in_kiln_child() -> bool:
    """Whether this interpreter is one of kiln's own processes (a zygote, a sandbox): those never
    import torch, so ``KILN_INDUCTOR`` is for the caller only."""
    from triton_kiln.procs import in_kiln_child

    return in_kiln_child()


_check_environment()

"""kiln: crash-proof, parallel compilation of Triton kernels.

Quick start::

    from kiln import CompilePool, CompileRequest, GPUTarget

    with CompilePool() as pool:
        request = CompileRequest(my_kernel, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 1024},
                                 options={"num_warps": 4}, target=GPUTarget("cuda", 90, 32))
        artifact = pool.compile(request)          # CompiledArtifact: cubin + launch metadata
        kernel = pool.load_kernel(request, artifact)   # Triton CompiledKernel, no recompile
"""

from concurrent.futures import as_completed

from triton import Config

from kiln.artifact import CompiledArtifact, to_triton_kernel
from kiln.autotuner import AutotuneError, Autotuner, autotune
from kiln.bundle import load_bundle, precompile, save_bundle
from kiln.errors import (
    ArtifactError,
    CompileTimeoutError,
    JobFailure,
    KernelSpecError,
    KilnError,
    MissingMetadataError,
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
from kiln.pool import CompilePool, PoolStats, get_pool
from kiln.request import CompileRequest
from kiln.settings import Settings
from kiln.store import ArtifactStore, CacheWarning
from kiln.triton_compat import GPUTarget

__version__ = "0.1.0"

__all__ = [
    "ArtifactError",
    "ArtifactStore",
    "AutotuneError",
    "Autotuner",
    "CacheWarning",
    "CompilePool",
    "CompileRequest",
    "CompileTimeoutError",
    "CompiledArtifact",
    "Config",
    "GPUTarget",
    "JobFailure",
    "KernelSpecError",
    "KilnError",
    "MissingMetadataError",
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
    "load_bundle",
    "precompile",
    "save_bundle",
    "to_triton_kernel",
]

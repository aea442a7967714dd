"""Triton's own per-signature C launcher (Triton 3.5 and 3.6) and its CUDA driver utilities
(every version): their sources, and their build into Triton's cache ahead of the first launch
(:mod:`triton_kiln.launch.prebuild` calls these).

What Triton does on a kernel's first launch (``CompiledKernel._init_handles``)::

    CudaLauncher(src, metadata)                       (triton/backends/nvidia/driver.py)
      source = make_launcher(constants, signature, metadata.tensordesc_meta)
      compile_module_from_src(source, "__triton_launcher", library_dirs(), include_dirs, libraries)
        Triton's cache under sha256(source + platform_key()): hit -> load the .so
                                                          miss -> gcc (~0.26 s), store, load

The source depends only on the signature (``constants`` is passed but unused; every config of a
kernel shares one launcher), and on ``tensordesc_meta``, which only the compiled binary's
metadata holds (so a signature with tensor descriptors is left to Triton). Triton 3.7 builds no
launcher per signature (:func:`.versions.builds_launcher_per_signature`).

The driver utilities (``CudaUtils``: ``driver.c`` built as ``cuda_utils``, ~0.3 s of gcc) are
built the first time a process uses Triton's CUDA driver (its first launch, or its first load of
a binary), in 3.5-3.7 alike, where Triton's cache lacks them (a fresh cache: every first run of
a machine, every benchmark arm). Their module's init touches no CUDA.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

from triton_kiln.triton_compat.versions import builds_launcher_per_signature

LAUNCHER_MODULE = "__triton_launcher"
"""The module name ``CudaLauncher`` builds (part of the cached file's name)."""

DRIVER_UTILS_MODULE = "cuda_utils"
"""The module name ``CudaUtils`` builds from the NVIDIA backend's ``driver.c``."""


def launcher_source(src: Any, target: GPUTarget) -> str | None:
    """The C source ``CudaLauncher(src, metadata)`` hands ``compile_module_from_src`` when a
    kernel compiled from ``src`` (an ``ASTSource``, or anything with ``signature``, ``constants``
    and ``fn.arg_names``) for ``target`` is first launched.

    ``None`` where no such build will happen or its source is not known before the compile: this
    Triton builds no per-signature launcher (3.7), ``target`` is not CUDA, or the signature has
    tensor descriptors (their lowering is in the compiled binary's metadata).
    """
    if target.backend != "cuda" or not builds_launcher_per_signature():
        return None
    signature = dict(src.signature.items())  # as CudaLauncher copies it
    if _has_tensor_descriptor(signature.values()):
        return None
    from triton.backends.nvidia import driver

    # exactly CudaLauncher.__init__'s arguments (tensordesc_meta is None or [] without descriptors)
    constants = src.constants if hasattr(src, "constants") else {}
    arg_names = src.fn.arg_names
    by_path = {((arg_names.index(k),) if isinstance(k, str) else k): v for k, v in constants.items()}
    return str(driver.make_launcher(by_path, signature, None))


def driver_utils_source() -> str | None:
    """The C source ``CudaUtils()`` hands ``compile_module_from_src`` (``None``: this Triton has
    no NVIDIA backend's ``driver.c``)."""
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return None
    path = Path(driver.dirname) / "driver.c"
    return path.read_text() if path.is_file() else None


def build_launcher(source: str) -> bool:
    """Build ``source`` (from :func:`launcher_source`) into Triton's cache with Triton's own
    ``compile_module_from_src`` and arguments, as ``CudaLauncher`` would; ``True`` when Triton's
    cache holds it now (built here, or already there). ``False`` where it cannot be built here:
    no ``libcuda.so.1`` (a machine without a GPU driver), no C compiler, gcc failed."""
    return build_module(source, LAUNCHER_MODULE)


def build_driver_utils() -> bool:
    """Build Triton's driver utilities (:func:`driver_utils_source`) into its cache, as
    ``CudaUtils()`` would; ``False`` where they cannot be built here (as :func:`build_launcher`)."""
    source = driver_utils_source()
    return source is not None and build_module(source, DRIVER_UTILS_MODULE)


def build_module(source: str, name: str) -> bool:
    """``compile_module_from_src(source, name)`` with the NVIDIA driver's directories and
    libraries, as Triton's driver calls it; ``True`` when Triton's cache holds the module now."""
    from triton.backends.nvidia import driver

    try:
        driver.compile_module_from_src(
            src=source,
            name=name,
            library_dirs=driver.library_dirs(),  # asserts that libcuda.so.1 is found
            include_dirs=driver.include_dirs,
            libraries=driver.libraries,
        )
    except (AssertionError, OSError, RuntimeError, subprocess.SubprocessError):
        return False
    return True


def _has_tensor_descriptor(types: Iterable[Any]) -> bool:
    for kind in types:
        if isinstance(kind, tuple):
            if _has_tensor_descriptor(kind):
                return True
        elif isinstance(kind, str) and kind.startswith("tensordesc"):
            return True
    return False

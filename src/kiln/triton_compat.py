"""Every place kiln touches Triton's internals, in one module.

kiln is pinned to Triton 3.6.0 and written to work on 3.5-3.9 where the API allows. What
differs between versions is isolated here: where ``GPUTarget`` lives, the cache-invalidating
environment variables, Triton's key (``triton_key``), the backend options class and the
metadata a launcher reads. Known limits are documented in the README's compatibility table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

__all__ = [
    "ASTSource",
    "GPUTarget",
    "backend_option_names",
    "cache_invalidating_env",
    "local_target",
    "make_backend",
    "seed_triton_key",
    "triton_key",
    "triton_version",
]


def triton_version() -> str:
    return str(triton.__version__)


def make_backend(target: GPUTarget) -> Any:
    from triton.compiler.compiler import make_backend as _make_backend

    return _make_backend(target)


@functools.cache
def backend_option_names(target: GPUTarget) -> frozenset[str]:
    """Names of the compile options Triton's backend for ``target`` accepts (``num_warps``...)."""
    backend = make_backend(target)
    options = backend.parse_options({})
    names = {f.name for f in dataclasses.fields(options)}
    # Derived from the target, not chosen by callers.
    return frozenset(names - {"arch", "backend_name", "warp_size"})


def cache_invalidating_env() -> dict[str, str]:
    """The environment variables Triton folds into its own cache key, with current values."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        values = get_cache_invalidating_env_vars()
        return {str(k): str(v) for k, v in dict(values).items()}
    except ImportError:  # pragma: no cover - older Triton computes this in Python
        from triton.knobs import compilation

        return {k: str(v) for k, v in compilation.cache_invalidating_env_vars().items()}  # pragma: no cover


def triton_env() -> dict[str, str]:
    """Every ``TRITON_*`` variable of this process (sent with each job to the worker)."""
    return {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}


def local_target() -> GPUTarget | None:
    """The local GPU's target, or ``None`` when this machine has no usable GPU."""
    try:
        from triton.runtime import driver

        target = driver.active.get_current_target()
    except Exception:  # no driver, no device, no CUDA library: all mean "no GPU here"
        return None
    return target if isinstance(target, GPUTarget) else None


# ----------------------------------------------------------------------------- Triton's key

_KEY_FILE_VERSION = 1


def _triton_dir() -> Path:
    return Path(triton.__file__).resolve().parent


def _fingerprint() -> str:
    """A cheap stand-in for Triton's key: path, size and mtime of every file the key hashes."""
    root = _triton_dir()
    entries: list[str] = [triton_version()]
    for sub in ("compiler", "backends", "language", "_C", "runtime"):
        base = root / sub
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix in (".py", ".so", ".bc") and path.is_file():
                stat = path.stat()
                entries.append(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


_TRITON_KEY: str | None = None


def triton_key(cache_dir: Path | None = None) -> str:
    """Triton's own key (a hash of its compiler, including the 500 MB ``libtriton.so``).

    Computing it costs about 2 s of CPU in a fresh process, so kiln keeps it on disk next to
    its artifacts, validated by the size and mtime of every file it covers.
    """
    global _TRITON_KEY
    if _TRITON_KEY is not None:
        return _TRITON_KEY
    fingerprint = _fingerprint()
    path = None
    if cache_dir is not None:
        path = cache_dir / f"triton-key-v{_KEY_FILE_VERSION}.json"
        try:
            record = json.loads(path.read_text())
            if record.get("fingerprint") == fingerprint and isinstance(record.get("key"), str):
                _TRITON_KEY = record["key"]
                return _TRITON_KEY
        except (OSError, ValueError):
            pass
    from triton.runtime.cache import triton_key as _compute

    key = str(_compute())
    _TRITON_KEY = key
    if path is not None:
        from kiln.files import atomic_write

        with contextlib.suppress(OSError):
            atomic_write(path, json.dumps({"fingerprint": fingerprint, "key": key}).encode())
    return key


def seed_triton_key(key: str) -> bool:
    """Make Triton's own ``triton_key()`` return ``key`` in this process, without hashing.

    Triton computes its key on a process's first compile by hashing its sources and the
    500 MB ``libtriton.so`` (0.3-0.5 s of CPU). The zygote already holds that key, read from
    kiln's fingerprint-checked file, so it installs it in place of Triton's cached function
    before its warm-up compile. Every module of Triton that imported ``triton_key`` by name
    gets the replacement. Returns ``False`` (and changes nothing) when this Triton has no
    ``triton.runtime.cache.triton_key`` of the expected cached kind, or when Triton already
    computed its key here.
    """
    try:
        import triton.runtime.cache as cache_mod
    except ImportError:  # pragma: no cover - layout of another Triton version
        return False
    original = getattr(cache_mod, "triton_key", None)
    cache_info = getattr(original, "cache_info", None)
    if original is None or cache_info is None:
        return False
    if cache_info().currsize:
        return False  # already computed in this process: nothing to save

    @functools.lru_cache
    def seeded() -> str:
        return key

    for name, module in list(sys.modules.items()):
        is_triton = name == "triton" or name.startswith("triton.")
        if is_triton and getattr(module, "triton_key", None) is original:
            setattr(module, "triton_key", seeded)  # noqa: B010 - typed as ModuleType
    return True


# --- validation ---
# Targets and signature types checked in the caller, before Triton sees them: Triton's own
# errors for these come late (in a worker) or name the wrong cause (a string arch is reported
# as a bad TRITON_OVERRIDE_ARCH).

CUDA_ARCHS: tuple[int, ...] = (70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)
"""CUDA compute capabilities Triton 3.6's NVIDIA backend compiles for (its ptxas accepts them)."""

SCALAR_TYPES: tuple[str, ...] = (
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
    "fp16", "bf16", "fp32", "fp64", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp8e4b15",
)  # fmt: skip
"""Triton's scalar type names in signatures (``*`` before one makes a pointer: ``*fp16``)."""


def target_problem(target: GPUTarget) -> str | None:
    """Why ``target`` cannot be compiled for (``None``: it can), saying how to write it."""
    backend, arch, warp_size = target.backend, target.arch, target.warp_size
    if not isinstance(backend, str) or not backend:
        return f"GPUTarget backend must be a string such as 'cuda', got {backend!r}"
    if isinstance(warp_size, bool) or not isinstance(warp_size, int) or warp_size <= 0:
        return f"GPUTarget warp_size must be a positive int (32 on NVIDIA GPUs), got {warp_size!r}"
    if backend != "cuda":
        return None
    if isinstance(arch, bool) or not isinstance(arch, int):
        digits = "".join(c for c in str(arch) if c.isdigit())
        example = digits if digits else "90"
        return (
            f"GPUTarget arch must be an int compute capability such as 90 (for sm_90), got {arch!r}; "
            f"write GPUTarget('cuda', {example}, {warp_size})"
        )
    if arch not in CUDA_ARCHS:
        return (
            f"GPUTarget arch {arch} is not a CUDA compute capability Triton {triton_version()} compiles "
            f"for; supported: {', '.join(map(str, CUDA_ARCHS))} (90 is an H100/H200, 80 an A100)"
        )
    return None


def signature_type_problem(kind: str) -> str | None:
    """Why ``kind`` is not a type Triton accepts in a signature (``None``: it is)."""
    base = kind.lstrip("*")
    if kind.startswith("*") and base.startswith("k"):
        base = base[1:]  # "*kfp16": a pointer to constant data
    if kind == "constexpr" or kind.startswith(("tensordesc<", "(")):
        return None  # Triton's own parser checks these (tensor descriptors, tuples)
    if base in SCALAR_TYPES and (kind.startswith("*") or base == kind):
        return None
    try:  # never stricter than Triton: accept whatever its own parser accepts
        from triton.language import str_to_ty

        str_to_ty(kind, None)
        return None
    except Exception:  # any failure of Triton's parser means "not a type"
        pass
    return (
        f"{kind!r} is not a Triton type; use one of {', '.join(SCALAR_TYPES)}, a pointer to one "
        f"('*fp16', '*i32'), or 'constexpr'"
    )

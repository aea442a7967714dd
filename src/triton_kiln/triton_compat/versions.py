"""What differs between the Triton versions kiln supports, and checks of targets and types
against what this Triton accepts."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget

from triton_kiln.triton_compat.core import triton_version

# --- Triton version differences ---
# Everything below names a difference between the Triton versions kiln supports (see
# docs/TRITON_VERSIONS.md). Code elsewhere calls these helpers instead of testing versions.

SUPPORTED_TRITON = ("3.5.1", "3.6.0", "3.7.1")
"""Versions CI runs the compile-pool and key tests on (.ci/run; pyproject's range covers them)."""

StagesEditor = Callable[[Any, dict[str, Any], Any, Any, Any], None]
"""``edit(backend, stages, options, language, capability)``: rewrites Triton's stage table."""


def triton_version_tuple() -> tuple[int, int, int]:
    """``triton.__version__`` as numbers (``"3.7.1+git..."`` -> ``(3, 7, 1)``)."""
    parts: list[int] = []
    for piece in triton_version().split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def stages_hook_is_keyed() -> bool:
    """Whether this Triton asks the stage hook for a cache key (``hook()``; Triton >= 3.7)."""
    return triton_version_tuple() >= (3, 7, 0)


def stages_hook_cache_key() -> str:
    """What Triton adds to a compile's cache key for the installed stage hook: its key on Triton
    >= 3.7 (``triton.compile`` appends ``hook()[0]``), ``""`` without a hook or before 3.7."""
    if not stages_hook_is_keyed():
        return ""
    import triton

    hook = getattr(triton.knobs.runtime, "add_stages_inspection_hook", None)
    if hook is None:
        return ""
    key, _hash = hook()
    return str(key)


def builds_launcher_per_signature() -> bool:
    """Whether this Triton's NVIDIA driver builds a C launcher per kernel signature with gcc
    (``CudaLauncher`` -> ``make_launcher`` -> ``compile_module_from_src``, on a kernel's first
    launch: Triton 3.5 and 3.6). Triton 3.7 launches every kernel through one prebuilt launcher."""
    return triton_version_tuple() < (3, 7, 0)


def install_stages_hook(edit: StagesEditor, key: str) -> Callable[[], None]:
    """Chain ``edit`` onto Triton's ``knobs.runtime.add_stages_inspection_hook``.

    The hook is called in two forms, depending on the version:

    * every version: ``hook(backend, stages, options, language, capability)`` from the
      backend's ``add_stages``, to rewrite the compile pipeline (what ``edit`` does);
    * Triton >= 3.7: also ``hook()``, which must return ``(cache_key, hash)``; Triton adds the
      key to its compile cache key and the hash to the JIT's specialization key, so binaries
      built with a rewritten pipeline never mix with plain ones. ``key`` names ``edit``.

    A hook already installed (by kiln or anyone) keeps running first, and its key is kept.
    Triton 3.5 has no such knob: there ``edit`` wraps each backend's ``add_stages`` instead
    (same arguments, same effect; 3.5 has no hook key either). Returns a function that puts
    back what was there before (for tests).
    """
    import triton

    if not hasattr(triton.knobs.runtime, "add_stages_inspection_hook"):
        return _wrap_backend_add_stages(edit)
    previous = triton.knobs.runtime.add_stages_inspection_hook

    def hook(*args: Any) -> Any:
        if not args:  # Triton >= 3.7 asks for the hook's cache key
            prev_key, prev_hash = previous() if previous is not None else ("", "")
            full_key = f"{prev_key}{key}"
            return full_key, hashlib.sha256(f"{prev_hash}:{full_key}".encode()).hexdigest()
        if previous is not None:
            previous(*args)
        edit(*args)
        return None

    triton.knobs.runtime.add_stages_inspection_hook = hook

    def remove() -> None:
        triton.knobs.runtime.add_stages_inspection_hook = previous

    return remove


def _wrap_backend_add_stages(edit: StagesEditor) -> Callable[[], None]:
    """Triton 3.5: run ``edit`` after every backend's ``add_stages`` (it has no stage hook)."""
    from triton.backends import backends

    originals: list[tuple[Any, Any]] = []
    for backend in backends.values():
        cls = backend.compiler
        original = cls.add_stages
        originals.append((cls, original))

        def add_stages(
            self: Any, stages: dict[str, Any], options: Any, language: Any, _original: Any = original
        ) -> None:
            _original(self, stages, options, language)
            parse_arch = getattr(self, "_parse_arch", None)
            capability = parse_arch(options.arch) if parse_arch is not None else None
            edit(self, stages, options, language, capability)

        cls.add_stages = add_stages

    def remove() -> None:
        for cls, original in originals:
            cls.add_stages = original

    return remove


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


def scratch_allocator_sources() -> tuple[Any, Any] | None:
    """Where Triton's launcher looks up the allocators of a binary's global and profile scratch
    at each launch, for kiln's C launcher to look them up the same way (``None``: Triton cannot
    be imported, so no allocator can have been set).

    Global: ``triton.runtime._allocation._allocator``, a ``ContextVar`` (every version; what
    ``triton.set_allocator`` sets, in the calling context). Profile: ``_profile_allocator``, a
    ``ContextVar`` in Triton 3.5 and a wrapper object in 3.6 and 3.7 whose call forwards to the
    allocator ``set_profile_allocator`` set. The C launcher reads a ``ContextVar`` at each launch
    and calls anything else directly.
    """
    try:
        from triton.runtime import _allocation
    except ImportError:
        return None
    return _allocation._allocator, _allocation._profile_allocator


def set_scratch_allocators(allocator: Any) -> None:
    """Make ``allocator(size, align, stream)`` the global and the profile scratch allocator of
    this context (``triton.set_allocator`` and ``set_profile_allocator``; every version)."""
    import triton
    from triton.runtime import _allocation

    triton.set_allocator(allocator)
    _allocation.set_profile_allocator(allocator)


_GFX_NAME = re.compile(r"gfx(9[0-9][0-9a-f]|1[0-9][0-9][0-9a-f])")
"""An AMD GPU's LLVM name as Triton's HIP backend parses it: gfx9xx (gfx90a, gfx942, gfx950) or
gfx1xxx (gfx1100, gfx1201)."""


def target_problem(target: GPUTarget) -> str | None:
    """Why ``target`` cannot be compiled for (``None``: it can), saying how to write it."""
    backend, arch, warp_size = target.backend, target.arch, target.warp_size
    if not isinstance(backend, str) or not backend:
        return f"GPUTarget backend must be a string such as 'cuda', got {backend!r}"
    if isinstance(warp_size, bool) or not isinstance(warp_size, int) or warp_size <= 0:
        return f"GPUTarget warp_size must be a positive int (32 on NVIDIA GPUs), got {warp_size!r}"
    if backend == "hip":
        if isinstance(arch, str) and _GFX_NAME.fullmatch(arch):
            return None
        return (
            f"GPUTarget arch {arch!r} is not an AMD GPU name such as gfx942 (MI300), gfx90a (MI200) "
            f"or gfx1100; write GPUTarget('hip', 'gfx942', 64)"
        )
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

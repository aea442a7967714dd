"""Every place kiln touches Triton's internals, in one module.

kiln supports Triton >=3.5.1,<3.8 (tested: 3.5.1, 3.6.0, 3.7.1; docs/TRITON_VERSIONS.md). What
differs between versions is isolated here (the stage hook: section "Triton version differences"
at the end); so are the internals that could move: where ``GPUTarget`` lives, the cache-invalidating
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
from collections.abc import Callable
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
    "install_stages_hook",
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

"""Triton's targets, backends, environment and key: what every compile names."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget


def triton_version() -> str:
    import triton

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


@functools.cache
def any_backend_option_names() -> frozenset[str]:
    """The fields of every backend's options class Triton has (``CUDAOptions``, ``HIPOptions``):
    what a ``triton.Config``'s kwargs may set besides the kernel's parameters (``waves_per_eu``)."""
    names: set[str] = set()
    for module, cls in (
        ("triton.backends.nvidia.compiler", "CUDAOptions"),
        ("triton.backends.amd.compiler", "HIPOptions"),
    ):
        try:
            options = getattr(__import__(module, fromlist=[cls]), cls)
        except (ImportError, AttributeError):
            continue
        names.update(getattr(options, "__dataclass_fields__", {}))
    return frozenset(names)


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
    from triton.backends.compiler import GPUTarget

    try:
        from triton.runtime import driver

        target = driver.active.get_current_target()
    except Exception:  # no driver, no device, no CUDA library: all mean "no GPU here"
        return None
    return target if isinstance(target, GPUTarget) else None


# ----------------------------------------------------------------------------- Triton's key

_KEY_FILE_VERSION = 2  # 2: the fingerprint names libtriton.so's path, size, mtime and inode
KEY_FILE = f"triton-key-v{_KEY_FILE_VERSION}.json"
"""The file in kiln's cache directory that keeps Triton's key."""


def _triton_dir() -> Path:
    import triton

    return Path(triton.__file__).resolve().parent


def _library_identity(root: Path) -> str:
    """``libtriton.so``'s identity: absolute path, size, mtime and inode (a reinstalled or
    upgraded Triton writes a new file: a new inode even where size and mtime look the same)."""
    import sysconfig

    suffix = str(sysconfig.get_config_var("EXT_SUFFIX") or ".so").split(".")[-1]
    library = root / "_C" / f"libtriton.{suffix}"
    try:
        stat = library.stat()
    except OSError:
        return f"{library}:absent"
    return f"{library}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def _fingerprint() -> str:
    """A cheap stand-in for Triton's key: ``libtriton.so``'s identity (:func:`_library_identity`),
    and path, size and mtime of every other file the key hashes. It costs a few milliseconds of
    ``stat`` calls; the key itself (a sha256 of the 500 MB library) about 2 s of CPU."""
    root = _triton_dir()
    entries: list[str] = [triton_version(), _library_identity(root)]
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
_TRITONS_OWN: Any = None  # Triton's own triton_key(), kept when kiln seeds its replacement
_KEY_LOCK = threading.Lock()  # one computation per process: a second asker waits for the first
os.register_at_fork(after_in_child=lambda: globals().update(_KEY_LOCK=threading.Lock()))


def triton_key(cache_dir: Path | None = None) -> str:
    """Triton's own key (a hash of its compiler, including the 500 MB ``libtriton.so``).

    Computing it costs about 2 s of CPU in a fresh process, so kiln computes it once per
    machine (per cache directory: the default one is the user's) and keeps it on disk next to
    its artifacts, validated by :func:`_fingerprint` (``libtriton.so``'s path, size, mtime and
    inode, the size and mtime of every other file it covers): a later process reads it and
    hashes nothing; a new Triton invalidates it.
    """
    with _KEY_LOCK:
        return _triton_key(cache_dir)


def _triton_key(cache_dir: Path | None) -> str:
    global _TRITON_KEY
    stored = stored_triton_key(cache_dir)
    if stored is not None:
        return stored
    fingerprint = _fingerprint()
    path = None if cache_dir is None else cache_dir / KEY_FILE
    compute = _TRITONS_OWN
    if compute is None:
        import triton.runtime.cache as cache_mod

        compute = cache_mod.triton_key
    key = str(compute())
    _TRITON_KEY = key
    if path is not None:
        from triton_kiln.files import atomic_write

        with contextlib.suppress(OSError):
            atomic_write(path, json.dumps({"fingerprint": fingerprint, "key": key}).encode())
    return key


def stored_triton_key(cache_dir: Path | None) -> str | None:
    """The key this process already holds, or the one kept in ``cache_dir`` when its fingerprint
    still matches (a few ms of ``stat`` calls); ``None`` otherwise. Never hashes anything."""
    global _TRITON_KEY
    if _TRITON_KEY is not None:
        return _TRITON_KEY
    if cache_dir is None:
        return None
    try:
        record = json.loads((cache_dir / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return None
    if record.get("fingerprint") != _fingerprint():
        return None
    _TRITON_KEY = record["key"]
    return _TRITON_KEY


_CALLER_SEEDED = False


def seed_caller_triton_key(cache_dir: Path | None) -> bool:
    """Give this process's own Triton kiln's key (:func:`seed_triton_key`), once per process, so
    that what the caller compiles itself (a library's plain ``@triton.jit`` kernels) never hashes
    ``libtriton.so`` a second time. Nothing is read or hashed here: Triton's first ask gets
    :func:`triton_key` (the key held, or kept in ``cache_dir`` with a matching fingerprint: a few
    ms; else computed once, and a computation already under way in kiln's prewarm thread is
    waited for rather than repeated). ``False`` when this Triton cannot be seeded."""
    global _CALLER_SEEDED
    if _CALLER_SEEDED:
        return True
    _CALLER_SEEDED = True
    return seed_triton_key(functools.partial(triton_key, cache_dir))


def seed_triton_key(key: str | Callable[[], str]) -> bool:
    """Make Triton's own ``triton_key()`` return ``key`` (or ``key()``, asked once, at Triton's
    first ask) in this process, without hashing.

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
    global _TRITONS_OWN
    if _TRITONS_OWN is None:
        _TRITONS_OWN = original  # kiln's triton_key computes with it (never with a seeded one)

    @functools.lru_cache
    def seeded() -> str:
        return key if isinstance(key, str) else key()

    for name, module in list(sys.modules.items()):
        is_triton = name == "triton" or name.startswith("triton.")
        if is_triton and getattr(module, "triton_key", None) is original:
            setattr(module, "triton_key", seeded)  # noqa: B010 - typed as ModuleType
    return True

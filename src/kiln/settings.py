"""kiln's settings: one typed record, read from ``KILN_*`` environment variables.

Every knob kiln has lives here. :func:`current` returns the settings in force: the values
from the environment, overridden by any active :func:`scope` (used by tests and by callers
who want a setting for one block of code)::

    with kiln.settings.scope(job_timeout_s=5.0):
        pool = CompilePool()          # this pool sees a 5 s timeout

A malformed variable raises :class:`~kiln.errors.SettingsError` naming the variable, its
value and what was expected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.errors import SettingsError


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


@dataclass(frozen=True)
class Settings:
    """Everything that tunes kiln's behaviour. Each field names its environment variable."""

    workers: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    """``KILN_WORKERS``: compile worker processes (default: one per CPU core)."""

    job_timeout_s: float = 600.0
    """``KILN_JOB_TIMEOUT_S``: seconds a single compile may run before its worker is killed."""

    memory_limit_mb: int | None = None
    """``KILN_MEMORY_LIMIT_MB``: resident memory a worker (with its children) may use; unset = no limit."""

    memory_poll_s: float = 0.05
    """``KILN_MEMORY_POLL_S``: how often the memory limit is checked."""

    cache_dir: Path = field(default_factory=_default_cache_dir)
    """``KILN_CACHE_DIR``: where compiled artifacts are stored (default ``~/.cache/kiln``)."""

    use_disk_cache: bool = True
    """``KILN_DISK_CACHE``: ``0`` keeps artifacts in memory only."""

    zygote_start_timeout_s: float = 120.0
    """``KILN_ZYGOTE_START_TIMEOUT_S``: seconds the zygote may take to import Triton and warm up."""

    zygote_restarts: int = 3
    """``KILN_ZYGOTE_RESTARTS``: consecutive failed zygote starts before the pool gives up."""

    stderr_tail_lines: int = 20
    """``KILN_STDERR_TAIL_LINES``: lines of a dead worker's stderr quoted in its error."""

    progress: bool | None = None
    """``KILN_PROGRESS``: ``1`` always shows progress bars, ``0`` never; unset = on a terminal only."""

    tuning_db: Path | None = None
    """``KILN_TUNING_DB``: the tuning database file (default ``<cache_dir>/tuning.sqlite3``)."""

    use_tuning_db: bool = True
    """``KILN_USE_TUNING_DB``: ``0`` keeps tuning results in memory only (as ``triton.autotune``)."""

    sandbox: bool = True
    """``KILN_SANDBOX``: benchmark configs in a separate GPU process (``0``: in the caller's process)."""

    native_sandbox: bool = True
    """``KILN_NATIVE_SANDBOX``: benchmark in the torch-free sandbox (``0``: the torch sandbox only)."""

    bench_timeout_s: float = 60.0
    """``KILN_BENCH_TIMEOUT_S``: seconds one config's benchmark may take before the sandbox is killed."""

    fast_launch: bool = True
    autotune: bool = False  # route triton.autotune through kiln at `import kiln` (kiln.install())
    """``KILN_FAST_LAUNCH``: ``0`` launches tuned kernels through Triton's launcher, not kiln's."""

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def triton_key_dir(self) -> Path | None:
        """Where kiln keeps Triton's key for compile keys: ``cache_dir`` (``None``: no disk cache)."""
        return self.cache_dir if self.use_disk_cache else None


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise ValueError(value)
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError(value)
    return number


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


_ENV: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "workers": ("KILN_WORKERS", _positive_int, "a positive integer"),
    "job_timeout_s": ("KILN_JOB_TIMEOUT_S", _positive_float, "a positive number of seconds"),
    "memory_limit_mb": ("KILN_MEMORY_LIMIT_MB", _positive_int, "a positive integer (MiB)"),
    "memory_poll_s": ("KILN_MEMORY_POLL_S", _positive_float, "a positive number of seconds"),
    "cache_dir": ("KILN_CACHE_DIR", lambda v: Path(v).expanduser(), "a directory path"),
    "use_disk_cache": ("KILN_DISK_CACHE", _bool, "0 or 1"),
    "zygote_start_timeout_s": (
        "KILN_ZYGOTE_START_TIMEOUT_S",
        _positive_float,
        "a positive number of seconds",
    ),
    "zygote_restarts": ("KILN_ZYGOTE_RESTARTS", _positive_int, "a positive integer"),
    "stderr_tail_lines": ("KILN_STDERR_TAIL_LINES", _positive_int, "a positive integer"),
    "progress": ("KILN_PROGRESS", _bool, "0 or 1"),
    "tuning_db": ("KILN_TUNING_DB", lambda v: Path(v).expanduser(), "a file path"),
    "use_tuning_db": ("KILN_USE_TUNING_DB", _bool, "0 or 1"),
    "sandbox": ("KILN_SANDBOX", _bool, "0 or 1"),
    "native_sandbox": ("KILN_NATIVE_SANDBOX", _bool, "0 or 1"),
    "bench_timeout_s": ("KILN_BENCH_TIMEOUT_S", _positive_float, "a positive number of seconds"),
    "fast_launch": ("KILN_FAST_LAUNCH", _bool, "0 or 1"),
    "autotune": ("KILN_AUTOTUNE", _bool, "0 or 1"),
}


def from_env(environ: dict[str, str] | None = None) -> Settings:
    """Build settings from ``KILN_*`` variables; unset or empty variables keep their defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, (var, parse, expected) in _ENV.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue
        try:
            values[name] = parse(raw)
        except ValueError:
            raise SettingsError(f"{var}={raw!r} is not valid: expected {expected}.") from None
    return Settings(**values)


_scopes: list[tuple[object, dict[str, Any]]] = []  # (token, overrides), innermost last
_scopes_lock = threading.Lock()


def current() -> Settings:
    """The settings in force: the environment, then every active :func:`scope`, innermost last."""
    settings = from_env()
    with _scopes_lock:
        overrides = [dict(layer) for _, layer in _scopes]
    for layer in overrides:
        settings = settings.replace(**layer)
    return settings


def default_triton_key_dir() -> Path | None:
    """:attr:`Settings.triton_key_dir` of the settings in force (a ``CompileRequest``'s default)."""
    return current().triton_key_dir


@contextlib.contextmanager
def scope(**overrides: Any) -> Iterator[Settings]:
    """Override settings for the duration of a ``with`` block (process-wide, nestable)."""
    unknown = set(overrides) - {f.name for f in dataclasses.fields(Settings)}
    if unknown:
        raise SettingsError(
            f"unknown setting(s) {sorted(unknown)}; known: {[f.name for f in dataclasses.fields(Settings)]}"
        )
    token = object()
    with _scopes_lock:
        _scopes.append((token, overrides))
    try:
        yield current()
    finally:
        with _scopes_lock:
            _scopes[:] = [entry for entry in _scopes if entry[0] is not token]

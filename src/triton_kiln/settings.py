"""kiln's settings: one typed record, read from ``KILN_*`` environment variables.

Every knob kiln has lives here. :func:`current` returns the settings in force: the values
from the environment, overridden by any active :func:`scope` (used by tests and by callers
who want a setting for one block of code)::

    with triton_kiln.settings.scope(job_timeout_s=5.0):
        pool = CompilePool()          # this pool sees a 5 s timeout

A malformed variable raises :class:`~triton_kiln.errors.SettingsError` naming the variable, its
value and what was expected; so does a value out of its range, however it was given (the
environment, :func:`scope`, a ``CompilePool`` argument): numbers must be finite and within the
bounds in ``_RANGES``, the cache directory a directory (or creatable), the tuning database a
file (or creatable), never a directory.

When the error comes: settings are read where a kiln object is made (a pool, an autotuner, a
bundle, a CLI command that needs them), never at ``import triton_kiln``; an import with
``KILN_AUTOTUNE`` set reads only that variable (see :mod:`triton_kiln.routing`). A ``KILN_*`` variable
that is not a setting (a typo: ``KILN_JOBS``) is logged once per process on the ``kiln.settings``
logger, with the closest known name (:func:`warn_unknown_variables`); the names kiln sets in its
own child processes and ``KILN_TEST_*`` / ``KILN_CI_*`` (test and CI tooling) are not settings
and are never reported. :func:`describe` says where each effective value came from (``kiln
settings``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_kiln import notices
from triton_kiln.errors import SettingsError

log = logging.getLogger("kiln.settings")


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


DEFAULT_CACHE_MAX_MB = 10240
"""10 GiB: a compiled config takes 50 KiB to a few MiB (binary plus text IRs), so this holds tens of
thousands of them (many full tuning sessions) and still keeps a shared home or CI disk from
filling up; an evicted entry costs one recompile (seconds)."""


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity (``taskset``, a container's cpuset, a
    launcher pinning one rank to its GPU's cores), where the platform has one, else every core.
    A pool sized from the machine's count instead would put two workers on each core it may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Settings:
    """Everything that tunes kiln's behaviour. Each field names its environment variable."""

    workers: int = field(default_factory=usable_cores)
    """``KILN_WORKERS``: compile worker processes (default: one per CPU core this process may run
    on, :func:`usable_cores`)."""

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

    memory_cache_mb: int = 512
    """``KILN_MEMORY_CACHE_MB``: MiB of recent artifacts a pool keeps in memory (least recently used out)."""

    keep_ir: bool = False
    """``KILN_KEEP_IR``: ``1`` keeps text IRs (LLVM IR, TTIR, TTGIR, PTX) in the memory cache too."""

    zygote_start_timeout_s: float = 120.0
    """``KILN_ZYGOTE_START_TIMEOUT_S``: seconds the zygote may take to import Triton and warm up."""

    zygote_restarts: int = 3
    """``KILN_ZYGOTE_RESTARTS``: consecutive failed zygote starts before the pool gives up."""

    stderr_tail_lines: int = 20
    """``KILN_STDERR_TAIL_LINES``: lines of a dead worker's stderr quoted in its error."""

    worker_nice: int = 10
    """``KILN_WORKER_NICE``: how far below the caller's CPU priority the zygote, its workers and
    their compilers (ptxas) run (a ``nice`` increment, 0-19; 0 = the caller's): a compile gives a
    shared core to the caller's own threads (tracing, codegen, launching kernels) and still takes
    every idle core."""

    progress: bool | None = None
    """``KILN_PROGRESS``: ``1`` always shows progress bars, ``0`` never; unset = on a terminal only."""

    debug: bool = False
    """``KILN_DEBUG``: ``1`` makes the ``kiln`` command print the traceback behind an ``Error:`` line."""

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

    idle_s: float = 30.0
    """``KILN_IDLE_S``: seconds the benchmark sandbox, the pool's zygote and workers and the
    Inductor sidecar stay once idle before they exit, freeing their GPU memory (the next tuning
    starts them again); ``0``: they exit as soon as their work is done."""

    prewarm: bool = False
    """``KILN_PREWARM``: ``1`` starts the compile pool (its zygote and workers: processes, no GPU
    memory) at :func:`triton_kiln.install` or a tuned kernel's definition on a GPU machine, so a
    tuning's first miss finds it ready instead of waiting for it (~0.7-2 s); for processes that
    will tune. The pool still exits after ``KILN_IDLE_S`` without work. ``0`` (the default)
    starts nothing until a tuning misses, so a process that never tunes holds nothing."""

    fast_launch: bool = True
    """``KILN_FAST_LAUNCH``: ``0`` launches tuned kernels through Triton's launcher, not kiln's."""

    autotune: bool = False
    """``KILN_AUTOTUNE``: ``1`` routes ``triton.autotune`` through kiln at the first ``import triton``
    (kiln's startup hook, docs/JIT_ROUTING.md) or ``import triton_kiln``, whichever comes first."""

    inductor: bool = False
    """``KILN_INDUCTOR``: ``1`` routes torch Inductor's Triton compiles through kiln's pool at
    ``import triton_kiln`` (:func:`triton_kiln.inductor.install`; docs/INDUCTOR.md)."""

    inductor_sandbox: bool = False
    """``KILN_INDUCTOR_SANDBOX``: ``1`` makes :func:`triton_kiln.inductor.install` (without
    ``sandbox_benchmarks``) run Inductor's max-autotune template benchmarks in a kiln sandbox
    process, each under ``KILN_BENCH_TIMEOUT_S`` (docs/INDUCTOR.md)."""

    inductor_sidecar: bool = True
    """``KILN_INDUCTOR_SIDECAR``: ``0`` makes :func:`triton_kiln.inductor.install` do each Triton compile
    job's in-process work (module load, configs described, results pickled) in the caller's own
    threads rather than in kiln's Inductor sidecar process (docs/INDUCTOR.md)."""

    inductor_quiet_benchmarks: bool = True
    """``KILN_INDUCTOR_QUIET_BENCHMARKS``: under :func:`triton_kiln.inductor.install`, kiln's compile
    processes are held still (``SIGSTOP``, then ``SIGCONT``) while one of Inductor's benchmarks
    times a GPU kernel, so kiln's compiles do not slow the host the timing includes; ``0`` lets
    them run on (docs/INDUCTOR.md)."""

    route_jit: bool = True
    """``KILN_ROUTE_JIT``: under :func:`triton_kiln.install` (or ``KILN_AUTOTUNE=1``), plain
    ``@triton.jit`` kernels compile in kiln's pool too; ``0`` leaves them to Triton
    (docs/JIT_ROUTING.md)."""

    prebuild_launchers: bool = True
    """``KILN_PREBUILD_LAUNCHERS``: on Triton 3.5/3.6, while kiln's pool compiles a kernel, Triton's
    C launcher for its signature is built with gcc in a background thread of your process, so the
    kernel's first launch finds it in Triton's cache; ``0``: Triton builds it at the first launch."""

    cache_max_mb: int | None = DEFAULT_CACHE_MAX_MB
    """``KILN_CACHE_MAX_MB``: MiB the artifact store may hold on disk before the least recently used
    entries are evicted (``0`` or ``unlimited``: no cap). The tuning database does not count."""

    remote_cache: str | None = None
    """``KILN_REMOTE_CACHE``: a Redis server shared by several machines, as a URL
    (``redis://[:password@]host:port/db``, ``rediss://`` for TLS, ``unix:///path.sock?db=0``);
    artifacts and finished tuning runs are read through it and written to it (docs/REMOTE_CACHE.md).
    Unset: none (and kiln never imports :mod:`triton_kiln.remote`)."""

    remote_max_entry_mb: int = 16
    """``KILN_REMOTE_MAX_ENTRY_MB``: MiB one artifact (all its files) may take in the remote cache;
    larger ones stay local only, and a remote entry or tuning run that declares more is refused
    before it is read."""

    remote_ttl_days: float | None = 30.0
    """``KILN_REMOTE_TTL_DAYS``: days a remote entry lives after its last write or read (each hit
    renews it); ``0`` or ``none``: no expiry (then cap the server with ``maxmemory``)."""

    remote_timeout_s: float = 0.5
    """``KILN_REMOTE_TIMEOUT_S``: deadline of each request to the remote cache (connecting, sending
    and the whole reply, however slowly the server sends it)."""

    remote_retry_s: float = 60.0
    """``KILN_REMOTE_RETRY_S``: after the remote cache fails (unreachable, slow, an error), seconds
    kiln works locally before trying it again."""

    remote_key_file: Path | None = None
    """``KILN_REMOTE_KEY_FILE``: a file holding a secret the machines share (at least 32 bytes,
    private to its owner); when set, kiln signs what it writes to the remote cache (HMAC-SHA256)
    and loads only what carries a valid signature. Unset: entries are checksummed, not signed."""

    farm_standing: bool = False
    """``KILN_FARM_STANDING``: ``1`` makes :class:`~triton_kiln.farm.RayCompilePool` (and ``kiln compile
    --ray``) use each node's standing compiler (``kiln farm up``): one warm kiln pool per node,
    shared by every driver and left running when a driver ends (docs/DISTRIBUTED.md); ``0``: each
    driver starts its own node actors and ends them."""

    node: bool = True
    """``KILN_NODE``: ``0`` turns off node-wide sharing (docs/NODE.md): each process compiles and
    tunes alone, with all of its workers, as if no other process used the cache directory."""

    node_slots: int | None = None
    """``KILN_NODE_SLOTS``: compiles running at once on the node, all processes sharing the cache
    directory together (unset: the number of CPU cores, or a pool's ``workers`` if larger)."""

    node_poll_s: float = 0.05
    """``KILN_NODE_POLL_S``: how often a process waiting for another's compile or tuning looks again."""

    node_wait_s: float = 1800.0
    """``KILN_NODE_WAIT_S``: the longest a process waits for another live process's compile or
    tuning before doing it itself (a dead one's work is taken over at the next poll)."""

    node_share: bool = True
    """``KILN_NODE_SHARE``: with ``KILN_NODE`` on, processes on different GPUs of one kind tuning
    the same kernel and key split its configs' benchmarks (docs/NODE.md); ``0``: one tunes, the
    others wait for its run."""

    node_share_wait_s: float = 60.0
    """``KILN_NODE_SHARE_WAIT_S``: how long the tuning process waits for a config another GPU's
    process is benchmarking before benchmarking it itself (a dead one's is re-run at once)."""

    def __post_init__(self) -> None:
        _convert_paths(self)
        _check_ranges(self)

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


def _nonnegative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(value)
    return number


def _nonnegative_float(value: str) -> float:
    number = float(value)
    if not (number >= 0 and math.isfinite(number)):
        raise ValueError(value)
    return number


def _cap_mb(value: str) -> int | None:
    if value.strip().lower() in ("0", "unlimited", "none"):
        return None
    return _positive_int(value)


def _optional_days(value: str) -> float | None:
    if value.strip().lower() in ("0", "none", "never"):
        return None
    return _positive_float(value)


REMOTE_SCHEMES = ("redis", "rediss", "unix")


def _remote_url(value: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(value.strip())
    if parts.scheme not in REMOTE_SCHEMES:
        raise ValueError(value)
    if parts.scheme == "unix" and not parts.path:
        raise ValueError(value)
    if parts.scheme != "unix" and (not parts.hostname or not _db_number(parts.path)):
        raise ValueError(value)
    _ = parts.port  # a malformed port raises ValueError
    return value.strip()


def redacted_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: how kiln shows ``KILN_REMOTE_CACHE``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _db_number(path: str) -> bool:
    """``/0``, ``/12`` or nothing: the database part of a Redis URL."""
    db = path.strip("/")
    return not db or (db.isascii() and db.isdigit())


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


_ENV: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "workers": ("KILN_WORKERS", _positive_int, "a positive integer"),
    "job_timeout_s": ("KILN_JOB_TIMEOUT_S", _positive_float, "a positive, finite number of seconds"),
    "memory_limit_mb": ("KILN_MEMORY_LIMIT_MB", _positive_int, "a positive integer (MiB)"),
    "memory_poll_s": ("KILN_MEMORY_POLL_S", _positive_float, "a positive, finite number of seconds"),
    "cache_dir": ("KILN_CACHE_DIR", lambda v: Path(v).expanduser(), "a directory path"),
    "use_disk_cache": ("KILN_DISK_CACHE", _bool, "0 or 1"),
    "memory_cache_mb": ("KILN_MEMORY_CACHE_MB", _positive_int, "a positive integer (MiB)"),
    "keep_ir": ("KILN_KEEP_IR", _bool, "0 or 1"),
    "zygote_start_timeout_s": (
        "KILN_ZYGOTE_START_TIMEOUT_S",
        _positive_float,
        "a positive, finite number of seconds",
    ),
    "zygote_restarts": ("KILN_ZYGOTE_RESTARTS", _positive_int, "a positive integer"),
    "stderr_tail_lines": ("KILN_STDERR_TAIL_LINES", _positive_int, "a positive integer"),
    "worker_nice": ("KILN_WORKER_NICE", _nonnegative_int, "an integer from 0 to 19"),
    "progress": ("KILN_PROGRESS", _bool, "0 or 1"),
    "debug": ("KILN_DEBUG", _bool, "0 or 1"),
    "tuning_db": ("KILN_TUNING_DB", lambda v: Path(v).expanduser(), "a file path"),
    "use_tuning_db": ("KILN_USE_TUNING_DB", _bool, "0 or 1"),
    "sandbox": ("KILN_SANDBOX", _bool, "0 or 1"),
    "native_sandbox": ("KILN_NATIVE_SANDBOX", _bool, "0 or 1"),
    "bench_timeout_s": ("KILN_BENCH_TIMEOUT_S", _positive_float, "a positive, finite number of seconds"),
    "idle_s": ("KILN_IDLE_S", _nonnegative_float, "a finite number of seconds, 0 or more"),
    "fast_launch": ("KILN_FAST_LAUNCH", _bool, "0 or 1"),
    "autotune": ("KILN_AUTOTUNE", _bool, "0 or 1"),
    "inductor": ("KILN_INDUCTOR", _bool, "0 or 1"),
    "inductor_sandbox": ("KILN_INDUCTOR_SANDBOX", _bool, "0 or 1"),
    "inductor_sidecar": ("KILN_INDUCTOR_SIDECAR", _bool, "0 or 1"),
    "inductor_quiet_benchmarks": ("KILN_INDUCTOR_QUIET_BENCHMARKS", _bool, "0 or 1"),
    "route_jit": ("KILN_ROUTE_JIT", _bool, "0 or 1"),
    "prebuild_launchers": ("KILN_PREBUILD_LAUNCHERS", _bool, "0 or 1"),
    "prewarm": ("KILN_PREWARM", _bool, "0 or 1"),
    "cache_max_mb": ("KILN_CACHE_MAX_MB", _cap_mb, "a positive integer (MiB), or 0 / unlimited"),
    "remote_cache": (
        "KILN_REMOTE_CACHE",
        _remote_url,
        "a Redis URL: redis://host:port/db, rediss://... or unix:///path.sock",
    ),
    "remote_max_entry_mb": ("KILN_REMOTE_MAX_ENTRY_MB", _positive_int, "a positive integer (MiB)"),
    "remote_ttl_days": ("KILN_REMOTE_TTL_DAYS", _optional_days, "a positive number of days, or 0 / none"),
    "remote_timeout_s": ("KILN_REMOTE_TIMEOUT_S", _positive_float, "a positive, finite number of seconds"),
    "remote_retry_s": ("KILN_REMOTE_RETRY_S", _positive_float, "a positive, finite number of seconds"),
    "remote_key_file": ("KILN_REMOTE_KEY_FILE", lambda v: Path(v).expanduser(), "a file path"),
    "farm_standing": ("KILN_FARM_STANDING", _bool, "0 or 1"),
    "node": ("KILN_NODE", _bool, "0 or 1"),
    "node_slots": ("KILN_NODE_SLOTS", _positive_int, "a positive integer"),
    "node_poll_s": ("KILN_NODE_POLL_S", _positive_float, "a positive, finite number of seconds"),
    "node_wait_s": ("KILN_NODE_WAIT_S", _positive_float, "a positive, finite number of seconds"),
    "node_share": ("KILN_NODE_SHARE", _bool, "0 or 1"),
    "node_share_wait_s": ("KILN_NODE_SHARE_WAIT_S", _positive_float, "a positive, finite number of seconds"),
}


# --- ranges: every field checked when a Settings is made (environment, scope(), replace()) ---

MAX_WORKERS = 512
"""The most compile workers on any machine (each is a process holding Triton, 150-300 MB)."""


def max_workers() -> int:
    """4 workers per CPU core (at least 8), at most :data:`MAX_WORKERS`: a compile keeps one core
    busy, so beyond that workers only add memory and fork time, never throughput."""
    return min(MAX_WORKERS, max(8, 4 * (os.cpu_count() or 1)))


def _int_range(low: int, high: int, what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"expected {what} from {low} to {high:,}"
        return None

    return check


def _workers_range(value: Any) -> str | None:
    problem = _int_range(1, max_workers(), "a number of workers")(value)
    if problem is None:
        return None
    return (
        f"{problem} on this machine (4 per CPU core, at least 8, at most {MAX_WORKERS}; a compile keeps "
        f"a core busy, so more workers only add memory and fork time)"
    )


def _seconds_range(low: float, high: float | None = None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < low or (high is not None and value > high):
            bound = f"from {low:g} to {high:g}" if high is not None else f"of at least {low:g}"
            return f"expected a finite number of seconds {bound}"
        return None

    return check


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _directory_usable(value: Any) -> str | None:
    path = Path(value)
    existing = _nearest_existing(path)
    if existing == path and not path.is_dir():
        return "expected a directory, and this is a file (or a device); point it at a directory"
    if not existing.is_dir():
        return f"expected a directory that can be created, but {existing} is not a directory"
    if existing != path and not os.access(existing, os.W_OK | os.X_OK):
        return f"expected a directory that can be created, but {existing} is not writable"
    return None


def _file_usable(value: Any) -> str | None:
    if value is None:
        return None
    path = Path(value)
    if path.is_dir():
        return "expected a database file, and this is a directory; name a file in it"
    existing = _nearest_existing(path.parent)
    if not existing.is_dir():
        return f"expected a file whose directory can be created, but {existing} is not a directory"
    if existing != path.parent and not os.access(existing, os.W_OK | os.X_OK):
        return f"expected a file whose directory can be created, but {existing} is not writable"
    return None


_RANGES: dict[str, Callable[[Any], str | None]] = {
    "workers": _workers_range,
    "job_timeout_s": _seconds_range(0.001),
    "memory_limit_mb": lambda v: None if v is None else _int_range(1, 1 << 30, "MiB")(v),
    "memory_poll_s": _seconds_range(0.001, 60.0),
    "cache_dir": _directory_usable,
    "memory_cache_mb": _int_range(1, 1 << 20, "MiB"),
    "zygote_start_timeout_s": _seconds_range(0.001),
    "zygote_restarts": _int_range(1, 1000, "a number of restarts"),
    "stderr_tail_lines": _int_range(1, 100_000, "a number of lines"),
    "worker_nice": _int_range(0, 19, "a nice increment"),
    "tuning_db": _file_usable,
    "bench_timeout_s": _seconds_range(0.001),
    "idle_s": _seconds_range(0.0),
    "cache_max_mb": lambda v: None if v is None else _int_range(1, 1 << 30, "MiB")(v),
    "remote_cache": lambda v: None if v is None else _remote_problem(v),
    "remote_max_entry_mb": _int_range(1, 512, "MiB (Redis holds at most 512 MiB in one value)"),
    "remote_ttl_days": lambda v: None if v is None else _days_range(v),
    "remote_timeout_s": _seconds_range(0.001, 600.0),
    "remote_retry_s": _seconds_range(0.001),
    "remote_key_file": lambda v: None if v is None else _key_file_problem(Path(v)),
    "node_slots": lambda v: None if v is None else _int_range(1, 1 << 16, "a number of slots")(v),
    "node_poll_s": _seconds_range(0.001, 10.0),
    "node_wait_s": _seconds_range(0.001),
    "node_share_wait_s": _seconds_range(0.001),
}


def _remote_problem(value: Any) -> str | None:
    try:
        _remote_url(value)
    except (ValueError, AttributeError):
        return "expected a Redis URL: redis://host:port/db, rediss://... or unix:///path.sock"
    return None


MIN_KEY_BYTES = 32


def _key_file_problem(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError as exc:
        return f"expected a readable key file ({exc.strerror})"
    if not path.is_file():
        return "expected a key file, and this is not a regular file"
    if st.st_mode & 0o077:
        return f"expected a key file only its owner can read (mode {st.st_mode & 0o777:o}; run chmod 600)"
    if st.st_size < MIN_KEY_BYTES:
        return f"expected a key of at least {MIN_KEY_BYTES} bytes (e.g. head -c 32 /dev/urandom > FILE)"
    return None


def _days_range(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 < value <= 3650:
        return "expected a number of days above 0, at most 3650 (or None: no expiry)"
    return None


def _variable(name: str) -> str:
    return _ENV[name][0]


def _range_error(name: str, value: Any, *, from_env: bool) -> SettingsError | None:
    problem = _RANGES[name](value) if name in _RANGES else None
    if not problem:
        return None
    shown = str(value) if isinstance(value, Path) else repr(value)
    if name == "remote_cache" and isinstance(value, str):
        shown = repr(redacted_url(value))
    if from_env:
        return SettingsError(f"{_variable(name)}={shown} is not valid: {problem}.")
    return SettingsError(f"the setting {name}={shown} ({_variable(name)}) is not valid: {problem}.")


_PATH_SETTINGS = ("cache_dir", "tuning_db", "remote_key_file")
"""Settings that are paths: a str given for one (``scope(cache_dir="/x")``) is kept as a Path."""


def _convert_paths(values: Settings) -> None:
    for name in _PATH_SETTINGS:
        value = getattr(values, name)
        if value is None and name != "cache_dir":
            continue
        text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
        if not isinstance(text, str) or not text.strip():
            what = "an empty path" if isinstance(text, str) else f"a {type(value).__name__}"
            raise SettingsError(
                f"the setting {name}={value!r} ({_variable(name)}) is not valid: expected a path "
                f"(a str or pathlib.Path), got {what}."
            )
        object.__setattr__(values, name, Path(text).expanduser())


def _check_ranges(values: Settings) -> None:
    for name in _RANGES:
        error = _range_error(name, getattr(values, name), from_env=False)
        if error is not None:
            raise error


def parse_variable(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of setting ``name`` from its ``KILN_*`` variable alone (``None`` if unset or
    empty); :class:`SettingsError` naming the variable if it is malformed or out of range."""
    var, parse, expected = _ENV[name]
    raw = (os.environ if environ is None else environ).get(var, "").strip()
    if not raw:
        return None
    try:
        value = parse(raw)
    except ValueError:
        shown = redacted_url(raw) if name == "remote_cache" else raw  # never a password in a message
        raise SettingsError(f"{var}={shown!r} is not valid: expected {expected}.") from None
    error = _range_error(name, value, from_env=True)
    if error is not None:
        raise error
    return value


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings from ``KILN_*`` variables; unset or empty variables keep their defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, (var, _, _) in _ENV.items():
        if env.get(var, "").strip():
            values[name] = parse_variable(name, env)
    return Settings(**values)


# --- KILN_* variables that are not settings ----------------------------------------------------

INTERNAL_VARIABLES = frozenset(
    {
        "KILN_POOL_ID",  # marks every process of a pool (pool/handles.py)
        "KILN_ZYGOTE_FD",  # the zygote's pipe and parent (pool/zygote.py)
        "KILN_ZYGOTE_PARENT",
        "KILN_SANDBOX_FD",  # the torch sandbox's (sandbox/torch_worker.py)
        "KILN_SANDBOX_PARENT",
        "KILN_NATIVE_SANDBOX_FD",  # the torch-free sandbox's (sandbox/native_worker.py)
        "KILN_NATIVE_SANDBOX_PARENT",
        "KILN_CALL_SANDBOX_FD",  # the call sandbox's (sandbox/call_worker.py)
        "KILN_CALL_SANDBOX_PARENT",
        "KILN_INDUCTOR_SIDECAR_FD",  # kiln's Inductor sidecar's (inductor/sidecar_main.py)
        "KILN_INDUCTOR_SIDECAR_PARENT",
    }
)
"""Variables kiln sets in its own child processes: not settings, never reported as unknown."""

INTERNAL_PREFIXES = ("KILN_TEST_", "KILN_CI_")
"""Prefixes of variables read by kiln's tests and CI scripts, not by kiln."""

_warned_unknown: set[str] = set()
_warned_lock = threading.Lock()


def variables() -> dict[str, str]:
    """``{setting name: its KILN_* variable}``, in the order of :class:`Settings`."""
    return {name: var for name, (var, _, _) in _ENV.items()}


def accepted_values() -> dict[str, str]:
    """``{setting name: what its KILN_* variable accepts}`` ("0 or 1", "a positive integer"...),
    in the order of :class:`Settings`: the words of the error a malformed value raises."""
    return {name: expected for name, (_, _, expected) in _ENV.items()}


def unknown_variables(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``{KILN_* name that is not a setting: the closest setting's variable, or None}``."""
    env = os.environ if environ is None else environ
    known = [var for var, _, _ in _ENV.values()]
    unknown: dict[str, str | None] = {}
    for var in sorted(env):
        if not var.startswith("KILN_") or var in known or var in INTERNAL_VARIABLES:
            continue
        if var.startswith(INTERNAL_PREFIXES):
            continue
        close = difflib.get_close_matches(var, known, n=1, cutoff=0.6)
        unknown[var] = close[0] if close else None
    return unknown


def unknown_message(var: str, closest: str | None) -> str:
    hint = f"did you mean {closest}?" if closest else "`kiln settings` lists the settings"
    return f"{var} is not a kiln setting; {hint} (it is ignored)"


def warn_unknown_variables(environ: Mapping[str, str] | None = None) -> None:
    """Log each ``KILN_*`` variable that is not a setting, once per process (``kiln.settings``);
    not in kiln's own child processes (the zygote, the sandboxes), whose parent has said it."""
    env = os.environ if environ is None else environ
    with _warned_lock:
        fresh = {var: env[var] for var in env if var.startswith("KILN_") and var not in _warned_unknown}
    if not fresh or any(var in env for var in INTERNAL_VARIABLES):
        return  # the common case: one pass over the names (current() calls this every time)
    for var, closest in unknown_variables(fresh).items():
        with _warned_lock:
            if var in _warned_unknown:
                continue
            _warned_unknown.add(var)
        notices.warn(log, f"kiln: {unknown_message(var, closest)}")


# --- where each value came from (`kiln settings`) -----------------------------------------------


@dataclass(frozen=True)
class SettingSource:
    """One setting as :func:`describe` reports it."""

    name: str
    variable: str
    value: Any
    """The effective value (``None`` where :attr:`error` is set)."""
    source: str
    """``default``, ``environment`` or ``scope``."""
    raw: str | None = None
    """The variable's text, when it is set."""
    error: str | None = None
    """Why the variable's value cannot be used (``None``: it can)."""


def describe(environ: Mapping[str, str] | None = None) -> list[SettingSource]:
    """Every setting, its effective value and where it came from; a malformed variable is
    reported in :attr:`SettingSource.error`, not raised, so a caller can show them all."""
    env = os.environ if environ is None else environ
    with _scopes_lock:
        scoped: dict[str, Any] = {}
        for _, layer in _scopes:
            scoped.update(layer)
    defaults = {  # not a Settings: a default is reported as it is, not range-checked here
        item.name: item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        for item in dataclasses.fields(Settings)
    }
    rows: list[SettingSource] = []
    for name, (var, _, _) in _ENV.items():
        raw = env.get(var, "").strip() or None
        if name in scoped:
            rows.append(SettingSource(name, var, scoped[name], "scope", raw))
            continue
        if raw is None:
            rows.append(SettingSource(name, var, defaults[name], "default"))
            continue
        try:
            rows.append(SettingSource(name, var, parse_variable(name, env), "environment", raw))
        except SettingsError as exc:
            rows.append(SettingSource(name, var, None, "environment", raw, error=str(exc)))
    return rows


_scopes: list[tuple[object, dict[str, Any]]] = []  # (token, overrides), innermost last
_scopes_lock = threading.Lock()


def current() -> Settings:
    """The settings in force: the environment, then every active :func:`scope`, innermost last."""
    warn_unknown_variables()
    settings = from_env()
    with _scopes_lock:
        overrides = [dict(layer) for _, layer in _scopes]
    for layer in overrides:
        settings = settings.replace(**layer)
    return settings


def default_triton_key_dir() -> Path | None:
    """:attr:`Settings.triton_key_dir` of the settings in force (a ``CompileRequest``'s default)."""
    return current().triton_key_dir


def overridden(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Names of the settings given explicitly: by a non-empty ``KILN_*`` variable or a :func:`scope`.

    For callers with defaults of their own (``kiln demo`` uses a 5 s timeout unless
    ``KILN_JOB_TIMEOUT_S`` says otherwise).
    """
    env = os.environ if environ is None else environ
    names = {name for name, (var, _, _) in _ENV.items() if env.get(var, "").strip()}
    with _scopes_lock:
        for _, layer in _scopes:
            names.update(layer)
    return frozenset(names)


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

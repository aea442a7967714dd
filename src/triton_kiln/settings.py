"""kiln's settings: one typed record, read from ``KILN_*`` environment variables.

Every knob kiln has is declared here once, as a field of :class:`Settings`: its type, its
variable, its default, the kind of value it holds (how the variable is parsed, what it accepts,
its range: :mod:`triton_kiln.setting_kinds`) and what it means, grouped by area::

    job_timeout_s: float = POOL.setting(
        "KILN_JOB_TIMEOUT_S", 600.0, seconds(at_least=0.001), "seconds a single compile may run ..."
    )

docs/SETTINGS.md (:mod:`triton_kiln.settings_page`) and ``kiln settings``
(:mod:`triton_kiln.cli.settings_table`) are made from these declarations.

:func:`current` returns the settings in force: the values from the environment, overridden by any
active :func:`scope` (used by tests and by callers who want a setting for one block of code)::

    with triton_kiln.settings.scope(job_timeout_s=5.0):
        pool = CompilePool()          # this pool sees a 5 s timeout

A malformed variable raises :class:`~triton_kiln.errors.SettingsError` naming the variable, its
value and what was expected; so does a value out of its range, however it was given (the
environment, :func:`scope`, a ``CompilePool`` argument).

When the error comes: settings are read where a kiln object is made (a pool, an autotuner, a
bundle, a CLI command that needs them), never at ``import triton_kiln``; an import with
``KILN_AUTOTUNE`` set reads only that variable (see :mod:`triton_kiln.routing`). A ``KILN_*``
variable that is not a setting (a typo: ``KILN_JOBS``) is logged once per process, with the
closest known name (:mod:`triton_kiln.unknown_names`). :func:`describe` says where each effective
value came from (``kiln settings``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from triton_kiln import unknown_names
from triton_kiln.errors import SettingsError
from triton_kiln.setting_kinds import (
    AUTO_FLAG,
    DATABASE_FILE,
    DAYS,
    DIRECTORY,
    FLAG,
    KEY_FILE,
    MIB_CAP,
    NAME,
    REDIS_URL,
    Kind,
    count,
    int_range,
    integer,
    mib,
    positive_int,
    seconds,
)

T = TypeVar("T")

# --- how a setting is declared ------------------------------------------------------------------


@dataclass(frozen=True)
class Computed(Generic[T]):
    """A default made when a :class:`Settings` is (it depends on the machine or the environment)."""

    make: Callable[[], T]
    text: str
    """The default as the settings page says it."""


@dataclass(frozen=True)
class Setting:
    """One setting's declaration, kept in its :class:`Settings` field's metadata."""

    area: Area
    variable: str
    """Its ``KILN_*`` environment variable."""
    kind: Kind[Any]
    doc: str
    """What it means (reST, as a docstring): a phrase, then details. ``kiln settings`` shows the
    first sentence; the settings page all of it."""
    default_text: str | None
    """The default as the settings page says it (``None``: the default value itself)."""
    none: str
    """How ``None`` is shown: what it means for this setting."""
    nullable: bool
    """Whether ``None`` is one of its values (its default, or a value its kind has)."""

    def shown(self, text: str) -> str:
        """``text`` (the variable's, or a value's) as kiln may print it (a URL without its password)."""
        return self.kind.shown(text)


@dataclass(frozen=True)
class Area:
    """A group of settings: a section of docs/SETTINGS.md."""

    title: str

    def setting(
        self, variable: str, default: T | Computed[T], kind: Kind[T], doc: str, *, none: str = "unset"
    ) -> T:
        """A :class:`Settings` field of this area: ``name: type = AREA.setting(...)``.

        ``default`` is the value, or a :class:`Computed` one; ``kind`` how the variable is parsed
        and checked; ``doc`` what the setting means; ``none`` how ``None`` is shown, where it is a
        value. A type checker sees a ``T``; at run time this is the :func:`dataclasses.field` the
        dataclass takes the default from.
        """
        declared = Setting(
            area=self,
            variable=variable,
            kind=kind,
            doc=" ".join(doc.split()),
            default_text=default.text if isinstance(default, Computed) else None,
            none=none,
            nullable=default is None or kind.nullable,
        )
        metadata = {_DECLARATION: declared}
        if isinstance(default, Computed):
            return field(default_factory=default.make, metadata=metadata)
        return field(default=default, metadata=metadata)


_DECLARATION = "kiln.setting"
"""The key of a :class:`Settings` field's metadata that holds its :class:`Setting`."""


# --- defaults and bounds the declarations use -------------------------------------------------


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity (``taskset``, a container's cpuset, a
    launcher pinning one rank to its GPU's cores), where the platform has one, else every core.
    A pool sized from the machine's count instead would put two workers on each core it may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


DEFAULT_CACHE_MAX_MB = 10240
"""10 GiB: a compiled config takes 50 KiB to a few MiB (binary plus text IRs), so this holds tens of
thousands of them (many full tuning sessions) and still keeps a shared home or CI disk from
filling up; an evicted entry costs one recompile (seconds)."""

MAX_WORKERS = 512
"""The most compile workers on any machine (each is a process holding Triton, 150-300 MB)."""


def max_workers() -> int:
    """4 workers per CPU core (at least 8), at most :data:`MAX_WORKERS`: a compile keeps one core
    busy, so beyond that workers only add memory and fork time, never throughput."""
    return min(MAX_WORKERS, max(8, 4 * (os.cpu_count() or 1)))


def _workers_range(value: Any) -> str | None:
    problem = int_range(1, max_workers(), "a number of workers")(value)
    if problem is None:
        return None
    return (
        f"{problem} on this machine (4 per CPU core, at least 8, at most {MAX_WORKERS}; a compile keeps "
        f"a core busy, so more workers only add memory and fork time)"
    )


WORKERS: Kind[int] = Kind(positive_int, "a positive integer", _workers_range)
"""A number of compile workers: at most :func:`max_workers` on this machine."""


# --- the settings --------------------------------------------------------------------------------

POOL = Area("The compile pool")
CACHE = Area("Caches")
TUNING = Area("Autotuning and benchmarking")
LAUNCH = Area("Launching kernels")
ROUTING = Area("Routing Triton's compiles through kiln")
INDUCTOR = Area("torch Inductor")
HELION = Area("Helion")
NODE = Area("One node, many processes")
REMOTE = Area("The remote cache")
FARM = Area("Distributed compiles")
COMMAND_LINE = Area("The command line")


@dataclass(frozen=True)
class Settings:
    """Everything that tunes kiln's behaviour; each field is a setting read from its ``KILN_*``
    variable (docs/SETTINGS.md lists them)."""

    # --- the compile pool -------------------------------------------------------------------
    workers: int = POOL.setting(
        "KILN_WORKERS",
        Computed(usable_cores, "one per CPU core this process may run on"),
        WORKERS,
        "compile worker processes (default: one per CPU core this process may run on, :func:`usable_cores`).",
    )
    job_timeout_s: float = POOL.setting(
        "KILN_JOB_TIMEOUT_S",
        600.0,
        seconds(at_least=0.001),
        "seconds a single compile may run before its worker is killed.",
    )
    memory_limit_mb: int | None = POOL.setting(
        "KILN_MEMORY_LIMIT_MB",
        None,
        mib(1 << 30),
        "resident memory a worker (with its children) may use; unset = no limit.",
        none="unset (no limit)",
    )
    memory_poll_s: float = POOL.setting(
        "KILN_MEMORY_POLL_S",
        0.05,
        seconds(at_least=0.001, at_most=60.0),
        "how often the memory limit is checked.",
    )
    zygote_start_timeout_s: float = POOL.setting(
        "KILN_ZYGOTE_START_TIMEOUT_S",
        120.0,
        seconds(at_least=0.001),
        "seconds the zygote may take to import Triton and warm up.",
    )
    zygote_restarts: int = POOL.setting(
        "KILN_ZYGOTE_RESTARTS",
        3,
        count(1000, "a number of restarts"),
        "consecutive failed zygote starts before the pool gives up.",
    )
    stderr_tail_lines: int = POOL.setting(
        "KILN_STDERR_TAIL_LINES",
        20,
        count(100_000, "a number of lines"),
        "lines of a dead worker's stderr quoted in its error.",
    )
    worker_nice: int = POOL.setting(
        "KILN_WORKER_NICE",
        10,
        integer(0, 19, "a nice increment"),
        """how far below the caller's CPU priority the zygote, its workers and their compilers
        (ptxas) run (a ``nice`` increment, 0-19; 0 = the caller's): a compile gives a shared core
        to the caller's own threads (tracing, codegen, launching kernels) and still takes every
        idle core.""",
    )
    idle_s: float = POOL.setting(
        "KILN_IDLE_S",
        30.0,
        seconds(at_least=0.0),
        """seconds the benchmark sandbox, the pool's zygote and workers and the Inductor sidecar
        stay once idle before they exit, freeing their GPU memory (the next tuning starts them
        again); ``0``: they exit as soon as their work is done.""",
    )
    prewarm: bool | None = POOL.setting(
        "KILN_PREWARM",
        None,
        AUTO_FLAG,
        """whether :func:`triton_kiln.install` or a tuned kernel's definition on a GPU machine starts
        the compile pool (its zygote and workers: processes, no GPU memory) and the benchmark
        sandbox (a process with a CUDA context) so a tuning's first miss finds them ready instead
        of waiting for them (~0.5-1 s). ``auto`` (the default): only on a fresh cache, whose first
        call tunes: no tuning database yet (or one without a run), no compiled kernel in kiln's
        cache, no remote cache. ``1``: always, for processes that will tune; ``0``: never, a
        tuning's first miss starts them. Both exit after ``KILN_IDLE_S`` without work (with
        ``KILN_IDLE_S=0``, or ``LOCAL_RANK`` set before CUDA is initialized, the sandbox waits
        for the first miss).""",
        none="auto",
    )

    # --- caches -----------------------------------------------------------------------------
    cache_dir: Path = CACHE.setting(
        "KILN_CACHE_DIR",
        Computed(_default_cache_dir, "``$XDG_CACHE_HOME/kiln`` (``~/.cache/kiln``)"),
        DIRECTORY,
        "where compiled artifacts are stored (default ``~/.cache/kiln``).",
    )
    use_disk_cache: bool = CACHE.setting(
        "KILN_DISK_CACHE", True, FLAG, "``0`` keeps artifacts in memory only."
    )
    cache_max_mb: int | None = CACHE.setting(
        "KILN_CACHE_MAX_MB",
        DEFAULT_CACHE_MAX_MB,
        MIB_CAP,
        """MiB the artifact store may hold on disk before the least recently used entries are
        evicted (``0`` or ``unlimited``: no cap). The tuning database does not count.""",
        none="unlimited",
    )
    memory_cache_mb: int = CACHE.setting(
        "KILN_MEMORY_CACHE_MB",
        512,
        mib(1 << 20),
        "MiB of recent artifacts a pool keeps in memory (least recently used out).",
    )
    keep_ir: bool = CACHE.setting(
        "KILN_KEEP_IR",
        False,
        FLAG,
        "``1`` keeps text IRs (LLVM IR, TTIR, TTGIR, PTX) in the memory cache too.",
    )
    tuning_db: Path | None = CACHE.setting(
        "KILN_TUNING_DB",
        None,
        DATABASE_FILE,
        "the tuning database file (default ``<cache_dir>/tuning.sqlite3``).",
        none="unset (``<cache dir>/tuning.sqlite3``)",
    )
    use_tuning_db: bool = CACHE.setting(
        "KILN_USE_TUNING_DB",
        True,
        FLAG,
        "``0`` keeps tuning results in memory only (as ``triton.autotune``).",
    )

    # --- autotuning and benchmarking --------------------------------------------------------
    sandbox: bool = TUNING.setting(
        "KILN_SANDBOX",
        True,
        FLAG,
        "benchmark configs in a separate GPU process (``0``: in the caller's process).",
    )
    native_sandbox: bool = TUNING.setting(
        "KILN_NATIVE_SANDBOX",
        True,
        FLAG,
        "benchmark in the torch-free sandbox (``0``: the torch sandbox only).",
    )
    bench_timeout_s: float = TUNING.setting(
        "KILN_BENCH_TIMEOUT_S",
        60.0,
        seconds(at_least=0.001),
        "seconds one config's benchmark may take before the sandbox is killed.",
    )
    progress: bool | None = TUNING.setting(
        "KILN_PROGRESS",
        None,
        FLAG,
        "``1`` always shows progress bars, ``0`` never; unset = on a terminal only.",
        none="unset (bars on a terminal only)",
    )

    # --- launching kernels ------------------------------------------------------------------
    fast_launch: bool = LAUNCH.setting(
        "KILN_FAST_LAUNCH",
        True,
        FLAG,
        "``0`` launches tuned kernels through Triton's launcher, not kiln's.",
    )
    prebuild_launchers: bool = LAUNCH.setting(
        "KILN_PREBUILD_LAUNCHERS",
        True,
        FLAG,
        """on Triton 3.5/3.6, while kiln's pool compiles a kernel, Triton's C launcher for its
        signature is built with gcc in a background thread of your process, so the kernel's first
        launch finds it in Triton's cache; ``0``: Triton builds it at the first launch.""",
    )

    # --- routing Triton's compiles through kiln ---------------------------------------------
    autotune: bool = ROUTING.setting(
        "KILN_AUTOTUNE",
        False,
        FLAG,
        """``1`` routes ``triton.autotune`` through kiln at the first ``import triton`` (kiln's
        startup hook, docs/JIT_ROUTING.md) or ``import triton_kiln``, whichever comes first.""",
    )
    route_jit: bool = ROUTING.setting(
        "KILN_ROUTE_JIT",
        True,
        FLAG,
        """under :func:`triton_kiln.install` (or ``KILN_AUTOTUNE=1``), plain ``@triton.jit``
        kernels compile in kiln's pool too; ``0`` leaves them to Triton (docs/JIT_ROUTING.md).""",
    )
    program_record: bool = ROUTING.setting(
        "KILN_PROGRAM_RECORD",
        True,
        FLAG,
        """under :func:`triton_kiln.install`, kiln records which compiles this program asked its
        pool for (plain ``@triton.jit`` kernels and tuned configs), in order, and the next run's
        ``install()`` starts the ones no cache holds before the program asks for them
        (docs/TIMING.md, "The program record"); ``0``: nothing is recorded or started.""",
    )
    program: str | None = ROUTING.setting(
        "KILN_PROGRAM",
        None,
        NAME,
        """the name the program record is kept under (default: the entry script's path,
        ``sys.argv[0]``; ``python -c`` and the interactive interpreter have none, so no record).""",
        none="unset (the entry script's path)",
    )
    program_record_max: int = ROUTING.setting(
        "KILN_PROGRAM_RECORD_MAX",
        256,
        count(4096, "entries"),
        """compiles a program record keeps (the least recently needed dropped first), and so the
        most a run starts before they are asked for.""",
    )

    # --- torch Inductor ---------------------------------------------------------------------
    inductor: bool = INDUCTOR.setting(
        "KILN_INDUCTOR",
        False,
        FLAG,
        """``1`` routes torch Inductor's Triton compiles through kiln's pool at ``import
        triton_kiln`` (:func:`triton_kiln.inductor.install`; docs/INDUCTOR.md).""",
    )
    inductor_sandbox: bool = INDUCTOR.setting(
        "KILN_INDUCTOR_SANDBOX",
        False,
        FLAG,
        """``1`` makes :func:`triton_kiln.inductor.install` (without ``sandbox_benchmarks``) run
        Inductor's max-autotune template benchmarks and runtime autotunes in a kiln sandbox
        process, each under ``KILN_BENCH_TIMEOUT_S`` (docs/INDUCTOR.md).""",
    )
    inductor_sidecar: bool = INDUCTOR.setting(
        "KILN_INDUCTOR_SIDECAR",
        True,
        FLAG,
        """``0`` makes :func:`triton_kiln.inductor.install` do each Triton compile job's
        in-process work (module load, configs described, results pickled) in the caller's own
        threads rather than in kiln's Inductor sidecar process (docs/INDUCTOR.md).""",
    )
    inductor_quiet_benchmarks: bool = INDUCTOR.setting(
        "KILN_INDUCTOR_QUIET_BENCHMARKS",
        True,
        FLAG,
        """under :func:`triton_kiln.inductor.install`, kiln's compile processes are held still
        (``SIGSTOP``, then ``SIGCONT``) while one of Inductor's benchmarks times a GPU kernel, so
        kiln's compiles do not slow the host the timing includes; ``0`` lets them run on
        (docs/INDUCTOR.md).""",
    )

    # --- Helion -------------------------------------------------------------------------------
    helion_sandbox: bool = HELION.setting(
        "KILN_HELION_SANDBOX",
        True,
        FLAG,
        """under :mod:`triton_kiln.helion`, Helion's benchmark jobs (timing, accuracy check, final
        selection) run in kiln's call sandbox, each config as its compile lands; ``0``: Helion's
        own benchmark worker runs them and kiln serves the compiles only (docs/HELION.md).""",
    )
    helion_stream: bool = HELION.setting(
        "KILN_HELION_STREAM",
        True,
        FLAG,
        """under :mod:`triton_kiln.helion` with ``KILN_HELION_SANDBOX``, each config is benchmarked in
        the sandbox as soon as its compile lands, while the rest of its batch compiles; ``0``
        benchmarks after the batch's last compile, in Helion's order (docs/HELION.md).""",
    )
    helion_verify_ahead: bool = HELION.setting(
        "KILN_HELION_VERIFY_AHEAD",
        True,
        FLAG,
        """under :mod:`triton_kiln.helion` with ``KILN_HELION_SANDBOX`` and ``KILN_HELION_STREAM``,
        where the search re-benchmarks its best configs after each batch (effort full), the
        stream runs those re-benchmarks while the batch still waits for a compile, so Helion's
        re-benchmark finds them done; ``0``: Helion runs them after the batch (docs/HELION.md).""",
    )
    helion_screen_ms: int | None = HELION.setting(
        "KILN_HELION_SCREEN_MS",
        None,
        integer(1, 60_000, "milliseconds"),
        """under :mod:`triton_kiln.helion` with ``KILN_HELION_SANDBOX`` and ``KILN_HELION_STREAM``,
        each streamed config's search timing runs for this many ms instead of Helion's 50 (kiln's
        screening: short runs for the search, the finalists timed again in Helion's final
        verification or kiln's final round); unset keeps Helion's window (docs/HELION.md).""",
        none="unset (Helion's window)",
    )
    helion_final_round: bool = HELION.setting(
        "KILN_HELION_FINAL_ROUND",
        True,
        FLAG,
        """under :mod:`triton_kiln.helion` with ``KILN_HELION_SANDBOX``, Helion's final verification
        of its finalists (where its effort profile has no final selection) is kiln's final round in
        the sandbox: the contenders only, in short passes, a finalist clearly slower than the
        leader leaves, the round ends when one is left or those left are tied; ``0``: Helion's own
        verification (docs/HELION.md). Read when kiln is put in a search (``autotuner_fn``) or
        installed (``install()``).""",
    )

    # --- one node, many processes -----------------------------------------------------------
    node: bool = NODE.setting(
        "KILN_NODE",
        True,
        FLAG,
        """``0`` turns off node-wide sharing (docs/NODE.md): each process compiles and tunes alone,
        with all of its workers, as if no other process used the cache directory.""",
    )
    node_slots: int | None = NODE.setting(
        "KILN_NODE_SLOTS",
        None,
        count(1 << 16, "a number of slots"),
        """compiles running at once on the node, all processes sharing the cache directory
        together (unset: the number of CPU cores, or a pool's ``workers`` if larger).""",
        none="unset (CPU cores, or more workers)",
    )
    node_poll_s: float = NODE.setting(
        "KILN_NODE_POLL_S",
        0.05,
        seconds(at_least=0.001, at_most=10.0),
        "how often a process waiting for another's compile or tuning looks again.",
    )
    node_wait_s: float = NODE.setting(
        "KILN_NODE_WAIT_S",
        1800.0,
        seconds(at_least=0.001),
        """the longest a process waits for another live process's compile or tuning before doing
        it itself (a dead one's work is taken over at the next poll).""",
    )
    node_share: bool = NODE.setting(
        "KILN_NODE_SHARE",
        True,
        FLAG,
        """with ``KILN_NODE`` on, processes on different GPUs of one kind tuning the same kernel
        and key split its configs' benchmarks (docs/NODE.md); ``0``: one tunes, the others wait
        for its run.""",
    )
    node_share_wait_s: float = NODE.setting(
        "KILN_NODE_SHARE_WAIT_S",
        60.0,
        seconds(at_least=0.001),
        """how long the tuning process waits for a config another GPU's process is benchmarking
        before benchmarking it itself (a dead one's is re-run at once).""",
    )

    # --- the remote cache -------------------------------------------------------------------
    remote_cache: str | None = REMOTE.setting(
        "KILN_REMOTE_CACHE",
        None,
        REDIS_URL,
        """a Redis server shared by several machines, as a URL (``redis://[:password@]host:port/db``,
        ``rediss://`` for TLS, ``unix:///path.sock?db=0``); artifacts and finished tuning runs are
        read through it and written to it (docs/REMOTE_CACHE.md). Unset: none (and kiln never
        imports :mod:`triton_kiln.remote`).""",
        none="unset (no remote cache)",
    )
    remote_max_entry_mb: int = REMOTE.setting(
        "KILN_REMOTE_MAX_ENTRY_MB",
        16,
        mib(512, "MiB (Redis holds at most 512 MiB in one value)"),
        """MiB one artifact (all its files) may take in the remote cache; larger ones stay local
        only, and a remote entry or tuning run that declares more is refused before it is read.""",
    )
    remote_ttl_days: float | None = REMOTE.setting(
        "KILN_REMOTE_TTL_DAYS",
        30.0,
        DAYS,
        """days a remote entry lives after its last write or read (each hit renews it); ``0`` or
        ``none``: no expiry (then cap the server with ``maxmemory``).""",
        none="none (no expiry)",
    )
    remote_timeout_s: float = REMOTE.setting(
        "KILN_REMOTE_TIMEOUT_S",
        0.5,
        seconds(at_least=0.001, at_most=600.0),
        """deadline of each request to the remote cache (connecting, sending and the whole reply,
        however slowly the server sends it).""",
    )
    remote_retry_s: float = REMOTE.setting(
        "KILN_REMOTE_RETRY_S",
        60.0,
        seconds(at_least=0.001),
        """after the remote cache fails (unreachable, slow, an error), seconds kiln works locally
        before trying it again.""",
    )
    remote_key_file: Path | None = REMOTE.setting(
        "KILN_REMOTE_KEY_FILE",
        None,
        KEY_FILE,
        """a file holding a secret the machines share (at least 32 bytes, private to its owner);
        when set, kiln signs what it writes to the remote cache (HMAC-SHA256) and loads only what
        carries a valid signature. Unset: entries are checksummed, not signed.""",
        none="unset (entries not signed)",
    )

    # --- distributed compiles ---------------------------------------------------------------
    farm_standing: bool = FARM.setting(
        "KILN_FARM_STANDING",
        False,
        FLAG,
        """``1`` makes :class:`~triton_kiln.farm.RayCompilePool` (and ``kiln compile --ray``) use
        each node's standing compiler (``kiln farm up``): one warm kiln pool per node, shared by
        every driver and left running when a driver ends (docs/DISTRIBUTED.md); ``0``: each
        driver starts its own node actors and ends them.""",
    )

    # --- the command line -------------------------------------------------------------------
    debug: bool = COMMAND_LINE.setting(
        "KILN_DEBUG",
        False,
        FLAG,
        "``1`` makes the ``kiln`` command print the traceback behind an ``Error:`` line.",
    )

    def __post_init__(self) -> None:
        _convert_paths(self)
        _check_ranges(self)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def triton_key_dir(self) -> Path | None:
        """Where kiln keeps Triton's key for compile keys: ``cache_dir`` (``None``: no disk cache)."""
        return self.cache_dir if self.use_disk_cache else None


# --- the declarations, read back ------------------------------------------------------------------


@functools.cache
def declarations() -> Mapping[str, Setting]:
    """``{setting name: its declaration}``, in the order of :class:`Settings`."""
    return MappingProxyType({item.name: item.metadata[_DECLARATION] for item in dataclasses.fields(Settings)})


def variables() -> dict[str, str]:
    """``{setting name: its KILN_* variable}``, in the order of :class:`Settings`."""
    return {name: declared.variable for name, declared in declarations().items()}


def accepted_values() -> dict[str, str]:
    """``{setting name: what its KILN_* variable accepts}`` ("0 or 1", "a positive integer"...),
    in the order of :class:`Settings`: the words of the error a malformed value raises."""
    return {name: declared.kind.accepted for name, declared in declarations().items()}


def _in_message(declared: Setting, value: Any) -> str:
    """``value`` as a message shows it: a path as it is, anything else as its repr."""
    if isinstance(value, Path):
        return str(value)
    return repr(declared.shown(value) if isinstance(value, str) else value)


def _range_error(name: str, value: Any, *, from_env: bool) -> SettingsError | None:
    declared = declarations()[name]
    if declared.kind.check is None or (value is None and declared.nullable):
        return None
    problem = declared.kind.check(value)
    if not problem:
        return None
    if from_env:
        return SettingsError(f"{declared.variable}={_in_message(declared, value)} is not valid: {problem}.")
    return SettingsError(
        f"the setting {name}={_in_message(declared, value)} ({declared.variable}) is not valid: {problem}."
    )


def _convert_paths(values: Settings) -> None:
    """Keep a str given for a path setting (``scope(cache_dir="/x")``) as a Path."""
    for name, declared in declarations().items():
        if not declared.kind.path:
            continue
        value = getattr(values, name)
        if value is None and declared.nullable:
            continue
        text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
        if not isinstance(text, str) or not text.strip():
            what = "an empty path" if isinstance(text, str) else f"a {type(value).__name__}"
            raise SettingsError(
                f"the setting {name}={value!r} ({declared.variable}) is not valid: expected a path "
                f"(a str or pathlib.Path), got {what}."
            )
        object.__setattr__(values, name, Path(text).expanduser())


def _check_ranges(values: Settings) -> None:
    for name in declarations():
        error = _range_error(name, getattr(values, name), from_env=False)
        if error is not None:
            raise error


# --- reading the environment ----------------------------------------------------------------------


def parse_variable(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of setting ``name`` from its ``KILN_*`` variable alone (``None`` if unset or
    empty); :class:`SettingsError` naming the variable if it is malformed or out of range."""
    declared = declarations()[name]
    raw = (os.environ if environ is None else environ).get(declared.variable, "").strip()
    if not raw:
        return None
    try:
        value = declared.kind.parse(raw)
    except ValueError:
        shown = declared.shown(raw)  # never a password in a message
        raise SettingsError(
            f"{declared.variable}={shown!r} is not valid: expected {declared.kind.accepted}."
        ) from None
    error = _range_error(name, value, from_env=True)
    if error is not None:
        raise error
    return value


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings from ``KILN_*`` variables; unset or empty variables keep their defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, declared in declarations().items():
        if env.get(declared.variable, "").strip():
            values[name] = parse_variable(name, env)
    return Settings(**values)


def unknown_variables(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``{KILN_* name that is not a setting: the closest setting's variable, or None}``."""
    env = os.environ if environ is None else environ
    return unknown_names.unknown_variables(_known_variables(), env)


def warn_unknown_variables(environ: Mapping[str, str] | None = None) -> None:
    """Log each ``KILN_*`` variable that is not a setting, once per process (``kiln.settings``)."""
    env = os.environ if environ is None else environ
    unknown_names.warn_unknown_variables(_known_variables(), env)


@functools.cache
def _known_variables() -> frozenset[str]:
    return frozenset(variables().values())


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
    for name, declared in declarations().items():
        var = declared.variable
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


# --- the settings in force --------------------------------------------------------------------------

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
    names = {name for name, var in variables().items() if env.get(var, "").strip()}
    with _scopes_lock:
        for _, layer in _scopes:
            names.update(layer)
    return frozenset(names)


@contextlib.contextmanager
def scope(**overrides: Any) -> Iterator[Settings]:
    """Override settings for the duration of a ``with`` block (process-wide, nestable)."""
    unknown = set(overrides) - set(declarations())
    if unknown:
        raise SettingsError(f"unknown setting(s) {sorted(unknown)}; known: {list(declarations())}")
    token = object()
    with _scopes_lock:
        _scopes.append((token, overrides))
    try:
        yield current()
    finally:
        with _scopes_lock:
            _scopes[:] = [entry for entry in _scopes if entry[0] is not token]

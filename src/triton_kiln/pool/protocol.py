"""The messages kiln's compile processes exchange: one frozen dataclass per kind.

Two kinds of channel exist (see :mod:`triton_kiln.pool.pool` for the whole picture)::

    manager thread                              zygote
      ZygoteInit (first packet)            ->
      Fork(worker_id) + fds [chan, stderr] ->   fork()
      Kill(pid)                            ->   killpg(pid)
      Preload(modules)                     ->   import them
                                           <-   Ready(info) | Preloaded(results)
                                           <-   Forked(worker_id, pid) | ForkFailed(worker_id, reason)
                                           <-   Exited(pid, returncode)

    manager thread                              worker (one socket each)
                                           <-   Hello(pid)
      RunJob(job_id, request)              ->   compile
                                           <-   JobDone(job_id, artifact, seconds)
                                           <-   JobFailed(job_id, error, seconds)

* parent <-> zygote: an ``AF_UNIX``/``SOCK_SEQPACKET`` socket; each packet is one pickled
  message (:func:`pack` / :func:`unpack`), ``Fork`` packets carry the new worker's file
  descriptors (``SCM_RIGHTS``).
* parent <-> worker: an ``AF_UNIX``/``SOCK_STREAM`` socket per worker, carrying length-prefixed
  frames (:mod:`triton_kiln.framing`), because a reply (a cubin plus its IRs) can be large.

Only kiln's own processes sit on either end, and they run the same code, so pickle is safe
here; nothing read from *disk* is ever unpickled.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_kiln.pool.failures import RemoteError

if TYPE_CHECKING:
    from triton_kiln.artifacts.artifact import CompiledArtifact

# ------------------------------------------------------------------ parent -> zygote


@dataclass(frozen=True)
class ZygoteInit:
    """The zygote's first packet: where to find code and what to warm up."""

    sys_path: list[str]
    cwd: str
    triton_key_dir: Path | None  # where Triton's key is kept (see triton_compat.triton_key)
    warmup_target: tuple[str, Any, int] | None  # (backend, arch, warp_size)
    preload: list[str]
    tmp_root: str | None = None  # each worker gets a private TMPDIR under it, removed at its reaping
    nice: int = 0  # added to the zygote's niceness at start; its workers and compilers inherit it


@dataclass(frozen=True)
class Fork:
    """Fork a worker; the packet carries its channel and stderr fds."""

    worker_id: int


@dataclass(frozen=True)
class Kill:
    """Kill this worker's process group (ignored if the zygote already reaped it)."""

    pid: int


@dataclass(frozen=True)
class Preload:
    """Import these modules, so later forks inherit them."""

    modules: list[str]


ToZygote = Fork | Kill | Preload

# ------------------------------------------------------------------ zygote -> parent


@dataclass(frozen=True)
class Ready:
    """The zygote is warm (``info``: pid, Triton key, timings, preloads, threads)."""

    info: dict[str, Any]


@dataclass(frozen=True)
class Preloaded:
    """Each module asked for, with ``None`` or why it could not be preloaded."""

    results: dict[str, str | None]


@dataclass(frozen=True)
class Forked:
    worker_id: int
    pid: int


@dataclass(frozen=True)
class ForkFailed:
    worker_id: int
    reason: str


@dataclass(frozen=True)
class Exited:
    """A worker was reaped; ``returncode`` < 0 means killed by signal ``-returncode``."""

    pid: int
    returncode: int


FromZygote = Ready | Preloaded | Forked | ForkFailed | Exited

# ------------------------------------------------------------------ parent <-> worker


@dataclass(frozen=True)
class RunJob:
    """Compile the pickled :class:`~triton_kiln.compile.request.CompileRequest` ``request``."""

    job_id: int
    request: bytes


@dataclass(frozen=True)
class Hello:
    """The worker is up and waits for a job."""

    pid: int


@dataclass(frozen=True)
class JobDone:
    job_id: int
    artifact: CompiledArtifact
    seconds: float


@dataclass(frozen=True)
class JobFailed:
    job_id: int
    error: RemoteError
    seconds: float


FromWorker = Hello | JobDone | JobFailed


def pack(message: ZygoteInit | ToZygote | FromZygote) -> bytes:
    """One ``SOCK_SEQPACKET`` packet holding ``message``."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(packet: bytes) -> Any:
    """The message in one packet (the receiver checks its type)."""
    return pickle.loads(packet)

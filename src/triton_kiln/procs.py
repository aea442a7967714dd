"""Process care shared by the compile pool and the benchmark sandbox: spawning kiln's child
interpreters, parent-death signals, thread counts, wait statuses."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from triton_kiln.child_env import CHILD_FD_VARIABLES

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

# Variables that stop BLAS/OpenMP runtimes from starting thread pools on import. numpy and
# torch start one otherwise, and a process with threads must not fork.
SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}


def in_kiln_child() -> bool:
    """Whether this interpreter is one of kiln's own processes (a zygote, a worker, a sandbox)."""
    return any(var in os.environ for var in CHILD_FD_VARIABLES)


def set_parent_death_signal(expected_parent: int, sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` when our parent dies; exit now if it already has.

    Linux only. The signal follows the *thread* that created us, so kiln always creates
    processes from a thread that lives as long as the process it creates.
    """
    if not sys.platform.startswith("linux"):  # pragma: no cover - kiln runs on Linux
        return
    errno = _prctl(_PR_SET_PDEATHSIG, int(sig))
    if errno:
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(errno)}")
    if os.getppid() != expected_parent:
        os._exit(0)  # the parent died before the signal was armed


def become_child_subreaper() -> None:
    """Make this process the parent of its descendants that lose theirs (``prctl(2)``
    ``PR_SET_CHILD_SUBREAPER``), so it can reap them. Linux only; a kernel that refuses it
    leaves the orphans to the next subreaper up, or PID 1, as before."""
    if not sys.platform.startswith("linux"):  # pragma: no cover - kiln runs on Linux
        return
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _prctl(option: int, value: int) -> int:
    """``prctl(option, value, 0, 0, 0)`` (Linux): 0, or the errno it failed with."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return 0 if libc.prctl(option, value, 0, 0, 0) == 0 else ctypes.get_errno()


def parent_channel(
    fd_variable: str, parent_variable: str, sig: int = signal.SIGKILL
) -> tuple[socket.socket, int]:
    """In a child started by :func:`spawn_kiln_process`: its socket to the parent (the fd in
    ``fd_variable``) and the parent's pid (in ``parent_variable``), with ``sig`` armed for the
    parent's death. Both variables leave the environment, so the child's own children never
    see them."""
    channel_fd = int(os.environ.pop(fd_variable))
    parent = int(os.environ.pop(parent_variable))
    set_parent_death_signal(parent, sig)
    return socket.socket(fileno=channel_fd), parent


def thread_names() -> list[str]:
    """Names of this process's OS threads (``/proc/self/task``), the main thread included."""
    names: list[str] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # pragma: no cover - no procfs
        return ["?"]
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as handle:
                names.append(f"{handle.read().strip()}[{tid}]")
        except OSError:
            continue
    return names


def status_from_wait(status: int) -> int:
    """A ``waitpid`` status as a ``subprocess``-style return code (negative for signals)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return -1


def spawn_kiln_process(
    entry_module: str,
    channel_fd: int,
    env: dict[str, str],
    fd_variable: str,
    parent_variable: str,
    stdout: Any,
    stderr: Any,
) -> subprocess.Popen[bytes]:
    """Start ``python -c "from <entry_module> import main; main()"``: a fresh interpreter.

    Never a fork of this process (which may hold threads and a CUDA context). The child finds
    kiln on its path, inherits ``channel_fd`` only, and learns both through ``env``: the fd in
    ``fd_variable``, this process's pid in ``parent_variable`` (for its parent-death check).
    """
    env = dict(env)
    env[fd_variable] = str(channel_fd)
    env[parent_variable] = str(os.getpid())
    kiln_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (kiln_root, env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", f"from {entry_module} import main; main()"],
        pass_fds=[channel_fd],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        close_fds=True,
    )

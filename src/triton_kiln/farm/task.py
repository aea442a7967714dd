"""The body of one farm job, run by Ray in one of its worker processes (never in the caller).

::

    caller --Ray task(pickled request, timeout, preload, memory limit)--> Ray worker process
    Ray worker: one kiln CompilePool (1 worker), kept for the process's life
        |  submit(request) --> zygote --fork--> kiln worker: triton.compile
        |  abort / segfault / hang / memory: only the kiln worker dies; the pool returns
        |  kiln's typed error (WorkerCrashedError, CompileTimeoutError, WorkerMemoryError)
    caller <--wire reply (bytes and plain fields, or RemoteError)-- Ray worker

The Ray worker process itself never compiles, so a crash inside Triton never kills it: the task
always returns a reply, and Ray's own retry (which re-runs a task whose worker process died) is
kept for what it is good at, a lost node (see :mod:`kiln.farm.pool`). The pool is made once per
Ray worker process and kept warm (Ray reuses its worker processes for later tasks): only the
first task of each process pays for the zygote's start, and Triton's key is read from the
node's kiln cache, not hashed again (``bench/farm.py`` measures both).

The request is unpickled here (Ray worker process), as the local pool's caller would have built
it: a constexpr value whose unpickling crashes kills this Ray worker process, and the caller
reports that as a :class:`~kiln.errors.WorkerCrashedError` without retrying it.
"""

from __future__ import annotations

import atexit
import pickle
import socket
import threading
import time
from typing import Any

from triton_kiln.farm.wire import Reply, artifact_reply, error_reply

_LOCK = threading.Lock()
_POOL: Any = None  # this Ray worker process's CompilePool
_POOL_LIMIT: int | None = None  # the memory limit it was made with
_PRELOADED: set[str] = set()


def node_name() -> str:
    return socket.gethostname()


def local_pool(memory_limit_mb: int | None, preload: tuple[str, ...]) -> Any:
    """This process's warm CompilePool (one worker), made on first use; ``preload`` added to it."""
    global _POOL, _POOL_LIMIT
    from triton_kiln.pool.pool import CompilePool

    with _LOCK:
        if _POOL is not None and (_POOL.closing or memory_limit_mb != _POOL_LIMIT):
            _POOL.shutdown(wait=False, cancel_futures=True)
            _POOL = None
        if _POOL is None:
            _PRELOADED.clear()
            # The caller keeps the artifacts (its own store, written through to a remote one):
            # this pool keeps none on the node's disk.
            _POOL = CompilePool(
                workers=1,
                use_disk_cache=False,
                memory_limit_mb=memory_limit_mb,
                preload=preload,
            )
            _POOL_LIMIT = memory_limit_mb
            _PRELOADED.update(preload)
            atexit.register(_POOL.shutdown, wait=False, cancel_futures=True)
        missing = [m for m in preload if m not in _PRELOADED]
        if missing:
            _POOL.preload(missing)
            _PRELOADED.update(missing)
        return _POOL


def compile_job(
    payload: bytes, timeout_s: float, preload: tuple[str, ...], memory_limit_mb: int | None
) -> Reply:
    """Compile one pickled :class:`~kiln.compile.CompileRequest` in this process's kiln pool."""
    started = time.perf_counter()
    node = node_name()
    try:
        request = pickle.loads(payload)
        pool = local_pool(memory_limit_mb, preload)
        artifact = pool.submit(request, timeout_s=timeout_s).result()
    except BaseException as exc:
        return error_reply(exc, time.perf_counter() - started, node)
    return artifact_reply(artifact, node)

"""The process kiln's Inductor sidecar runs (``python -c "from ... import main; main()"``).

::

    parent (triton_kiln.inductor.sidecar)            this process                         kiln's pool
    ------------------------------            ------------                         -----------
    init {settings, log level, threads,  -->  the parent's kiln settings in force;
          preload}                            the preload modules imported;
                                              import Inductor, triton_kiln.inductor
                                              installed in-thread
                                        <--   ("ready", seconds)
    ("start_pool") (a graph is lowered)  -->  kiln's pool started  ---------------> zygote, workers
    ("job", id, pickled fn/args)  ------->    a thread: fn(*args) (Inductor's own
                                              _worker_compile_triton: module loaded,
                                              precompile(warm_cache_only=True)) --> every config
                                        <--   ("log", record) for each kiln record   <-- binaries
                                        <--   ("done", id, pickled ("ok", result)
                                                              or ("error", exception))
    EOF (parent closed or died)   ------->    pool shut down, exit 0

It imports torch and does, for each Triton compile job, what Inductor's own compile worker does,
with every compile in kiln's pool (whose workers never import torch): the kernel's module
executed, its configs described with Inductor's helpers and compiled, the kernel pickled. None of
that runs in the caller's process, whose main thread generates code meanwhile. A crash in a
compile is a kiln worker's; the parent's death kills this process (parent-death signal).
"""

from __future__ import annotations

import importlib
import logging
import pickle
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from triton_kiln import child_env
from triton_kiln.framing import encode, recv_frame
from triton_kiln.procs import parent_channel

FD_VARIABLE = child_env.INDUCTOR_SIDECAR_FD
PARENT_VARIABLE = child_env.INDUCTOR_SIDECAR_PARENT


class SidecarJobError(RuntimeError):
    """A job's exception could not be pickled; this carries its type and traceback as text."""


class _Channel:
    """The socket to the parent, one writer at a time."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        frame = encode(message)
        with self._lock:
            self.sock.sendall(frame)


class _Forwarding(logging.Handler):
    """Sends every ``kiln.*`` record to the parent, which logs it there (its handlers, its
    ``caplog``); the message is formatted here, so nothing unpicklable travels."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {
                "name": record.name,
                "levelno": record.levelno,
                "levelname": record.levelname,
                "msg": record.getMessage(),
                "args": None,
                "exc_text": self.format_exception(record),
                "pathname": record.pathname,
                "lineno": record.lineno,
                "funcName": record.funcName,
                "threadName": f"kiln-inductor-sidecar:{record.threadName}",
            }
            self.channel.send(("log", fields))
        except Exception:
            self.handleError(record)

    @staticmethod
    def format_exception(record: logging.LogRecord) -> str | None:
        if record.exc_info:
            return "".join(traceback.format_exception(*record.exc_info))
        return record.exc_text


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def run_job(channel: _Channel, job_id: int, blob: bytes) -> None:
    """One job: unpickle, call, send the pickled result or exception back."""
    try:
        fn, args, kwargs = pickle.loads(blob)
        payload = pickle.dumps(("ok", fn(*args, **kwargs)), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # every failure goes back to the waiting future
        try:
            payload = pickle.dumps(("error", exc), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            payload = pickle.dumps(
                ("error", SidecarJobError(_traceback(exc))), protocol=pickle.HIGHEST_PROTOCOL
            )
    channel.send(("done", job_id, payload))


def serve(channel: _Channel, init: dict[str, Any]) -> None:
    started = time.monotonic()
    from triton_kiln import settings

    with ExitStack() as stack:
        try:
            stack.enter_context(settings.scope(**init["settings"]))
            stack.enter_context(settings.scope(progress=False))  # the caller draws the line
            for module in init["preload"]:
                importlib.import_module(module)
            from triton_kiln.inductor import hooks
            from triton_kiln.pool import get_pool

            hooks.install(sandbox_benchmarks=False, sidecar=False)
        except BaseException as exc:  # the parent compiles in its own threads instead
            channel.send(("start_failed", _traceback(exc)))
            raise
        kiln_log = logging.getLogger("kiln")  # from here on, kiln's records are the parent's
        kiln_log.addHandler(_Forwarding(channel))
        kiln_log.setLevel(int(init["log_level"]))
        kiln_log.propagate = False  # printed by the parent, not twice here
        executor = stack.enter_context(
            ThreadPoolExecutor(max_workers=int(init["threads"]), thread_name_prefix="kiln-inductor")
        )
        channel.send(("ready", time.monotonic() - started))
        while True:
            try:
                message = recv_frame(channel.sock)
            except (EOFError, OSError):
                break  # the parent closed the channel, or died
            kind, job_id, blob = message
            if kind == "job":
                executor.submit(run_job, channel, job_id, blob)  # a first job starts the pool too
            elif kind == "start_pool":  # the parent lowers a graph: compiles follow
                get_pool().start()
        executor.shutdown(wait=False, cancel_futures=True)
        get_pool().shutdown(wait=False, cancel_futures=True)


def main() -> None:
    sock, _parent = parent_channel(FD_VARIABLE, PARENT_VARIABLE)
    channel = _Channel(sock)
    try:
        init = recv_frame(sock)
    except (EOFError, OSError):
        sys.exit(0)
    serve(channel, init)
    sys.stdout.flush()

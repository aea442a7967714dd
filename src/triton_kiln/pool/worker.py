"""A compile worker: forked from the zygote, runs one job at a time on its private channel.

::

    parent --RunJob(id, pickled request)--> worker          (its own socket; nobody else's)
    worker: unpickle request -> set TRITON_* env -> load kernel -> triton.compile -> artifact
    parent <--JobDone(id, artifact, s) | JobFailed(id, RemoteError, s)--

Its stdout and stderr are a pipe the parent reads, so the last lines a C++ assertion prints
before ``abort()`` reach the error the caller sees. A Python exception from the compile goes
back through :class:`~triton_kiln.pool.failures.RemoteError` (as itself when it survives a pickle
round trip, else as its type name, message and traceback text). The worker exits when its
channel closes, and is killed with the zygote.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import time

from triton_kiln.framing import encode, recv_frame
from triton_kiln.pool.failures import RemoteError
from triton_kiln.pool.protocol import Hello, JobDone, JobFailed, RunJob


def serve(chan_fd: int) -> None:
    chan = socket.socket(fileno=chan_fd)
    chan.sendall(encode(Hello(os.getpid())))
    while True:
        try:
            message = recv_frame(chan)
        except (EOFError, ConnectionResetError):
            return
        if not isinstance(message, RunJob):  # pragma: no cover - protocol error
            raise RuntimeError(f"unexpected message {message!r}")
        reply = run_job(message)
        try:
            data = encode(reply)
        except BaseException as exc:  # the result itself would not pickle
            data = encode(JobFailed(message.job_id, RemoteError.capture(exc, portable=False), reply.seconds))
        sys.stdout.flush()
        sys.stderr.flush()
        chan.sendall(data)


def run_job(job: RunJob) -> JobDone | JobFailed:
    started = time.perf_counter()
    try:
        request = pickle.loads(job.request)
        _apply_env(dict(request.triton_env))
        from triton_kiln import triton_compat
        from triton_kiln.artifacts.artifact import CompiledArtifact
        from triton_kiln.compile.gluon import language_source

        kernel = request.spec.load()
        # A @gluon.jit kernel compiles from Gluon's own AST source (triton_kiln.compile.gluon).
        source = language_source(request.ast_source(kernel), kernel)
        compiled = triton_compat.compile_kernel(source, request.target, dict(request.options))
        seconds = time.perf_counter() - started
        artifact = CompiledArtifact.from_triton(request.key, compiled, seconds)
        return JobDone(job.job_id, artifact, seconds)
    except BaseException as exc:
        return JobFailed(job.job_id, RemoteError.capture(exc), time.perf_counter() - started)


def _apply_env(triton_env: dict[str, str]) -> None:
    """Make this process's ``TRITON_*`` variables exactly those the job was submitted with."""
    for name in [k for k in os.environ if k.startswith("TRITON_")]:
        if name not in triton_env:
            del os.environ[name]
    os.environ.update(triton_env)

"""A compile worker: forked from the zygote, runs one job at a time on its private channel.

::

    parent --("job", id, pickled request)--> worker        (its own socket; nobody else's)
    worker: unpickle request -> set TRITON_* env -> load kernel -> triton.compile -> artifact
    parent <--("ok", id, artifact, s) | ("err", id, exception, type, message, traceback, s)--

Its stdout and stderr are a pipe the parent reads, so the last lines a C++ assertion prints
before ``abort()`` reach the error the caller sees. A Python exception from the compile is sent
back as itself when it survives a pickle round trip, else as its type name, message and
traceback text. The worker exits when its channel closes, and is killed with the zygote.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import time
import traceback
from typing import Any

from kiln.pool.protocol import W_ERR, W_HELLO, W_JOB, W_OK, encode, recv_frame


def serve(chan_fd: int) -> None:
    chan = socket.socket(fileno=chan_fd)
    chan.sendall(encode((W_HELLO, os.getpid())))
    while True:
        try:
            message = recv_frame(chan)
        except (EOFError, ConnectionResetError):
            return
        kind, job_id, payload = message
        if kind != W_JOB:  # pragma: no cover - protocol error
            raise RuntimeError(f"unexpected message {kind!r}")
        reply = run_job(job_id, payload)
        try:
            data = encode(reply)
        except BaseException as exc:  # the result itself would not pickle
            data = encode(_error_reply(job_id, exc, reply[-1], portable=False))
        sys.stdout.flush()
        sys.stderr.flush()
        chan.sendall(data)


def run_job(job_id: int, payload: bytes) -> tuple[Any, ...]:
    started = time.perf_counter()
    try:
        request = pickle.loads(payload)
        _apply_env(dict(request.triton_env))
        import triton

        from kiln.artifacts.artifact import CompiledArtifact
        from kiln.compile.gluon import language_source

        kernel = request.spec.load()
        # A @gluon.jit kernel compiles from Gluon's own AST source (kiln.compile.gluon).
        source = language_source(request.ast_source(kernel), kernel)
        compiled = triton.compile(source, target=request.target, options=dict(request.options))
        seconds = time.perf_counter() - started
        artifact = CompiledArtifact.from_triton(request.key, compiled, seconds)
        return (W_OK, job_id, artifact, seconds)
    except BaseException as exc:
        return _error_reply(job_id, exc, time.perf_counter() - started)


def _apply_env(triton_env: dict[str, str]) -> None:
    """Make this process's ``TRITON_*`` variables exactly those the job was submitted with."""
    for name in [k for k in os.environ if k.startswith("TRITON_")]:
        if name not in triton_env:
            del os.environ[name]
    os.environ.update(triton_env)


def _error_reply(job_id: int, exc: BaseException, seconds: float, portable: bool = True) -> tuple[Any, ...]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    blob = _portable_exception(exc) if portable else None
    type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    try:
        message = str(exc)
    except BaseException:
        message = repr(exc)
    return (W_ERR, job_id, blob, type_name, message, tb, seconds)


def _portable_exception(exc: BaseException) -> bytes | None:
    """``exc`` pickled so that it comes back as the same type, or ``None`` if it cannot.

    First as itself; failing that (exceptions whose constructor takes other arguments than
    ``args``, like Triton's ``CompilationError``), as class + args + picklable attributes,
    rebuilt without calling ``__init__`` by :func:`decode_exception`.
    """
    exc.__traceback__ = None
    state: dict[str, Any] = {}
    for name, value in vars(exc).items():
        try:
            pickle.dumps(value)
        except BaseException:
            continue
        state[name] = value
    for candidate in (("exc", exc), ("rebuild", type(exc), exc.args, state)):
        try:
            blob = pickle.dumps(candidate)
            back = decode_exception(blob)
        except BaseException:
            continue
        if type(back) is type(exc):
            return blob
    return None


def decode_exception(blob: bytes) -> BaseException:
    """Inverse of :func:`_portable_exception` (runs in the parent)."""
    decoded = pickle.loads(blob)
    if decoded[0] == "exc":
        exc: BaseException = decoded[1]
        return exc
    _, cls, args, state = decoded
    rebuilt: BaseException = cls.__new__(cls)
    rebuilt.args = args
    rebuilt.__dict__.update(state)
    return rebuilt

"""How a job's failure becomes the exception its caller raises: one codec, one mapping.

Two families of failure (see :mod:`triton_kiln.errors`):

* **The job's own exception** travels as a :class:`RemoteError`, the pool's one exception
  codec. The worker captures it (:meth:`RemoteError.capture`: pickled as itself, else as class +
  args + picklable attributes, else only as text); the manager rebuilds it
  (:meth:`RemoteError.rebuild`): the original type with the worker's traceback as
  ``__cause__``, or :class:`~triton_kiln.errors.RemoteCompileError` when the parent cannot rebuild it.
* **A worker's death** becomes kiln's own error (:func:`death_error`): a timeout kill is a
  :class:`~triton_kiln.errors.CompileTimeoutError`, a memory kill a
  :class:`~triton_kiln.errors.WorkerMemoryError`, anything else a
  :class:`~triton_kiln.errors.WorkerCrashedError`, each with the seconds, exit status and the last
  lines the worker wrote to stderr.

::

    worker: exception --RemoteError.capture--> JobFailed(job_id, error, seconds) --> manager
    manager: error.rebuild(job, tail) --> Future.set_exception --> caller raises it
    manager: worker exited (+ kill reason) --death_error--> Future.set_exception
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from triton_kiln.errors import (
    CompileTimeoutError,
    JobInfo,
    KilnError,
    RemoteCompileError,
    RemoteTraceback,
    WorkerCrashedError,
    WorkerMemoryError,
)

KILL_TIMEOUT = "timeout"  # why the manager had a worker killed
KILL_MEMORY = "memory"


@dataclass(frozen=True)
class RemoteError:
    """A worker's exception as it crosses to the parent.

    ``blob`` rebuilds the exception as its own type (``None`` when it cannot cross);
    ``type_name``, ``message`` and ``traceback`` always describe it as text.
    """

    blob: bytes | None
    type_name: str
    message: str
    traceback: str

    @classmethod
    def capture(cls, exc: BaseException, *, portable: bool = True) -> RemoteError:
        """Describe ``exc`` (in the worker); ``portable=False`` keeps the text only."""
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        blob = _portable_exception(exc) if portable else None
        type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        try:
            message = str(exc)
        except BaseException:
            message = repr(exc)
        return cls(blob, type_name, message, tb)

    def rebuild(self, job: JobInfo, seconds: float, stderr_tail: Sequence[str]) -> BaseException:
        """The exception the caller raises (in the parent)."""
        if self.blob is not None:
            try:
                exc = decode_exception(self.blob)
                exc.__cause__ = RemoteTraceback(self.traceback)
                return exc
            except Exception:
                pass  # the parent cannot rebuild it (class not importable here): keep it as text
        return RemoteCompileError(
            job,
            seconds,
            tuple(stderr_tail),
            exc_type=self.type_name,
            exc_message=self.message,
            remote_traceback=self.traceback,
        )


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
    """Inverse of :func:`_portable_exception`."""
    decoded = pickle.loads(blob)
    if decoded[0] == "exc":
        exc: BaseException = decoded[1]
        return exc
    _, cls, args, state = decoded
    rebuilt: BaseException = cls.__new__(cls)
    rebuilt.args = args
    rebuilt.__dict__.update(state)
    return rebuilt


def death_error(
    job: JobInfo,
    seconds: float,
    stderr_tail: Sequence[str],
    returncode: int | None,
    *,
    kill_reason: str | None,
    timeout_s: float,
    peak_rss: int,
    memory_limit_mb: int | None,
) -> KilnError:
    """The error of a job whose worker died (killed by kiln for ``kill_reason``, or crashed)."""
    tail = tuple(stderr_tail)
    if kill_reason == KILL_TIMEOUT:
        return CompileTimeoutError(job, seconds, tail, returncode, detail=f"the limit is {timeout_s:g} s")
    if kill_reason == KILL_MEMORY:
        peak = peak_rss / 2**20
        return WorkerMemoryError(
            job,
            seconds,
            tail,
            returncode,
            detail=f"it reached {peak:.0f} MiB; the limit is {memory_limit_mb} MiB",
        )
    return WorkerCrashedError(job, seconds, tail, returncode)

"""kiln's exceptions.

Two families reach a caller:

* **The job's own exception.** A Python-level error raised while compiling (a
  ``CompilationError`` in the kernel, a bad constexpr) comes back as its original type, with
  the worker's traceback attached as ``__cause__`` (a :class:`RemoteTraceback`). If that
  exception cannot cross a process boundary it degrades to :class:`RemoteCompileError`,
  which keeps its type name, message and traceback as text.
* **kiln's own failures**, all subclasses of :class:`KilnError`. Those about one job
  (:class:`JobFailure` and its subclasses) carry the job's description, the seconds spent,
  the signal or exit code and the last lines the worker wrote to stderr, so a C++ assertion's
  text reaches the user.

Every exception here pickles (``__reduce__`` rebuilds it from its fields), so it survives
being sent between processes.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_LIKELY_CAUSE: dict[int, str] = {
    signal.SIGABRT: "an assertion or abort() in native code (Triton's MLIR/LLVM compiler, ptxas)",
    signal.SIGSEGV: "a segmentation fault in native code",
    signal.SIGBUS: "a bus error in native code (bad memory mapping)",
    signal.SIGFPE: "an arithmetic fault in native code",
    signal.SIGILL: "an illegal instruction in native code",
    signal.SIGKILL: "a SIGKILL from outside kiln (the kernel's OOM killer, or a user)",
    signal.SIGTERM: "a SIGTERM from outside kiln",
}


def describe_exit(returncode: int | None) -> str:
    """``"SIGABRT (signal 6)"`` or ``"exit code 3"`` for a ``waitpid``-style return code."""
    if returncode is None:
        return "an unknown exit status"
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"{name} (signal {signum})"
    return f"exit code {returncode}"


def likely_cause(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    return _LIKELY_CAUSE.get(-returncode)


def format_seconds(seconds: float) -> str:
    """``3.1 s``; under 0.1 s in milliseconds (``31 ms``), so a fast crash never reads ``0.0 s``."""
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1000:.0f} ms"


class KilnError(Exception):
    """Base class of every error kiln raises itself."""


class SettingsError(KilnError, ValueError):
    """A ``KILN_*`` variable or a setting has a value kiln cannot use."""


class TargetError(KilnError):
    """No compile target was given and none could be found on this machine."""


class NoGPUError(TargetError):
    """A call needs to run kernels (a tuning run benchmarks every config) and this machine has no
    GPU of the target's kind. Compiling needs none: the message says what to use instead."""


class RequestError(KilnError, ValueError):
    """A compile request is malformed (unknown option, signature that does not match the kernel...)."""


class KernelSpecError(KilnError):
    """A kernel cannot be sent to a worker process (it reads a global kiln cannot transfer)."""


class ArtifactError(KilnError):
    """A compiled artifact is incomplete, corrupt or does not match what it claims to be."""


class CacheDirError(ArtifactError):
    """The cache directory is not safe to use (another user owns it, or others can write it)."""


class MissingMetadataError(ArtifactError, KeyError):
    """A metadata field needed to launch a kernel is missing. kiln never guesses a default."""

    def __init__(self, field_name: str, kernel: str) -> None:
        self.field_name = field_name
        self.kernel = kernel
        super().__init__(
            f"metadata of kernel {kernel!r} lacks the field {field_name!r}, which is needed to launch "
            f"it; kiln does not invent defaults. Recompile the kernel with this kiln and Triton version."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field_name, self.kernel))

    def __str__(self) -> str:
        return str(self.args[0])


class PoolClosedError(KilnError, RuntimeError):
    """The compile pool was shut down; no new jobs are accepted."""


class ZygoteError(KilnError):
    """The zygote (the process workers fork from) could not be started."""

    def __init__(self, reason: str, stderr_tail: Sequence[str] = ()) -> None:
        self.reason = reason
        self.stderr_tail = tuple(stderr_tail)
        message = f"kiln's zygote process could not start: {reason}"
        if self.stderr_tail:
            message += "\nIt printed:\n    " + "\n    ".join(self.stderr_tail)
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.stderr_tail))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, as text (attached as ``__cause__``)."""

    def __init__(self, tb: str) -> None:
        self.tb = tb
        super().__init__(tb)

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


@dataclass(frozen=True)
class JobInfo:
    """What a failure message says about the job: enough to find the config again."""

    kernel: str
    constexprs: tuple[tuple[str, Any], ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    key: str = ""
    target: str = ""

    def label(self) -> str:
        parts = [
            f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in (*self.constexprs, *self.options)
        ]
        return f"{self.kernel}[{', '.join(parts)}]"


@dataclass
class _FailureFields:
    job: JobInfo
    seconds: float
    stderr_tail: tuple[str, ...] = field(default_factory=tuple)


class JobFailure(KilnError):
    """A job failed because of what happened to its worker, not because of a Python error."""

    what = "failed"
    advice = "the job was skipped; the pool goes on serving other jobs"

    def __init__(
        self,
        job: JobInfo,
        seconds: float,
        stderr_tail: Sequence[str] = (),
        returncode: int | None = None,
        detail: str = "",
    ) -> None:
        self.job = job
        self.seconds = seconds
        self.stderr_tail = tuple(stderr_tail)
        self.returncode = returncode
        self.detail = detail
        super().__init__(self._message())

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return None

    @property
    def exit_code(self) -> int | None:
        return self.returncode if self.returncode is not None and self.returncode >= 0 else None

    def headline(self) -> str:
        """The failure in one line, without the worker's output or advice (for callers that add their own)."""
        return f"compile of {self.job.label()} {self.what} after {format_seconds(self.seconds)}"

    def _message(self, advice: str | None = None) -> str:
        parts = [self.headline()]
        if self.detail:
            parts.append(self.detail)
        if self.stderr_tail:
            parts.append("the worker printed:\n    " + "\n    ".join(self.stderr_tail))
        parts.append(self.advice if advice is None else advice)
        return "; ".join(parts[:-1]) + f"\n{parts[-1]}." if len(parts) > 1 else parts[0]

    def message_with(self, advice: str) -> str:
        """This failure's message with ``advice`` as its last line instead of the class's own,
        for a caller that knows more (``kiln demo``, whose crash and hang are deliberate)."""
        return self._message(advice)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self.job, self.seconds, self.stderr_tail, self.returncode, self.detail),
        )


class WorkerCrashedError(JobFailure):
    """The worker compiling this job died (a signal such as SIGABRT/SIGSEGV, or an unexpected exit)."""

    def headline(self) -> str:
        how = describe_exit(self.returncode)
        verb = "was killed by" if self.returncode is not None and self.returncode < 0 else "ended with"
        line = f"compile of {self.job.label()} {verb} {how} after {format_seconds(self.seconds)}"
        cause = likely_cause(self.returncode)
        return f"{line} ({cause})" if cause else line

    advice = (
        "the config was skipped and its worker replaced; if every config of this kernel crashes, "
        "report the printed assertion to Triton with the kernel and options above"
    )


class CompileTimeoutError(JobFailure, TimeoutError):
    """The job ran past its timeout; its worker's process group was killed."""

    what = "timed out"
    advice = (
        "its worker's process group was killed and replaced; if the kernel is just slow to "
        "compile, raise the limit with KILN_JOB_TIMEOUT_S, CompilePool(job_timeout_s=...) or "
        "pool.submit(request, timeout_s=...)"
    )


class WorkerMemoryError(JobFailure, MemoryError):
    """The worker's resident memory passed the configured limit; its process group was killed."""

    what = "passed the memory limit"
    advice = "its worker was killed and replaced; raise KILN_MEMORY_LIMIT_MB if the kernel needs more"


class ZygoteDiedError(JobFailure):
    """The zygote died while this job ran, twice; kiln stopped retrying the job."""

    what = "was lost when kiln's zygote process died"
    advice = "kiln retried it once on a fresh zygote and gave up; find what kills kiln's processes"


def zygote_death_detail(returncode: int | None) -> str:
    """What the manager knows about how the zygote died (for :class:`ZygoteDiedError`)."""
    if returncode is None:
        return "the zygote closed its socket and its exit status could not be read"
    verb = "was killed by" if returncode < 0 else "ended with"
    line = f"the zygote {verb} {describe_exit(returncode)}"
    if returncode == -signal.SIGKILL:
        line += " (sent by the kernel's out-of-memory killer, a container limit, or a kill -9)"
    return line


class RemoteCompileError(JobFailure):
    """The job raised an exception that could not be sent back as itself; type and text are kept."""

    what = "raised an exception that could not be sent back as itself"
    advice = "the original type name, message and traceback are above"

    def __init__(
        self,
        job: JobInfo,
        seconds: float,
        stderr_tail: Sequence[str] = (),
        returncode: int | None = None,
        detail: str = "",
        exc_type: str = "",
        exc_message: str = "",
        remote_traceback: str = "",
    ) -> None:
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        if not detail:
            detail = f"{exc_type}: {exc_message}"
        super().__init__(job, seconds, stderr_tail, returncode, detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (
                self.job,
                self.seconds,
                self.stderr_tail,
                self.returncode,
                self.detail,
                self.exc_type,
                self.exc_message,
                self.remote_traceback,
            ),
        )


def is_out_of_resources(exc: BaseException) -> bool:
    """Whether ``exc`` is Triton's ``OutOfResources`` or ``PTXASError`` (or a subclass): the
    config asks for more shared memory, registers or threads than the device has, or ptxas
    refused it.

    The one test kiln uses for it, in the caller, the autotuner and the GPU sandbox alike. It
    goes by class name along the exception's MRO, so it needs no import of Triton (this module
    is loaded where Triton is not) and also matches an exception rebuilt from a worker.
    """
    return any(cls.__name__ in ("OutOfResources", "PTXASError") for cls in type(exc).__mro__)

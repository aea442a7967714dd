"""What a call sandbox (:mod:`.call_client` / :mod:`.call_worker`) says, and how a call can fail.

One dataclass per message kind (the frames of :mod:`triton_kiln.framing` carry them as they are):

* client -> worker: :class:`CallInit` (once, first), then one :class:`CallItem` per call;
* worker -> client: :class:`CallHello` (ready), then per call :class:`CallReturned` or
  :class:`CallRaised`; or, at start, :class:`CallStartFailed`.

A call's callable travels as bytes pickled by the client (:attr:`CallItem.payload`), so a callable
that cannot be pickled fails in the caller's process, and one that cannot be unpickled in the
worker is that call's :class:`CallRaised`, not the worker's death.

Failures are kiln's own exceptions (:class:`CallFailure` and its subclasses); each names the call,
the seconds it took, what ended it and the worker's last stderr lines, and pickles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.errors import KilnError, describe_exit, format_seconds, likely_cause
from triton_kiln.sandbox.torch_worker import STICKY_EXIT, STICKY_MARKERS


def is_sticky(error_text: str) -> bool:
    """Whether an error's text is a sticky CUDA error: the process's context is gone for good."""
    lowered = error_text.lower()
    return any(marker.lower() in lowered for marker in STICKY_MARKERS)


@dataclass(frozen=True)
class CallInit:
    """The worker's start: its ``sys.path``, variables to set, and a warm-up callable (pickled)."""

    sys_path: list[str]
    env: dict[str, str]
    warmup: bytes | None = None


@dataclass(frozen=True)
class CallHello:
    pid: int


@dataclass(frozen=True)
class CallStartFailed:
    """The warm-up raised: the worker exits after sending this."""

    error: str
    traceback: str


@dataclass(frozen=True)
class CallItem:
    """One call: ``pickle.loads(payload)()`` with ``env`` set first."""

    label: str
    payload: bytes
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CallReturned:
    value: Any


@dataclass(frozen=True)
class CallRaised:
    """The callable raised ``error`` (type and message); ``sticky``: a sticky CUDA error, after
    which the worker exits with :data:`STICKY_EXIT`."""

    error: str
    traceback: str
    sticky: bool


@dataclass(frozen=True)
class CallOutcome:
    """What :meth:`~triton_kiln.sandbox.call_client.CallSandbox.call` returns: a value or a failure."""

    value: Any = None
    failure: CallFailure | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None


class CallFailure(KilnError, RuntimeError):
    """A call in the sandbox did not return a value (see the subclasses)."""

    what = "failed"
    advice = "it was skipped; the sandbox goes on with the next call"

    def __init__(
        self,
        label: str,
        seconds: float,
        detail: str = "",
        stderr_tail: Sequence[str] = (),
        returncode: int | None = None,
    ) -> None:
        self.label = label
        self.seconds = seconds
        self.detail = detail
        self.stderr_tail = tuple(stderr_tail)
        self.returncode = returncode
        super().__init__(self._message())

    def headline(self) -> str:
        return f"{self.label} {self.what} after {format_seconds(self.seconds)}"

    def _message(self) -> str:
        parts = [self.headline()]
        if self.detail:
            parts.append(self.detail)
        if self.stderr_tail:
            parts.append("the sandbox printed: " + " | ".join(self.stderr_tail[-3:]))
        return "; ".join(parts) + f". {self.advice[0].upper()}{self.advice[1:]}."

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.label, self.seconds, self.detail, self.stderr_tail, self.returncode))


class CallCrashedError(CallFailure):
    """The sandbox process died during the call (a signal, an exit) or hit a sticky CUDA error
    (an illegal memory access...); it was replaced."""

    advice = (
        "it was skipped and the sandbox replaced (the caller's process and CUDA context were not "
        "touched); the next call runs in a fresh sandbox"
    )

    def headline(self) -> str:
        if self.returncode == STICKY_EXIT:
            return f"{self.label} hit a sticky CUDA error after {format_seconds(self.seconds)}"
        how = describe_exit(self.returncode)
        verb = "was killed by" if self.returncode is not None and self.returncode < 0 else "ended with"
        line = f"{self.label}: the sandbox {verb} {how} after {format_seconds(self.seconds)}"
        cause = likely_cause(self.returncode)
        return f"{line} ({cause})" if cause else line


class CallTimeoutError(CallFailure, TimeoutError):
    """The call ran past its timeout; the sandbox was killed and replaced."""

    what = "did not finish in time"
    advice = (
        "the sandbox was killed and replaced; if it is just slow, raise the limit with KILN_BENCH_TIMEOUT_S"
    )


class CallRaisedError(CallFailure):
    """The callable raised (its type, message and traceback are in :attr:`detail`); the sandbox
    is kept."""

    what = "raised"
    advice = "it was skipped; the sandbox goes on with the next call"


class SandboxStartError(CallFailure):
    """The sandbox process could not start (torch missing, no GPU, its warm-up raised, or it did not
    answer in time)."""

    what = "could not run: the sandbox did not start"
    advice = (
        "it was skipped; check that this interpreter can import torch and use the GPU in a fresh "
        "process (the sandbox's last lines say why it could not)"
    )

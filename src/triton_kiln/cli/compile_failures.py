"""How ``kiln compile`` says a failed compile: its cause in the summary (:func:`failure_cause`)
and its line (:func:`failure_line`), from the exception the pool gave back."""

from __future__ import annotations

import re

from triton_kiln.errors import RemoteTraceback


def failure_cause(exc: BaseException) -> str:
    """A failure's cause for the summary: the signal, the limit, or the exception's type."""
    from triton_kiln.errors import (
        CompileTimeoutError,
        WorkerCrashedError,
        WorkerMemoryError,
        describe_exit,
        is_out_of_resources,
    )

    if isinstance(exc, CompileTimeoutError):
        return "timed out"
    if isinstance(exc, WorkerMemoryError):
        return "memory limit"
    if isinstance(exc, WorkerCrashedError):
        return f"crashed: {exc.signal_name or describe_exit(exc.returncode)}"
    if is_out_of_resources(exc):
        return "out of resources"
    return type(exc).__name__


_LOCATION = re.compile(r"at \d+:\d+:")  # how Triton's CompilationError begins: "at 2:38:"
_CHAINED = re.compile(
    r"\n(?:The above exception was the direct cause of the following exception|"
    r"During handling of the above exception, another exception occurred):\n"
)


def failure_line(exc: BaseException) -> str:
    """A failed config's line: the message's first line, or for Triton's ``CompilationError``
    (``at 2:38:``, the source, a caret, then the reason) the location and the reason. An error in
    a called ``@triton.jit`` function ends at the caret: the reason is the innermost error's."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if not _LOCATION.fullmatch(lines[0].strip()) or len(lines) < 2:
        return lines[0]
    reason = lines[-1].strip()
    if set(reason) <= {"^", "~", " "}:
        reason = _innermost_reason(exc) or "(no reason given)"
    return f"{lines[0].strip()} {reason}"


def _innermost_reason(exc: BaseException) -> str | None:
    """The last line of the innermost error under ``exc`` that gives a reason (its causes, and
    those in a worker's traceback)."""
    chain: list[str] = []  # the outermost first
    cause = exc.__cause__
    while cause is not None:
        # a worker's traceback text lists a chain's innermost exception first
        chain += reversed(_CHAINED.split(cause.tb)) if isinstance(cause, RemoteTraceback) else [str(cause)]
        cause = cause.__cause__
    for text in reversed(chain):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines and not set(lines[-1]) <= {"^", "~", " "}:
            return lines[-1]
    return None

"""``ast.parse`` for kiln's threads: one at a time, and again after CPython's transient error.

CPython 3.11 keeps the AST converter's recursion counter per interpreter, not per thread, so two
threads parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch``
(seen on CI: four of Inductor's compile threads describing kernels at once; kiln then left that
config to Inductor in the caller's process). kiln's own parses take a lock; one that still meets
the error (another library's thread parsing) is parsed again, up to ``RETRIES`` times.
"""

from __future__ import annotations

import ast
import threading

RETRIES = 3
"""Parses again after the transient ``SystemError``, before it is raised."""

_LOCK = threading.Lock()
_TRANSIENT = "recursion depth mismatch"


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, serialized with kiln's other parses and retried on the transient error."""
    for _ in range(RETRIES):
        try:
            with _LOCK:
                return ast.parse(source)
        except SystemError as exc:
            if _TRANSIENT not in str(exc):
                raise
    with _LOCK:  # the last try: whatever it raises is the caller's
        return ast.parse(source)

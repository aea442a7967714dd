"""``ast.parse`` for kiln's threads, and a compile's description made again, after CPython's
transient ``SystemError``.

CPython 3.11 keeps the AST converter's recursion counter per interpreter, not per thread, so two
threads parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905; seen on CI: four of Inductor's compile threads describing kernels at
once, kiln then leaving that config to Inductor in the caller's process, where a compiler crash
kills it). kiln's own parses take a lock (:func:`parse`); one that still meets the error
(another library's thread parsing) is parsed again, up to ``RETRIES`` times. Parses kiln does not
make, Triton's of a kernel's source for its key among them, happen while a routed compile is
described: :func:`again_after_ast_race` describes it again.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from typing import TypeVar

RETRIES = 3
"""Parses (or descriptions) again after the transient ``SystemError``, before it is raised."""

_LOCK = threading.Lock()
_TRANSIENT = "recursion depth mismatch"

_T = TypeVar("_T")


def again_after_ast_race(work: Callable[[], _T]) -> _T:
    """``work()``, called again (up to ``RETRIES`` times) while it raises the transient
    ``SystemError``; any other exception, and the last try's, is the caller's. ``work`` must be
    safe to repeat from its start (a compile's description is)."""
    for _ in range(RETRIES):
        try:
            return work()
        except SystemError as exc:
            if _TRANSIENT not in str(exc):
                raise
    return work()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, serialized with kiln's other parses and retried on the transient error."""

    def locked() -> ast.Module:
        with _LOCK:
            return ast.parse(source)

    return again_after_ast_race(locked)

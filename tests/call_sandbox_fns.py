"""Picklable callables for tests/test_call_sandbox.py (the sandbox process imports this module)."""

from __future__ import annotations

import os


def pid() -> int:
    return os.getpid()


def variable() -> str | None:
    return os.environ.get("KILN_TEST_CALL_VALUE")


def warmup_fails() -> None:
    raise OSError("no device here (the warm-up's own error)")


def unpicklable_result() -> object:
    return lambda: None

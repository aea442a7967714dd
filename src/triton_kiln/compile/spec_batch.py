"""Describing a kernel once for a batch of requests: :meth:`KernelSpec.batch`.

:meth:`~triton_kiln.compile.kernel_spec.KernelSpec.of` reads a kernel's globals each time it is called
(they may change between calls). A caller that makes the requests of one kernel's configs
together, with nothing able to change those globals in between (Inductor's configs of a
kernel), opens a batch: inside it, each ``@jit`` function is described once (a few ms a config).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

_BATCH: contextvars.ContextVar[dict[int, Any] | None] = contextvars.ContextVar(
    "kiln_kernel_spec_batch", default=None
)


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Within this block (this thread or task), each ``@jit`` function is described once."""
    token = _BATCH.set({})
    try:
        yield
    finally:
        _BATCH.reset(token)


def current() -> dict[int, Any] | None:
    """The open batch's descriptions by ``id`` of the function, or ``None`` outside a batch."""
    return _BATCH.get()

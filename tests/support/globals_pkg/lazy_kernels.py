"""A kernel of a module with ``from __future__ import annotations``: its annotations stay
strings, and the worker must rebuild them as strings too."""

from __future__ import annotations

import triton
import triton.language as tl
from triton import language as lang

from .config import QUANT_GROUP as QG


@triton.jit
def lazy_annotations(x_ptr, n, BLOCK: lang.constexpr, GROUP: lang.constexpr = QG):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GROUP, mask=offs < n)

"""Kernels as libraries write them: no ``from __future__ import annotations`` (so Python
evaluates the annotations at definition time), defaults naming module and imported constants."""

import triton
import triton.language as tl
from triton import language as lang

from . import config
from .config import QUANT_GROUP, RCP_LN2, SCALE
from .config import QUANT_GROUP as QG
from .helpers import group_scale
from .helpers import group_scale as scale_by_group

LOCAL_GROUP = 16


@triton.jit
def imported_default(x_ptr, n, BLOCK: tl.constexpr, GROUP: tl.constexpr = QUANT_GROUP):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GROUP, mask=offs < n)


@triton.jit
def module_default(x_ptr, n, BLOCK: tl.constexpr, GROUP: tl.constexpr = LOCAL_GROUP):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GROUP, mask=offs < n)


@triton.jit
def aliased_default(x_ptr, n, BLOCK: tl.constexpr, GROUP: tl.constexpr = QG):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GROUP, mask=offs < n)


@triton.jit
def attribute_default(x_ptr, n, BLOCK: tl.constexpr, GROUP: tl.constexpr = config.QUANT_GROUP):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GROUP, mask=offs < n)


@triton.jit
def expression_default(x_ptr, n, BLOCK: tl.constexpr, GATE: tl.constexpr = 2.0 * RCP_LN2):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GATE, mask=offs < n)


@triton.jit
def constexpr_global(x_ptr, n, BLOCK: tl.constexpr, FACTOR: tl.constexpr = SCALE):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * FACTOR + SCALE, mask=offs < n)


@triton.jit
def helper_default(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, group_scale(x) + scale_by_group(x, 2), mask=offs < n)


@triton.jit
def language_alias(x_ptr, n, BLOCK: lang.constexpr, GROUP: lang.constexpr = QUANT_GROUP):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * GROUP, mask=offs < n)


@triton.jit
def shadowing_default(x_ptr, n, BLOCK: tl.constexpr, QUANT_GROUP: tl.constexpr = QUANT_GROUP):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * QUANT_GROUP, mask=offs < n)

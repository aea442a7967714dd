"""Real Gluon kernels the tests compile for sm_90 (no GPU needed), valid and faulty.

``gluon_add`` is a valid elementwise add with an explicit blocked layout. ``fault_abort`` and
``fault_segv`` are valid Gluon kernels whose names make the stage hook of ``faults.py`` (when
that module is loaded in the worker, e.g. preloaded) abort or segfault inside Triton's compile,
after Gluon's frontend ran. ``add_source`` is one Python function that the tests wrap with both
``triton.jit`` and ``gluon.jit``: same source, different languages.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

WARPS = gl.constexpr(4)


@gluon.constexpr_function
def block_for(n_per_thread):
    return n_per_thread * 32 * 4


@gluon.jit
def gluon_add(x_ptr, y_ptr, out_ptr, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * WARPS)], [32], [WARPS], [0])
    offsets = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offsets < n
    x = gl.load(x_ptr + offsets, mask=mask)
    y = gl.load(y_ptr + offsets, mask=mask)
    gl.store(out_ptr + offsets, x + y, mask=mask)


@gluon.jit
def gluon_scale(x_ptr, out_ptr, n, PER_THREAD: gl.constexpr):
    BLOCK: gl.constexpr = block_for(PER_THREAD)
    layout: gl.constexpr = gl.BlockedLayout([PER_THREAD], [32], [WARPS], [0])
    offsets = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offsets < n
    gl.store(out_ptr + offsets, gl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)


@gluon.jit
def fault_abort(x_ptr, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    offsets = gl.arange(0, BLOCK, layout=layout)
    gl.store(x_ptr + offsets, gl.load(x_ptr + offsets) + 1.0)


@gluon.jit
def fault_segv(x_ptr, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    offsets = gl.arange(0, BLOCK, layout=layout)
    gl.store(x_ptr + offsets, gl.load(x_ptr + offsets) + 1.0)


def add_source(x_ptr, y_ptr, out_ptr, n, BLOCK: gl.constexpr):
    offsets = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    mask = offsets < n
    gl.store(out_ptr + offsets, gl.load(x_ptr + offsets, mask=mask) + gl.load(y_ptr + offsets, mask=mask))

"""Constants the package's kernels name (in their defaults and bodies)."""

import triton.language as tl

QUANT_GROUP = 64
RCP_LN2 = 1.4426950408889634
SCALE = tl.constexpr(3.0)

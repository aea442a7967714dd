"""``@jit`` helpers whose own defaults name an imported constant."""

import triton
import triton.language as tl

from .config import QUANT_GROUP


@triton.jit
def group_scale(x, GROUP: tl.constexpr = QUANT_GROUP):
    return x * GROUP

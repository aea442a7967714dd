"""The output check's kernel: one pass over an output, a representative and the argument before
the run, reduced to the few numbers the rule needs (:mod:`triton_kiln.sandbox.device_summary`).

The native sandbox launches it through kiln's C launcher like any compiled config; it is
compiled by kiln's compile pool for the device's target (once per machine: the artifact lands
in kiln's disk cache) and never imported by the sandbox process itself. One variant per storage
kind (:data:`VARIANTS`): the pointers are typed by the output's dtype, ``KIND`` says how to read
the elements. Each program walks a grid-stride loop over the elements and writes one row of
:data:`SLOTS` float64 partials; the host reduces the rows (a few kilobytes) into a summary.

Slots of a row (counts are exact in float64 up to 2**53 elements)::

    0 DIFFER      elements whose bits differ (bool: whose truth differs)
    1 FAST_BAD    float: |out - ref| in the wide type (fp32 for 16-bit, fp64 otherwise) is NaN/Inf
    2 FAST_MAX    float: max of those differences where finite
    3 FAST_SCALE  float: max |ref| in the wide type where finite
    4 NAN_NEW     float: out is NaN where ref is not
    5 BOTH        float: neither is NaN
    6 RARE_NAN    float: where BOTH, |out - ref| in float64 is NaN (Inf - Inf)
    7 RARE_MAX    float: where BOTH, max |out - ref| in float64 that is not NaN (may be Inf)
    8 RARE_SCALE  float: where BOTH, max |ref| in float64 (may be Inf)
    9 NONFINITE   float: out is NaN/Inf where the argument before the run was finite
"""

# x != x is how a Triton kernel finds NaN; KIND tests stay plain comparisons (Triton compiles them)
# ruff: noqa: PLR0124, PLR1714

from __future__ import annotations

import triton
import triton.language as tl

SLOTS = 10
BLOCK = 1024
MAX_PROGRAMS = 264  # rows of partials: 2 per SM of an H100; 21 KB to the host per comparison

# kind codes (the kernel's KIND constexpr)
BITWISE, BOOL, FP16, BF16, FP32, FP64 = 0, 1, 2, 3, 4, 5

# torch dtype name -> (KIND, Triton pointer type). Other dtypes (float8...) use the host check.
VARIANTS: dict[str, tuple[int, str]] = {
    "torch.float16": (FP16, "*fp16"),
    "torch.bfloat16": (BF16, "*bf16"),
    "torch.float32": (FP32, "*fp32"),
    "torch.float64": (FP64, "*fp64"),
    "torch.bool": (BOOL, "*u8"),
    "torch.int8": (BITWISE, "*u8"),
    "torch.uint8": (BITWISE, "*u8"),
    "torch.int16": (BITWISE, "*u16"),
    "torch.uint16": (BITWISE, "*u16"),
    "torch.int32": (BITWISE, "*u32"),
    "torch.uint32": (BITWISE, "*u32"),
    "torch.int64": (BITWISE, "*u64"),
    "torch.uint64": (BITWISE, "*u64"),
}


def signature(pointer: str) -> dict[str, str]:
    """The kernel's signature for one variant (the constexprs are ``KIND`` and ``BLOCK``)."""
    return {"out_ptr": pointer, "ref_ptr": pointer, "before_ptr": pointer, "part_ptr": "*fp64", "n": "i64"}


@triton.jit
def output_summary_kernel(out_ptr, ref_ptr, before_ptr, part_ptr, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    inf = float("inf")
    differ = tl.zeros([BLOCK], dtype=tl.int64)
    fast_bad = tl.zeros([BLOCK], dtype=tl.int64)
    fast_max = tl.zeros([BLOCK], dtype=tl.float64)
    fast_scale = tl.zeros([BLOCK], dtype=tl.float64)
    nan_new = tl.zeros([BLOCK], dtype=tl.int64)
    both_n = tl.zeros([BLOCK], dtype=tl.int64)
    rare_nan = tl.zeros([BLOCK], dtype=tl.int64)
    rare_max = tl.zeros([BLOCK], dtype=tl.float64)
    rare_scale = tl.zeros([BLOCK], dtype=tl.float64)
    nonfinite = tl.zeros([BLOCK], dtype=tl.int64)
    start = pid.to(tl.int64) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK).to(tl.int64)
        mask = offs < n
        o = tl.load(out_ptr + offs, mask=mask, other=0)
        r = tl.load(ref_ptr + offs, mask=mask, other=0)
        if KIND == 0:
            differ += ((o != r) & mask).to(tl.int64)
        elif KIND == 1:
            differ += (((o != 0) != (r != 0)) & mask).to(tl.int64)
        else:
            if KIND == 2 or KIND == 3:
                differ += ((o.to(tl.int16, bitcast=True) != r.to(tl.int16, bitcast=True)) & mask).to(tl.int64)
                a = o.to(tl.float32)
                b = r.to(tl.float32)
            elif KIND == 4:
                differ += ((o.to(tl.int32, bitcast=True) != r.to(tl.int32, bitcast=True)) & mask).to(tl.int64)
                a = o.to(tl.float64)
                b = r.to(tl.float64)
            else:
                differ += ((o.to(tl.int64, bitcast=True) != r.to(tl.int64, bitcast=True)) & mask).to(tl.int64)
                a = o.to(tl.float64)
                b = r.to(tl.float64)
            d = tl.abs(a - b)
            fine = d < inf  # false for NaN and Inf
            fast_bad += (mask & (d >= inf)).to(tl.int64) + (mask & (d != d)).to(tl.int64)
            fast_max = tl.maximum(fast_max, tl.where(mask & fine, d, 0.0).to(tl.float64))
            b_abs = tl.abs(b)
            fast_scale = tl.maximum(fast_scale, tl.where(mask & (b_abs < inf), b_abs, 0.0).to(tl.float64))
            a64 = o.to(tl.float64)
            b64 = r.to(tl.float64)
            a_nan = a64 != a64
            nan_new += (mask & a_nan & (b64 == b64)).to(tl.int64)
            both = mask & (a64 == a64) & (b64 == b64)
            both_n += both.to(tl.int64)
            d64 = tl.abs(a64 - b64)
            rare_nan += (both & (d64 != d64)).to(tl.int64)
            rare_max = tl.maximum(rare_max, tl.where(both & (d64 == d64), d64, 0.0))
            rare_scale = tl.maximum(rare_scale, tl.where(both, tl.abs(b64), 0.0))
            before = tl.load(before_ptr + offs, mask=mask, other=0).to(tl.float64)
            bad_out = ~(tl.abs(a64) < inf)
            nonfinite += (mask & bad_out & (tl.abs(before) < inf)).to(tl.int64)
        start += step
    row = part_ptr + pid * 10
    tl.store(row + 0, tl.sum(differ, axis=0).to(tl.float64))
    tl.store(row + 1, tl.sum(fast_bad, axis=0).to(tl.float64))
    tl.store(row + 2, tl.max(fast_max, axis=0))
    tl.store(row + 3, tl.max(fast_scale, axis=0))
    tl.store(row + 4, tl.sum(nan_new, axis=0).to(tl.float64))
    tl.store(row + 5, tl.sum(both_n, axis=0).to(tl.float64))
    tl.store(row + 6, tl.sum(rare_nan, axis=0).to(tl.float64))
    tl.store(row + 7, tl.max(rare_max, axis=0))
    tl.store(row + 8, tl.max(rare_scale, axis=0))
    tl.store(row + 9, tl.sum(nonfinite, axis=0).to(tl.float64))


FINGERPRINT = "fingerprint"
"""The key of :func:`fingerprint_kernel` among the check's kernels (beside the dtypes' variants)."""

FINGERPRINT_SIGNATURE = {"words_ptr": "*u64", "part_ptr": "*u64", "n_words": "i64"}


@triton.jit
def fingerprint_kernel(words_ptr, part_ptr, n_words, BLOCK: tl.constexpr):
    """:func:`triton_kiln.sandbox.compare.word_sum` of an output's whole 64-bit words: each
    program writes its share of the sum (modulo 2**64) to ``part_ptr[program]``; the host adds
    the shares. The constants are :data:`triton_kiln.sandbox.compare.WORD_MIX`."""
    pid = tl.program_id(0)
    step = tl.num_programs(0).to(tl.int64) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.uint64)
    start = pid.to(tl.int64) * BLOCK
    while start < n_words:
        offs = start + tl.arange(0, BLOCK).to(tl.int64)
        mask = offs < n_words
        x = tl.load(words_ptr + offs, mask=mask, other=0)
        x = x ^ (offs.to(tl.uint64) * 0x9E3779B97F4A7C15)
        x = x * 0xBF58476D1CE4E5B9
        x = x ^ (x >> 32)
        x = x * 0x94D049BB133111EB
        x = x ^ (x >> 29)
        acc += tl.where(mask, x, 0)
        start += step
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


def programs(n: int) -> int:
    """The grid for ``n`` elements: one program per block, at most :data:`MAX_PROGRAMS`."""
    return max(1, min(MAX_PROGRAMS, -(-n // BLOCK)))

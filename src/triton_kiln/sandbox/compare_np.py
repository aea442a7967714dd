"""The output check of :mod:`triton_kiln.sandbox.compare`, on numpy arrays, for the torch-free sandbox.

The native sandbox copies a tensor's bytes to the host and decodes them here by torch's dtype
name: float16/32/64 as numpy floats, bfloat16 through ``uint16 << 16`` as float32, the float8
types through a 256-entry table, integers and bool as themselves, anything else as raw unsigned
words (compared exactly, as :func:`triton_kiln.sandbox.compare.compare` compares non-float dtypes).
:func:`compare` applies the same rule, tolerances and messages as ``triton_kiln.sandbox.compare.compare``;
:func:`compare_one`, :func:`fingerprint_words` and :func:`produced_nonfinite` are what the native
sandbox's :class:`~triton_kiln.sandbox.compare.Representatives` needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from triton_kiln.sandbox.compare import Comparison, Measured, fingerprint, judge

# torch dtype name -> numpy dtype of the same bytes (bf16 and float8 are decoded below)
_STORAGE: dict[str, Any] = {
    "torch.float16": np.float16,
    "torch.float32": np.float32,
    "torch.float64": np.float64,
    "torch.bfloat16": np.uint16,
    "torch.float8_e4m3fn": np.uint8,
    "torch.float8_e5m2": np.uint8,
    "torch.float8_e4m3fnuz": np.uint8,
    "torch.float8_e5m2fnuz": np.uint8,
    "torch.bool": np.bool_,
    "torch.int8": np.int8,
    "torch.int16": np.int16,
    "torch.int32": np.int32,
    "torch.int64": np.int64,
    "torch.uint8": np.uint8,
    "torch.uint16": np.uint16,
    "torch.uint32": np.uint32,
    "torch.uint64": np.uint64,
}
_FLOATS = frozenset(name for name in _STORAGE if "float" in name)
_NARROW_FLOATS = frozenset(name for name in _FLOATS if name not in ("torch.float32", "torch.float64"))
_RAW_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _float8_table(exponent_bits: int, bias: int, fnuz: bool) -> Any:
    """float32 value of each of the 256 bit patterns of a float8 format."""
    mantissa_bits = 7 - exponent_bits
    values = np.empty(256, dtype=np.float64)
    top = (1 << exponent_bits) - 1
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        exponent = (bits >> mantissa_bits) & top
        mantissa = bits & ((1 << mantissa_bits) - 1)
        if fnuz and bits == 0x80:
            value = math.nan
        elif not fnuz and exponent_bits == 5 and exponent == top:  # e5m2: IEEE inf / NaN
            value = sign * math.inf if mantissa == 0 else math.nan
        elif not fnuz and exponent_bits == 4 and exponent == top and mantissa == 7:  # e4m3fn: NaN only
            value = math.nan
        elif exponent == 0:
            value = sign * mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
        else:
            value = sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)
        values[bits] = value
    return values.astype(np.float32)


_FLOAT8: dict[str, tuple[int, int, bool]] = {
    "torch.float8_e4m3fn": (4, 7, False),
    "torch.float8_e5m2": (5, 15, False),
    "torch.float8_e4m3fnuz": (4, 8, True),
    "torch.float8_e5m2fnuz": (5, 16, True),
}
_TABLES: dict[str, Any] = {}


class HostArray:
    """A tensor's values on the host: torch's dtype name and the elements as numpy holds them.

    Made from the stored words (:func:`decode`), it decodes them only when asked for values, and
    compares bitwise on the words themselves: an output identical to a representative costs one
    ``memcmp``-speed pass, with no decoding."""

    __slots__ = ("_abs_max", "_values", "dtype", "words")

    def __init__(self, dtype: str, values: Any = None, *, words: Any = None) -> None:
        if (values is None) == (words is None):
            raise ValueError("HostArray takes either decoded values or stored words")
        self.dtype = dtype
        self.words = words  # the elements as stored (raw_view), or None when made from values
        self._values = values
        self._abs_max: float | None = None

    @property
    def values(self) -> Any:
        """numpy array: decoded floats (float16/32/64; bf16 and float8 as float32), ints, bools,
        or raw words."""
        if self._values is None:
            self._values = _decoded(self.words, self.dtype)
        return self._values

    @property
    def shape(self) -> tuple[int, ...]:
        source = self.words if self.words is not None else self.values
        return tuple(int(s) for s in np.shape(source))

    @property
    def is_floating_point(self) -> bool:
        return self.dtype in _FLOATS

    def as_float64(self) -> Any:
        return np.asarray(self.values, dtype=np.float64)

    def as_float(self) -> Any:
        """The values as floats wide enough to hold every difference exactly: float32 for
        16- and 8-bit types (twice as fast to compare as float64), float64 otherwise."""
        wide = np.float32 if self.dtype in _NARROW_FLOATS else np.float64
        return np.asarray(self.values, dtype=wide)

    def abs_max(self) -> float:
        """max |value| (kept: a representative is compared with many outputs)."""
        if self._abs_max is None:
            values = self.as_float()
            self._abs_max = float(max(abs(values.max()), abs(values.min()))) if values.size else 0.0
        return self._abs_max

    def same_bits(self, other: HostArray) -> bool:
        """Whether both hold exactly the same bytes (then they agree, NaNs included)."""
        if self.words is not None and other.words is not None and self.dtype == other.dtype:
            a, b = np.ascontiguousarray(self.words), np.ascontiguousarray(other.words)
        else:
            a, b = np.ascontiguousarray(self.values), np.ascontiguousarray(other.values)
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        words = _RAW_WORDS.get(8 if a.nbytes % 8 == 0 else a.itemsize, np.uint8)  # wide words: ~3x faster
        return bool(np.array_equal(a.reshape(-1).view(words), b.reshape(-1).view(words)))

    def owned(self) -> HostArray:
        """This array with memory of its own (the caller's read buffer may be reused)."""
        if self.words is None:
            return self
        copy = HostArray(self.dtype, words=np.array(self.words, copy=True))
        copy._abs_max = self._abs_max
        if self._values is not None and not np.shares_memory(self._values, self.words):
            copy._values = self._values
        return copy


def raw_view(
    buffer: Any,
    dtype: str,
    itemsize: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    bitwise: bool = False,
) -> Any:
    """The tensor's elements in ``buffer`` (its span's bytes, a uint8 array) as stored: one word
    each, typed by ``dtype`` (or as unsigned words of ``itemsize`` bytes, ``bitwise``)."""
    words = _RAW_WORDS.get(itemsize, np.uint8)
    storage = words if bitwise else _STORAGE.get(dtype, words)
    flat = np.frombuffer(buffer, dtype=np.uint8)
    if flat.size == 0 or any(s == 0 for s in shape):
        return np.zeros(shape, dtype=storage)
    typed = flat.view(storage)
    return np.lib.stride_tricks.as_strided(
        typed, shape=shape, strides=tuple(s * itemsize for s in strides), writeable=False
    )


def decode(raw: Any, dtype: str) -> HostArray:
    """A :class:`HostArray` of :func:`raw_view`'s words, decoded when its values are first needed
    (bf16 and float8 turned into float32)."""
    return HostArray(dtype, words=raw)


def _decoded(raw: Any, dtype: str) -> Any:
    if dtype == "torch.bfloat16":
        # widen in place (one pass, no temporary: a 32 MB output decodes in ~10 ms)
        words = np.empty(np.shape(raw), dtype=np.uint32)
        words[...] = raw
        words <<= 16
        return words.view(np.float32)
    if dtype in _FLOAT8:
        table = _TABLES.get(dtype)
        if table is None:
            table = _TABLES[dtype] = _float8_table(*_FLOAT8[dtype])
        return table[np.asarray(raw, dtype=np.uint8)]
    return np.ascontiguousarray(raw)


def compare(
    outputs: Mapping[str, HostArray],
    reference: Mapping[str, HostArray],
    tolerances: tuple[float, float] | None = None,
) -> Comparison:
    """:func:`triton_kiln.sandbox.compare.judge` on host arrays: the same rule, tolerances and messages."""
    return judge(outputs, reference, tolerances, _describe, _measure)


def _describe(array: HostArray) -> tuple[tuple[int, ...], str]:
    return tuple(array.shape), array.dtype


def _measure(out: HostArray, ref: HostArray) -> Measured:
    if out.same_bits(ref):  # the common case, at memcmp speed
        return Measured("same")
    if not out.is_floating_point:
        return Measured("int", mismatched=int(np.count_nonzero(out.values != ref.values)))
    a, b = out.as_float(), ref.as_float()
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.subtract(a, b)
        np.abs(diff, out=diff)
        worst = diff.max()
    if np.isfinite(worst):  # no NaN or Inf on either side (they would reach the maximum): one pass
        return Measured("float", float(worst), ref.abs_max())
    del diff
    # the rare path, exact (a difference of two 16-bit values can overflow float32)
    a, b = out.as_float64(), ref.as_float64()
    nan_out, nan_ref = np.isnan(a), np.isnan(b)
    if bool((nan_out & ~nan_ref).any()):
        return Measured("nan")
    both = ~(nan_out | nan_ref)
    if not bool(both.any()):
        return Measured("float")
    with np.errstate(invalid="ignore", over="ignore"):
        return Measured("float", float(np.abs(a[both] - b[both]).max()), float(np.abs(b[both]).max()))


def compare_one(
    name: str, output: HostArray, representative: HostArray, tolerances: tuple[float, float] | None
) -> Comparison:
    """:func:`compare` of one argument (what :class:`~triton_kiln.sandbox.compare.Representatives` uses)."""
    return compare({name: output}, {name: representative}, tolerances)


def fingerprint_words(dtype: str, words: Any) -> str:
    """:func:`triton_kiln.sandbox.compare.fingerprint` of a tensor's stored words (as :func:`raw_view`
    gives)."""
    contiguous = np.ascontiguousarray(words)
    # the hash reads the array's memory in place: a bytes copy of a large output costs as much
    # again as hashing it
    return fingerprint(dtype, tuple(contiguous.shape), contiguous.reshape(-1).view(np.uint8).data)


def produced_nonfinite(output: HostArray, before: Callable[[], HostArray]) -> bool:
    """Whether ``output`` holds NaN/Inf where the argument held a number before the run
    (``before()`` is read only when ``output`` has any NaN/Inf at all)."""
    if not output.is_floating_point:
        return False
    values = np.asarray(output.values)
    if values.size == 0:
        return False
    if np.isfinite(values.max()) and np.isfinite(values.min()):  # NaN reaches both; +-Inf one
        return False
    bad = ~np.isfinite(output.as_float())
    if not bool(bad.any()):
        return False
    prior = before().as_float()
    return bool((bad & np.isfinite(prior)).any())

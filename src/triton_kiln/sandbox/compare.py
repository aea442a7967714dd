"""Comparing a config's outputs with a reference, and keeping the distinct outputs configs produce.

:func:`compare` checks one config's tensors against a reference within tolerances that suit
each dtype. :class:`Representatives` is what a sandbox (or the in-process bencher) keeps instead
of a single reference: per output argument, up to :data:`MAX_REPRESENTATIVES` distinct outputs.
Each config's output is placed with the first it agrees with (or becomes a new one), and the
:class:`Verdict` that travels back names, per argument, which representative that was and which
it did not agree with (:class:`OutputCheck`), and whether the run wrote NaN/Inf. The tuner
decides from all configs' verdicts at the end of the run (:mod:`triton_kiln.autotuner.outputs`), where
it knows each config's parameters; no tensor ever travels back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

# (rtol, atol) by dtype name: reductions in another order, tf32 dots and fp16 rounding differ
# between configs of a correct kernel by this much; a wrong config differs by far more.
TOLERANCES: dict[str, tuple[float, float]] = {
    "torch.float16": (1e-2, 1e-2),
    "torch.bfloat16": (2e-2, 2e-2),
    "torch.float32": (1e-3, 1e-4),
    "torch.float64": (1e-7, 1e-9),
    "torch.float8_e4m3fn": (1.25e-1, 1e-1),
    "torch.float8_e5m2": (2.5e-1, 1e-1),
}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_diff: float
    detail: str


@dataclass(frozen=True)
class Measured:
    """What one library (torch on the GPU, numpy on the host) measured of an output and its
    reference; :func:`judge` turns it into a verdict, so both sandboxes apply one rule."""

    kind: str  # "same" (bitwise), "nan" (NaN where the reference has a number), "float", "int"
    diff: float = 0.0  # float: max |output - reference| where both are numbers
    scale: float = 0.0  # float: max |reference| there
    mismatched: int = 0  # int: elements that differ


def judge(
    outputs: Mapping[str, Any],
    reference: Mapping[str, Any],
    tolerances: tuple[float, float] | None,
    describe: Callable[[Any], tuple[tuple[int, ...], str]],
    measure: Callable[[Any, Any], Measured],
) -> Comparison:
    """The output check's rule over every tensor in ``outputs`` with the same name in
    ``reference``: shapes and dtypes equal (``describe(t) -> (shape, dtype)``); integer and
    boolean tensors exactly equal; floating-point ones within ``atol + rtol * max|reference|``
    (by dtype, or ``tolerances``); NaN where the reference has none fails."""
    common = [name for name in reference if name in outputs]
    if not common:
        return Comparison(False, float("inf"), f"no output to compare (reference has {sorted(reference)})")
    worst = 0.0
    for name in common:
        out, ref = outputs[name], reference[name]
        (out_shape, out_dtype), (ref_shape, ref_dtype) = describe(out), describe(ref)
        if out_shape != ref_shape or out_dtype != ref_dtype:
            return Comparison(
                False, float("inf"), f"{name}: shape/dtype {out_shape}/{out_dtype} != {ref_shape}/{ref_dtype}"
            )
        m = measure(out, ref)
        if m.kind == "nan":
            return Comparison(False, float("nan"), f"{name}: NaN where the reference has a number")
        if m.kind == "float":
            rtol, atol = tolerances or TOLERANCES.get(out_dtype, (1e-3, 1e-5))
            worst = max(worst, m.diff)
            if m.diff > atol + rtol * m.scale:
                return Comparison(
                    False, m.diff, f"{name}: max |diff| {m.diff:.3g} > {atol:g} + {rtol:g} x {m.scale:.3g}"
                )
        elif m.kind == "int" and m.mismatched:
            return Comparison(False, float(m.mismatched), f"{name}: {m.mismatched} elements differ")
    return Comparison(True, worst, "")


def compare(
    outputs: Mapping[str, Any], reference: Mapping[str, Any], tolerances: tuple[float, float] | None = None
) -> Comparison:
    """:func:`judge` on torch tensors (on the GPU, in the torch sandbox and in process)."""
    return judge(outputs, reference, tolerances, _torch_describe, _torch_measure)


def _torch_describe(tensor: Any) -> tuple[tuple[int, ...], str]:
    return tuple(tensor.shape), str(tensor.dtype)


def _torch_measure(out: Any, ref: Any) -> Measured:
    import torch

    if not out.dtype.is_floating_point:
        return Measured("int", mismatched=int((out != ref).sum()))
    a, b = out.double(), ref.double()
    nan_out, nan_ref = torch.isnan(a), torch.isnan(b)
    if bool((nan_out & ~nan_ref).any()):
        return Measured("nan")
    both = ~(nan_out | nan_ref)
    if not bool(both.any()):
        return Measured("float")
    return Measured("float", float((a[both] - b[both]).abs().max()), float(b[both].abs().max()))


# -- representatives: what several configs' outputs look like, kept where they run ---------------

MAX_REPRESENTATIVES = 4
"""Distinct outputs kept per argument (the first clean run's, then each that matches none)."""

T = TypeVar("T")


@dataclass(frozen=True)
class OutputCheck:
    """How one output argument of one config compared with the representatives kept for it.

    Representatives are named by :func:`fingerprint` of their bytes, so that representatives of
    different sandbox processes (a restart, the torch sandbox next to the native one) that hold
    the same bytes are known to be the same.
    """

    cluster: str | None
    """The representative it agrees with (a new one when it agreed with none); ``None`` when it
    agreed with none and :data:`MAX_REPRESENTATIVES` were already kept."""

    differs_from: tuple[str, ...] = ()
    """The representatives it was compared with and does not agree with."""

    nonfinite: bool = False
    """The run wrote NaN or Inf into it (where the argument held a number before the run)."""

    details: tuple[str, ...] = ()
    """How it differs from each of :attr:`differs_from` (the comparison's message)."""


class Verdict(tuple[bool, float, str]):
    """``(ok, max_abs_diff, detail)`` against the reference (the user's, else the first clean run),
    plus :attr:`outputs`: each output argument's :class:`OutputCheck`. It compares and unpacks as
    the plain triple the sandboxes always sent; the tuner decides with :attr:`outputs`."""

    outputs: dict[str, OutputCheck]

    def __new__(
        cls, ok: bool, max_abs_diff: float, detail: str, outputs: Mapping[str, OutputCheck] | None = None
    ) -> Verdict:
        self = super().__new__(cls, (ok, max_abs_diff, detail))
        self.outputs = dict(outputs or {})
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Verdict, (self[0], self[1], self[2], self.outputs))


WORD_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
"""The constants of :func:`word_sum`'s mixing (also written into the device's fingerprint kernel,
:func:`triton_kiln.sandbox.compare_kernel.fingerprint_kernel`)."""

_WORD_CHUNK = 1 << 20  # words a pass of word_sum takes at a time (8 MiB)


def fingerprint(dtype: str, shape: tuple[int, ...], contiguous_bytes: bytes | memoryview) -> str:
    """A representative's name: a hash of its dtype, shape and elements (row-major, as stored).

    The elements' bytes are read as little-endian 64-bit words and reduced by :func:`word_sum`,
    which the GPU computes too (:func:`triton_kiln.sandbox.compare_kernel.fingerprint_kernel`):
    the native sandbox names an output on the device, where it is, and reads 2 KB instead of the
    output (a 128 MB output took ~150 ms to read and hash on the host). The last ``len % 8``
    bytes join the name as they are."""
    data = memoryview(contiguous_bytes).cast("B")
    whole = len(data) // 8 * 8
    return fingerprint_of_sum(dtype, shape, word_sum(data[:whole]), bytes(data[whole:]))


def fingerprint_of_sum(dtype: str, shape: tuple[int, ...], words: int, tail: bytes) -> str:
    """:func:`fingerprint` from its parts: :func:`word_sum` of the whole words, and the tail."""
    digest = hashlib.blake2b(f"{dtype}|{tuple(int(s) for s in shape)}|".encode(), digest_size=12)
    digest.update(words.to_bytes(8, "little"))
    digest.update(tail)
    return digest.hexdigest()


def word_sum(data: bytes | memoryview) -> int:
    """Sum, modulo 2**64, of ``mix(word ^ index * G)`` over ``data``'s little-endian 64-bit words
    (``len(data)`` a multiple of 8), where ``mix`` is a bijection of 64-bit words (two multiplies
    and two shifts: :data:`WORD_MIX`). Outputs that differ in one word never collide, and two
    unrelated outputs do with a chance near 2**-64; the sum's order does not matter, so any grid
    of programs on a GPU computes it alike."""
    import numpy as np

    words = np.frombuffer(data, dtype="<u8")
    golden, first, second = (np.uint64(c) for c in WORD_MIX)
    total = np.uint64(0)
    index = np.arange(min(len(words), _WORD_CHUNK), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(words), _WORD_CHUNK):
            x = words[start : start + _WORD_CHUNK] ^ (
                (index[: len(words) - start] + np.uint64(start)) * golden
            )
            x *= first
            x ^= x >> np.uint64(32)
            x *= second
            x ^= x >> np.uint64(29)
            total += x.sum(dtype=np.uint64)
    return int(total)


class Representatives(Generic[T]):
    """Per output argument, up to :data:`MAX_REPRESENTATIVES` distinct outputs, and the check.

    ``compare_one(name, output, representative)`` is :func:`compare` (or the numpy one) on one
    argument. The first clean run (or the reference it is seeded with) settles which arguments
    are outputs and becomes each one's first representative; every later output is compared with
    the representatives in order and joins the first it agrees with, or becomes a new one.
    """

    def __init__(
        self, compare_one: Callable[[str, T, T], Comparison], limit: int = MAX_REPRESENTATIVES
    ) -> None:
        self.compare_one = compare_one
        self.limit = limit
        self.kept: dict[str, list[tuple[str, T]]] | None = None

    @property
    def names(self) -> list[str] | None:
        return None if self.kept is None else list(self.kept)

    def reset(self) -> None:
        self.kept = None

    def seed(self, reference: Mapping[str, tuple[str, T]]) -> None:
        """Start from ``reference``: ``{name: (fingerprint, value)}``."""
        self.kept = {name: [pair] for name, pair in reference.items()}

    def first(self) -> dict[str, tuple[str, T]] | None:
        """Each argument's first representative (the reference), if settled."""
        return None if self.kept is None else {name: reps[0] for name, reps in self.kept.items()}

    def check(
        self,
        outputs: Mapping[str, T],
        fingerprint_of: Callable[[str], str],
        nonfinite: Mapping[str, bool],
    ) -> Verdict:
        """Place each output (``outputs`` has every settled name, or all candidates on the
        first run); ``fingerprint_of(name)`` is called only for a new representative."""
        if self.kept is None:
            self.kept = {name: [(fingerprint_of(name), value)] for name, value in outputs.items()}
            checks = {
                name: OutputCheck(reps[0][0], (), nonfinite.get(name, False))
                for name, reps in self.kept.items()
            }
            return Verdict(True, 0.0, "reference", checks)
        common = [name for name in self.kept if name in outputs]
        if not common:
            return Verdict(False, float("inf"), f"no output to compare (reference has {sorted(self.kept)})")
        checks = {}
        ok, worst, detail = True, 0.0, ""
        for name in common:
            reps, value = self.kept[name], outputs[name]
            details: list[str] = []
            differs: list[str] = []
            cluster: str | None = None
            for index, (name_of_rep, rep) in enumerate(reps):
                result = self.compare_one(name, value, rep)
                if index == 0 and ok:  # the verdict against the reference, as before
                    worst = max(worst, result.max_abs_diff) if result.ok else result.max_abs_diff
                    ok, detail = result.ok, result.detail
                if result.ok:
                    cluster = name_of_rep
                    break
                differs.append(name_of_rep)
                details.append(result.detail)
            if cluster is None and len(reps) < self.limit:
                cluster = fingerprint_of(name)
                reps.append((cluster, value))
            checks[name] = OutputCheck(cluster, tuple(differs), nonfinite.get(name, False), tuple(details))
        return Verdict(ok, worst, detail, checks)


def compare_one(
    name: str, output: Any, representative: Any, tolerances: tuple[float, float] | None
) -> Comparison:
    """:func:`compare` of one argument's tensors (what :class:`Representatives` uses)."""
    return compare({name: output}, {name: representative}, tolerances)


def tensor_fingerprint(tensor: Any) -> str:
    """:func:`fingerprint` of a torch tensor (the same name the numpy side gives the same bytes)."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    data = flat.view(torch.uint8).cpu().numpy().data if flat.numel() else b""  # read in place, no copy
    return fingerprint(str(tensor.dtype), tuple(tensor.shape), data)


def tensor_produced_nonfinite(output: Any, before: Any) -> bool:
    """Whether ``output`` holds NaN/Inf where ``before`` (the argument before the run) held a number."""
    import torch

    if not output.dtype.is_floating_point:
        return False
    bad = ~torch.isfinite(output)
    if not bool(bad.any()):
        return False
    return bool((bad & torch.isfinite(before.to(output.device))).any())

"""The native sandbox's output check on the device: no per-config host copy of an output.

::

    client (triton_kiln.sandbox.native_client)         native sandbox (triton_kiln.sandbox.native_worker)
      ("compare_kernels", {dtype: spec})   ->   DeviceCheck.set_kernels: each variant of
                                                triton_kiln.sandbox.compare_kernel (compiled by the
                                                caller's pool for this device) -> kiln's Launcher
      ("bench", ...) want_outputs          ->   DeviceCheck.check(): for each output, against its
                                                representatives (device copies, kept here):
                                                launch the summary kernel, read back its rows
                                                (~21 KB), Summary -> Measured -> the rule's judge

It keeps what :meth:`NativeState.check_outputs` keeps on the host (the first clean run settles
the outputs, up to :data:`~triton_kiln.sandbox.compare.MAX_REPRESENTATIVES` distinct outputs per
argument, a :class:`~triton_kiln.sandbox.compare.Verdict` travels back), with the same rule
(:func:`triton_kiln.sandbox.compare.judge` over :func:`triton_kiln.sandbox.device_summary.measured`). What
still reaches the host: the rows, and a new representative's name, computed here by the
fingerprint kernel (the same name the host gives the same bytes:
:func:`triton_kiln.sandbox.compare.fingerprint`, so both sandboxes name the same output alike;
without that kernel, the bytes are read to the host once and hashed there). It serves a set of
inputs only when every tensor's dtype has a compiled variant and is contiguous, and no user
reference was given; otherwise the host check runs (:meth:`usable`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triton_kiln.sandbox.compare import (
    Comparison,
    Measured,
    Representatives,
    Verdict,
    fingerprint_of_sum,
    judge,
)
from triton_kiln.sandbox.device_inputs import DeviceInputs
from triton_kiln.sandbox.device_summary import SLOTS, Summary, measured, produced_nonfinite

log = logging.getLogger("kiln.sandbox")

BLOCK = 1024  # as triton_kiln.sandbox.compare_kernel (which imports Triton: never imported here)
MAX_PROGRAMS = 264
FINGERPRINT = "fingerprint"  # as compare_kernel.FINGERPRINT: the fingerprint kernel's key
FLOATS = frozenset({"torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"})


def programs(n: int) -> int:
    """:func:`triton_kiln.sandbox.compare_kernel.programs`: the summary kernel's grid for ``n`` elements."""
    return max(1, min(MAX_PROGRAMS, -(-n // BLOCK)))


@dataclass(frozen=True)
class DeviceArray:
    """An output (or a representative's copy) on the device: contiguous elements at ``ptr``."""

    ptr: int
    dtype: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int
    owned: bool = False  # a copy this check allocated (freed on reset)


class DeviceCheck:
    """Output checks of one set of inputs on the device (see the module's documentation)."""

    def __init__(self, cuda: Any, inputs: DeviceInputs, load: Callable[[dict[str, Any]], Any]) -> None:
        import numpy as np

        self.cuda = cuda
        self.inputs = inputs
        self.load = load  # spec -> kiln's Launcher (NativeState.kernel)
        self.launchers: dict[str, Any] = {}
        self.tolerances: tuple[float, float] | None = None
        self.representatives: Representatives[DeviceArray] = Representatives(self._compare_one)
        self.active: bool | None = None  # decided at the first check of a set of inputs
        self.partials = 0
        self.rows = np.empty(MAX_PROGRAMS * SLOTS, dtype=np.float64)
        self._seen: dict[tuple[int, int], Summary] = {}  # (output, representative) -> summary
        self.fingerprint_s = 0.0  # spent naming new representatives (a host read and a hash each)
        self._scratch: Any = None  # host buffer those reads reuse (a fresh one page-faults per read)

    def set_kernels(self, specs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Load the summary kernel's variants (``{dtype: spec}``); what loaded and what failed."""
        failed = {}
        for dtype, spec in specs.items():
            try:
                self.launchers[dtype] = self.load(spec)
            except Exception as exc:  # that dtype's outputs are checked on the host
                failed[dtype] = f"{type(exc).__name__}: {exc}"
        if self.launchers and not self.partials:
            self.partials = self.cuda.mem_alloc(MAX_PROGRAMS * SLOTS * 8)
        return {"loaded": sorted(self.launchers), "failed": failed}

    def reset(self, active: bool | None = None) -> None:
        """New inputs: forget (and free) the representatives; ``active=False``: host check."""
        for reps in (self.representatives.kept or {}).values():
            for _, value in reps:
                if value.owned and value.nbytes:
                    self.cuda.mem_free(value.ptr)
        self.representatives.reset()
        self.active = active
        self._seen.clear()
        self._scratch = None

    def usable(self) -> bool:
        """Every tensor has a loaded variant and is contiguous (decided once per set of inputs)."""
        if self.active is None:
            self.active = bool(self.launchers) and all(
                t.desc.dtype in self.launchers
                and _contiguous(t.desc.shape, t.desc.strides, t.desc.itemsize, t.desc.nbytes)
                for t in self.inputs.tensors.values()
            )
        return self.active

    # -- one comparison -----------------------------------------------------------------------

    def summarize(self, out: DeviceArray, ref: DeviceArray, before: int) -> Summary:
        """The kernel's summary of ``out`` against ``ref`` (and ``before``, the argument before the run)."""
        cached = self._seen.get((out.ptr, ref.ptr))
        if cached is not None:
            return cached
        if out.numel == 0:
            return Summary(0)
        grid = programs(out.numel)
        self.launchers[out.dtype].launch((grid,), 0, (out.ptr, ref.ptr, before, self.partials, out.numel))
        rows = self.rows[: grid * SLOTS]
        self.cuda.memcpy_dtoh(rows.view("uint8"), self.partials)  # ordered after the launch
        summary = Summary.reduce(rows.reshape(grid, SLOTS).tolist())
        self._seen[(out.ptr, ref.ptr)] = summary
        return summary

    def _compare_one(self, name: str, out: DeviceArray, rep: DeviceArray) -> Comparison:
        before = self.inputs.tensors[name].pristine

        def measure(a: DeviceArray, b: DeviceArray) -> Measured:
            return measured(self.summarize(a, b, before), a.dtype in FLOATS)

        return judge({name: out}, {name: rep}, self.tolerances, _describe, measure)

    # -- a config's outputs -------------------------------------------------------------------

    def changed(self) -> list[str]:
        """Tensors the run changed: any element's bits differ from the pristine copy."""
        found = []
        for name, tensor in self.inputs.tensors.items():
            pristine = DeviceArray(
                tensor.pristine, tensor.desc.dtype, tensor.desc.shape, *_sizes(tensor.desc)
            )
            if self.summarize(self.working(name), pristine, tensor.pristine).differ:
                found.append(name)
        return found

    def working(self, name: str) -> DeviceArray:
        tensor = self.inputs.tensors[name]
        return DeviceArray(tensor.ptr, tensor.desc.dtype, tensor.desc.shape, *_sizes(tensor.desc))

    def check(self) -> Verdict:
        """Place this run's outputs among the representatives, on the device."""
        self._seen.clear()
        settled = self.representatives.names
        names = settled if settled is not None else (self.changed() or list(self.inputs.tensors))
        outputs = {name: self.working(name) for name in names if name in self.inputs.tensors}
        nonfinite = {}
        for name, out in outputs.items():  # against the first representative: its summary is reused
            first = (self.representatives.kept or {}).get(name, [(None, out)])[0][1]
            summary = self.summarize(out, first, self.inputs.tensors[name].pristine)
            nonfinite[name] = produced_nonfinite(summary, out.dtype in FLOATS)
        verdict = self.representatives.check(outputs, self._fingerprint, nonfinite)
        for reps in (self.representatives.kept or {}).values():
            for index, (cluster, value) in enumerate(reps):
                if not value.owned:  # new: the working buffer is reused by the next config
                    reps[index] = (cluster, self._copy(value))
        self._seen.clear()
        return verdict

    def _fingerprint(self, name: str) -> str:
        """A new representative's name: the hash of its bytes, computed on the device by the
        fingerprint kernel where it loaded (2 KB read back), else read to the host once."""
        started = time.monotonic()
        try:
            tensor = self.inputs.tensors[name]
            launcher = self.launchers.get(FINGERPRINT)
            if launcher is not None and self.partials and tensor.ptr % 8 == 0:
                return self._fingerprint_here(launcher, tensor.ptr, tensor.desc)
            return self._fingerprint_on_host(name)
        finally:
            self.fingerprint_s += time.monotonic() - started

    def _fingerprint_here(self, launcher: Any, ptr: int, desc: Any) -> str:
        import numpy as np

        words = desc.nbytes // 8
        total = 0
        if words:
            grid = programs(words)
            launcher.launch((grid,), 0, (ptr, self.partials, words))
            shares = np.empty(grid, dtype=np.uint64)
            self.cuda.memcpy_dtoh(shares.view(np.uint8), self.partials)  # ordered after the launch
            total = int(shares.sum(dtype=np.uint64))
        tail = np.empty(desc.nbytes - 8 * words, dtype=np.uint8)
        if tail.size:
            self.cuda.memcpy_dtoh(tail, ptr + 8 * words)
        return fingerprint_of_sum(desc.dtype, tuple(desc.shape), total, tail.tobytes())

    def _fingerprint_on_host(self, name: str) -> str:
        import numpy as np

        from triton_kiln.sandbox.compare_np import fingerprint_words

        desc = self.inputs.tensors[name].desc
        if self._scratch is None or self._scratch.nbytes < desc.nbytes:
            self._scratch = np.empty(desc.nbytes, dtype=np.uint8)
        return fingerprint_words(desc.dtype, self.inputs.read(name, into=self._scratch[: desc.nbytes]))

    def _copy(self, value: DeviceArray) -> DeviceArray:
        ptr = self.cuda.mem_alloc(max(1, value.nbytes))
        if value.nbytes:
            self.cuda.memcpy_dtod(ptr, value.ptr, value.nbytes)
        return DeviceArray(ptr, value.dtype, value.shape, value.numel, value.nbytes, owned=True)

    def reference_words(self) -> dict[str, Any] | None:
        """Each output's first representative as stored words (numpy), for the torch sandbox."""
        import numpy as np

        from triton_kiln.sandbox.compare_np import raw_view

        first = self.representatives.first()
        if first is None:
            return None
        words = {}
        for name, (_, value) in first.items():
            desc = self.inputs.tensors[name].desc
            buffer = np.empty(value.nbytes, dtype=np.uint8)
            if value.nbytes:
                self.cuda.memcpy_dtoh(buffer, value.ptr)
            words[name] = raw_view(buffer, desc.dtype, desc.itemsize, desc.shape, desc.strides)
        return words


def _describe(array: DeviceArray) -> tuple[tuple[int, ...], str]:
    return tuple(array.shape), array.dtype


def _sizes(desc: Any) -> tuple[int, int]:
    numel = 1
    for size in desc.shape:
        numel *= int(size)
    return numel, int(desc.nbytes)


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, nbytes: int) -> bool:
    """Row-major with no gaps (the kernel reads elements 0..n-1 in a row)."""
    expected, numel = 1, 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= int(size)
        numel *= int(size)
    return numel * itemsize == nbytes

"""The native sandbox's output check on the device (``kiln.sandbox.device_check``), without a GPU.

The GPU is the one thing faked: device memory is host memory behind kiln's C module's calls
(``mem_alloc``, ``memcpy_*``), and the summary kernel's launch runs its numpy model
(``tests/test_device_summary.py``). Everything else is the sandbox's own code: ``NativeState``
with its ``DeviceInputs``, the representatives, the rule. Two states check the same configs'
outputs, one on the "device", one on the host (the code used until now): their verdicts are
equal, and the device one never copies an output to the host except a new representative's
bytes once (counted).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import pytest

from test_device_summary import model_rows
from triton_kiln.sandbox import compare_np, native_worker
from triton_kiln.sandbox.compare import word_sum
from triton_kiln.sandbox.device_summary import SLOTS
from triton_kiln.sandbox.ipc import TensorDesc


class FakeDevice:
    """kiln's C module's memory calls over host arrays (addresses: base of an allocation + offset)."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.arrays: dict[int, Any] = {}
        self.next = 1 << 20
        self.dtoh_bytes = 0

    def cuda_init(self, device: int) -> int:
        return 1

    def mem_alloc(self, n: int) -> int:
        base = self.next
        self.next += max(n, 1) + 4096
        self.arrays[base] = np.zeros(max(n, 1), dtype=np.uint8)
        bisect.insort(self.bases, base)
        return base

    def mem_free(self, ptr: int) -> None:
        self.bases.remove(ptr)
        del self.arrays[ptr]

    def view(self, ptr: int, n: int) -> Any:
        base = self.bases[bisect.bisect_right(self.bases, ptr) - 1]
        offset = ptr - base
        return self.arrays[base][offset : offset + n]

    def memcpy_dtod(self, dst: int, src: int, n: int) -> None:
        self.view(dst, n)[:] = self.view(src, n)

    def memcpy_htod(self, dst: int, data: bytes) -> None:
        self.view(dst, len(data))[:] = np.frombuffer(data, dtype=np.uint8)

    def memcpy_dtoh(self, buffer: Any, src: int) -> None:
        out = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) else buffer
        out = out.reshape(-1).view(np.uint8)
        out[:] = self.view(src, out.size)
        self.dtoh_bytes += out.size

    def ctx_synchronize(self) -> None:
        return None


class ModelLauncher:
    """The summary kernel's launch: its numpy model over the fake device's bytes."""

    def __init__(self, device: FakeDevice, dtype: str, storage: Any) -> None:
        self.device, self.dtype, self.storage = device, dtype, storage

    def launch(self, grid: tuple[int, ...], stream: int, args: tuple[Any, ...]) -> None:
        out, ref, before, part, n = args
        size = np.dtype(self.storage).itemsize * n
        arrays = [self.device.view(p, size).view(self.storage) for p in (out, ref, before)]
        rows = model_rows(*arrays, self.dtype)
        # the model's grid is its own (smaller blocks); the rows it folds are what the host reads
        flat = np.zeros(grid[0] * SLOTS, dtype=np.float64)
        flat[:SLOTS] = [
            max(r[i] for r in rows) if i in (2, 3, 7, 8) else sum(r[i] for r in rows) for i in range(SLOTS)
        ]
        self.device.view(part, flat.nbytes)[:] = flat.view(np.uint8)


class FingerprintModel:
    """The fingerprint kernel's launch: the host's word sum over the fake device's bytes, as the
    first program's share (the others' zero; the kernel itself against the host's sum:
    tests/test_device_summary.py)."""

    def __init__(self, device: FakeDevice) -> None:
        self.device = device
        self.launches = 0

    def launch(self, grid: tuple[int, ...], stream: int, args: tuple[Any, ...]) -> None:
        words, part, n_words = args
        shares = np.zeros(grid[0], dtype=np.uint64)
        shares[0] = word_sum(self.device.view(words, 8 * n_words).tobytes())
        self.device.view(part, shares.nbytes)[:] = shares.view(np.uint8)
        self.launches += 1


STORAGE = {"torch.float32": np.float32, "torch.bfloat16": np.uint16, "torch.int32": np.int32}


def _state(monkeypatch: pytest.MonkeyPatch, device: FakeDevice, on_device: bool) -> Any:
    import triton_kiln.launch.native as native_mod

    monkeypatch.setattr(native_mod, "native", lambda: device)
    monkeypatch.setattr(native_worker, "FLUSH_BYTES", 16)
    state = native_worker.NativeState(0)
    if on_device:
        check = state.device_check
        check.launchers = {d: ModelLauncher(device, d, s) for d, s in STORAGE.items()}
        check.launchers["fingerprint"] = FingerprintModel(device)
        check.partials = device.mem_alloc(SLOTS * 8 * 264)
    return state


def _desc(words: Any, dtype: str) -> TensorDesc:
    flat = np.ascontiguousarray(words)
    return TensorDesc(dtype, flat.shape, (1,), flat.itemsize, flat.nbytes, host=flat.tobytes())


def _bf16(values: Any) -> Any:
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_device_and_host_checks_give_the_same_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    inputs = {
        "x": _desc(x, "torch.float32"),
        "y": _desc(np.zeros(n, np.uint16), "torch.bfloat16"),
        "count": _desc(np.zeros(4, np.int32), "torch.int32"),
        "n": n,
    }
    good = _bf16(x * 2)
    configs = [  # what each "config" writes into y (bf16) and count (int32)
        (good, [1, 2, 3, 4]),
        (good, [1, 2, 3, 4]),
        (_bf16(x * 2 + rng.standard_normal(n) * 1e-3), [1, 2, 3, 4]),  # within tolerance
        (_bf16(x * 3), [1, 2, 3, 4]),  # wrong
        (_bf16(np.where(np.arange(n) == 7, np.nan, x * 2)), [1, 2, 3, 4]),  # NaN
        (good, [1, 2, 3, 5]),  # an integer differs
        (_bf16(np.where(np.arange(n) == 9, np.inf, x * 2)), [1, 2, 3, 4]),  # Inf
    ]
    verdicts: dict[bool, list[Any]] = {}
    for on_device in (True, False):
        device = FakeDevice()
        state = _state(monkeypatch, device, on_device)
        state.set_inputs(inputs, [], [])
        found = []
        for y_words, count in configs:
            state.inputs.restore_all()
            device.view(state.inputs.tensors["y"].ptr, 2 * n)[:] = np.asarray(y_words, np.uint16).view(
                np.uint8
            )
            device.view(state.inputs.tensors["count"].ptr, 16)[:] = np.asarray(count, np.int32).view(np.uint8)
            device.dtoh_bytes = 0
            verdict = state.check_outputs()
            found.append((tuple(verdict), verdict.outputs, device.dtoh_bytes))
        assert state.device_check.active is on_device
        if on_device:
            named_on_device = state.device_check.launchers["fingerprint"].launches
        reference = state.settled_reference()
        assert reference is not None
        assert compare_np.fingerprint_words(
            "torch.bfloat16", np.frombuffer(reference["y"].host or b"", np.uint16)
        ) == (found[0][1]["y"].cluster)
        verdicts[on_device] = found
    for (device_verdict, device_outputs, _), (host_verdict, host_outputs, host_bytes) in zip(
        verdicts[True], verdicts[False], strict=True
    ):
        assert repr(device_verdict) == repr(host_verdict)  # repr: NaN equals NaN
        assert device_outputs == host_outputs
        assert host_bytes >= 2 * n  # the host check copies every output
    rows = 50 * 5 * SLOTS * 8  # a few dozen summaries of 5 programs' rows per check, at most
    for _, _, copied in verdicts[True]:
        # the device check reads back rows, and names a new representative on the device
        assert copied <= rows, copied
    assert named_on_device, "no representative was named on the device"
    assert verdicts[True][1][2] < 2 * n  # a config equal to a representative: no output copied
    assert verdicts[True][3][0][0] is False  # the wrong config fails, on the device too


def test_a_user_reference_or_an_unsupported_dtype_keeps_the_host_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    device = FakeDevice()
    state = _state(monkeypatch, device, True)
    x = np.ones(8, np.float64)
    state.set_inputs({"x": _desc(x, "torch.float64")}, [], [])  # float64: no variant loaded here
    state.inputs.restore_all()
    state.check_outputs()
    assert state.device_check.active is False
    state.set_inputs({"x": _desc(np.ones(8, np.float32), "torch.float32")}, [], [])
    state.set_reference({"x": _desc(np.ones(8, np.float32), "torch.float32")}, None)
    state.check_outputs()
    assert state.device_check.active is False

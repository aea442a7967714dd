"""The native sandbox's output check (``NativeState.check_outputs``) on CPU.

The GPU is the one thing that cannot exist on CI, so device memory is a host stand-in
(``host_memory.HostMemoryDriver``: ``cuMemAlloc``/``cuMemcpy*`` on bytearrays); the check
itself, numpy's comparison and the representatives are the real ones. A "kernel run" writes
the output words into the working copy, as a launch would.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from support.host_memory import HostMemoryDriver
from triton_kiln.sandbox.compare import Representatives
from triton_kiln.sandbox.device_check import DeviceCheck
from triton_kiln.sandbox.device_inputs import DeviceInputs, ScratchMemory
from triton_kiln.sandbox.ipc import TensorDesc
from triton_kiln.sandbox.native_worker import FLUSH_BYTES, NativeState


def make_state(values: dict[str, Any]) -> NativeState:
    state = NativeState.__new__(NativeState)  # no CUDA: the constructor's driver calls are skipped
    state.cuda = HostMemoryDriver()
    state.inputs = DeviceInputs(state.cuda)
    state.reset_to_zero, state.restore_value = [], []
    state.kernels, state.unsupported = {}, {}
    state.tolerances = None
    state.representatives = Representatives(state._compare_one)
    state.reference_raw = None
    state._read_buffers, state._nonfinite = {}, {}
    state.device_check = DeviceCheck(state.cuda, state.inputs, state.kernel)  # no kernels: host check
    state.scratch = (ScratchMemory(state.cuda), ScratchMemory(state.cuda))
    state.peak_bytes = FLUSH_BYTES
    descs = {}
    for name, array in values.items():
        dtype = "torch.bfloat16" if array.dtype == np.uint16 else f"torch.{array.dtype}"
        descs[name] = TensorDesc(dtype, array.shape, (1,), array.itemsize, array.nbytes, host=array.tobytes())
    state.set_inputs(descs, [], [])
    return state


def bf16(values: Any) -> Any:
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def run(state: NativeState, name: str, words: Any) -> Any:
    """One checked run that wrote ``words`` into ``name``."""
    state.inputs.restore_all()
    state.cuda.memcpy_htod(state.inputs.tensors[name].ptr, words.tobytes())
    return state.check_outputs()


def test_reused_read_buffers_never_change_a_kept_representative() -> None:
    rng = np.random.default_rng(0)
    x = bf16(rng.standard_normal(4096))
    state = make_state({"x": x, "y": np.zeros(4096, dtype=np.uint16)})
    y0 = bf16(rng.standard_normal(4096))
    first = run(state, "y", y0)
    assert first == (True, 0.0, "reference")
    assert state.representatives.names == ["y"]  # only y changed: the output
    other = bf16(rng.standard_normal(4096))  # a different output, read into the same buffer
    second = run(state, "y", other)
    assert second[0] is False
    kept = state.representatives.kept["y"]
    assert len(kept) == 2
    assert np.array_equal(np.asarray(kept[0][1].words), y0)  # the reference is intact
    assert np.array_equal(np.asarray(kept[1][1].words), other)
    again = run(state, "y", y0)
    assert again == (True, 0.0, "")  # bitwise equal to the reference
    assert again.outputs["y"].cluster == first.outputs["y"].cluster


def test_an_output_identical_to_a_representative_takes_its_nan_finding_without_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from triton_kiln.sandbox import compare_np

    y_nan = bf16([1.0, np.nan, 3.0, 4.0])
    state = make_state({"y": bf16([0.0, 0.0, 0.0, 0.0])})
    first = run(state, "y", y_nan)
    assert first.outputs["y"].nonfinite is True  # NaN where the argument held a number

    def no_decoding(*args: Any) -> Any:
        raise AssertionError("an identical output was decoded")

    monkeypatch.setattr(compare_np, "_decoded", no_decoding)
    second = run(state, "y", y_nan)
    assert second.outputs["y"].nonfinite is True
    assert second.outputs["y"].cluster == first.outputs["y"].cluster


def test_close_outputs_join_the_reference_and_far_ones_do_not() -> None:
    base = np.linspace(-2, 2, 1024, dtype=np.float32)
    state = make_state({"y": np.zeros(1024, dtype=np.float32)})
    reference = run(state, "y", base)
    close = run(state, "y", base + 1e-5)
    assert close[0] is True
    assert close.outputs["y"].cluster == reference.outputs["y"].cluster
    assert 0 < close[1] < 1e-4
    far = run(state, "y", base + 1.0)
    assert far[0] is False
    assert far.outputs["y"].differs_from == (reference.outputs["y"].cluster,)


def test_release_frees_the_runs_input_copies_and_scratch_and_says_what_it_held() -> None:
    """A run's end (``("release",)``): every copy of the inputs and the scratch are freed; the
    most held for the run (flush buffer, inputs' working and pristine copies, scratch) is said."""
    state = make_state({"out": np.zeros(1000, np.float32), "x": np.ones(500, np.float32)})
    state.scratch[0](1 << 16, 128, None)  # a launch asked for global scratch
    held = state.held_bytes()
    assert held >= FLUSH_BYTES + 2 * (4000 + 2000) + (1 << 16)
    allocated = len(state.cuda.memory)
    memory = state.release()
    assert memory["peak_bytes"] == held
    assert memory["held_bytes"] == FLUSH_BYTES
    assert state.inputs.tensors == {}
    assert len(state.cuda.memory) == allocated - 5  # 2 tensors x (working, pristine) + scratch
    assert state.release()["peak_bytes"] == FLUSH_BYTES  # counted afresh for the next run

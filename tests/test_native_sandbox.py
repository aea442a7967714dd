"""The native (torch-free) sandbox on a machine without a GPU: its C functions exist and fail
cleanly, the worker handshakes and exits with a clear reason, the client falls back without
hanging, input descriptors encode tensors faithfully, and the numpy output check agrees with
kiln.sandbox.compare."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from support.host_memory import HostMemoryDriver
from triton_kiln import settings
from triton_kiln.framing import FrameReader, encode
from triton_kiln.launch.native import native
from triton_kiln.sandbox import compare as torch_compare
from triton_kiln.sandbox import compare_np, ipc, native_worker, registry
from triton_kiln.sandbox.channel import Died, WorkerProcess
from triton_kiln.sandbox.device_inputs import DeviceInputs
from triton_kiln.sandbox.ipc import TensorDesc
from triton_kiln.sandbox.native_client import NativeBenchOutcome, NativeSandbox
from triton_kiln.sandbox.torch_client import BenchSpec, Sandbox

torch = pytest.importorskip("torch")

NO_GPU = not torch.cuda.is_available()
SANDBOX_FUNCTIONS = (
    "cuda_init",
    "mem_alloc",
    "mem_free",
    "memcpy_dtod",
    "memcpy_htod",
    "memcpy_dtoh",
    "memset_d8",
    "ctx_synchronize",
    "ipc_get_handle",
    "ipc_open",
    "ipc_close",
    "bench_loop",
)


def _spec() -> BenchSpec:
    return BenchSpec(
        key="k" * 64, group={}, hash="h", arg_names=["x"], signature={"x": "*fp32"}, constexprs={}, grid=(1,)
    )


# ------------------------------------------------------------------------------ C module


def test_c_module_has_the_sandbox_functions() -> None:
    from triton_kiln.launch.native import loaded_path

    module = native()
    assert loaded_path() == module.__file__  # what the sandbox is told to load
    missing = [name for name in SANDBOX_FUNCTIONS if not callable(getattr(module, name, None))]
    assert not missing


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("cuda_init", (0,)),
        ("mem_alloc", (16,)),
        ("mem_free", (0,)),
        ("memcpy_dtod", (0, 0, 4)),
        ("memcpy_htod", (0, b"abcd")),
        ("memcpy_dtoh", (bytearray(4), 0)),
        ("memset_d8", (0, 0, 4)),
        ("ctx_synchronize", ()),
        ("ipc_get_handle", (0, 0)),
        ("ipc_open", (b"\0" * 64,)),
        ("ipc_close", (0,)),
    ],
)
def test_c_functions_without_a_driver_raise_a_clear_error(name: str, args: tuple[Any, ...]) -> None:
    with pytest.raises(RuntimeError, match="libcuda"):
        getattr(native(), name)(*args)


def test_c_functions_check_their_arguments() -> None:
    module = native()
    with pytest.raises(TypeError):
        module.bench_loop(object(), (1,), (), [], [], 0, 0, 25.0, 100.0)  # not a Launcher


# ------------------------------------------------------------------------------ the worker


def test_worker_imports_neither_torch_nor_triton() -> None:
    code = (
        "import sys, time; t = time.perf_counter();"
        "import triton_kiln.sandbox.native_worker as w, triton_kiln.sandbox.device_inputs;"
        "import triton_kiln.sandbox.compare_np;"
        "import triton_kiln.artifacts.artifact, triton_kiln.launch.launcher, triton_kiln.launch.spec;"
        "print(time.perf_counter() - t);"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]; assert not bad, bad"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) < 2.0  # imports only (torch alone takes seconds)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.timeout(60)
def test_worker_handshakes_and_exits_cleanly_without_a_gpu() -> None:
    proc = WorkerProcess(
        "triton_kiln.sandbox.native_worker",
        native_worker.ENV_FD,
        native_worker.ENV_PARENT,
        {"sys_path": list(sys.path), "device": 0, "c_module": native().__file__},  # the caller's build
    )
    started = time.monotonic()
    reply = proc.receive(30)
    assert reply[0] == "fatal"
    assert "libcuda" in reply[1]
    assert proc.wait(10) == native_worker.EXIT_NO_DEVICE
    assert time.monotonic() - started < 15
    with pytest.raises(Died):
        proc.receive(5)
    proc.close()
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.timeout(180)
def test_client_falls_back_to_the_torch_sandbox_and_reports_why() -> None:
    sandbox = NativeSandbox(device=0, timeout_s=30)
    sandbox.set_inputs({"x": torch.ones(4), "n": 4}, [], [])
    outcome = sandbox.bench(_spec())
    assert isinstance(outcome, NativeBenchOutcome)
    assert sandbox.native_unavailable is not None
    assert "libcuda" in sandbox.native_unavailable
    assert outcome.sandbox["via"] == "torch"
    # The torch sandbox cannot start either on this machine: an outcome, not an exception or a hang.
    assert outcome.status == "bench_crashed"
    torch_pid = sandbox.torch_sandbox.pid if sandbox.torch_sandbox else None
    assert sandbox.bench(_spec()).status == "bench_crashed"
    sandbox.close()
    assert sandbox.pid is None
    if torch_pid is not None:
        assert not psutil.pid_exists(torch_pid) or psutil.Process(torch_pid).status() == psutil.STATUS_ZOMBIE


def test_classify_and_quantiles() -> None:
    import triton.testing

    assert native_worker.classify(RuntimeError("CUDA driver error 700 (illegal) in x")) == ("sticky", True)
    assert native_worker.classify(RuntimeError("CUDA driver error 719 (launch failed) in x")) == (
        "sticky",
        True,
    )
    assert (
        native_worker.classify(RuntimeError("CUDA driver error 701 (too many) in x"))[0] == "out_of_resources"
    )
    assert native_worker.classify(native_worker.OutOfResources("smem")) == ("out_of_resources", False)
    assert native_worker.classify(RuntimeError("CUDA driver error 1 (invalid) in x")) == ("error", False)
    assert native_worker.classify(ValueError("anything")) == ("error", False)
    rng = random.Random(0)
    for n in (1, 2, 3, 10, 1001):
        times = [rng.uniform(0.01, 2.0) for _ in range(n)]
        expected = triton.testing._quantile(times, [0.5, 0.2, 0.8])
        assert native_worker.quantiles(times, (0.5, 0.2, 0.8)) == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------------ descriptors


def _tensors() -> dict[str, Any]:
    base = torch.randn(64, 48)
    return {
        "contiguous_f32": torch.randn(5, 7),
        "transposed": base.t(),
        "sliced": base[3:9, 5:40:3],
        "expanded": torch.randn(1, 6).expand(4, 6),
        "f16": torch.randn(33).half(),
        "bf16": torch.randn(2, 17).bfloat16()[:, 1:],
        "i32": torch.randint(-1000, 1000, (10,), dtype=torch.int32),
        "i64": torch.randint(-(2**40), 2**40, (3, 3), dtype=torch.int64),
        "u8": torch.randint(0, 255, (9,), dtype=torch.uint8),
        "bool": torch.rand(11) > 0.5,
        "f64": torch.randn(4, dtype=torch.float64),
        "e4m3": torch.randn(12).to(torch.float8_e4m3fn),
        "e5m2": torch.randn(12).to(torch.float8_e5m2),
        "empty": torch.empty(0, 5),
    }


def _host_array(tensor: Any) -> compare_np.HostArray:
    desc, reason = ipc.describe_tensor(tensor, 0, use_ipc=False)
    assert desc.host is not None
    assert reason is not None
    buffer = np.frombuffer(desc.host, dtype=np.uint8)
    return compare_np.decode(
        compare_np.raw_view(buffer, desc.dtype, desc.itemsize, desc.shape, desc.strides), desc.dtype
    )


@pytest.mark.parametrize("name", list(_tensors()))
def test_host_descriptor_round_trips_values_and_layout(name: str) -> None:
    tensor = _tensors()[name]
    desc, reason = ipc.describe_tensor(tensor, 0)
    assert reason == "it is not a CUDA tensor"
    assert desc.handle is None
    assert desc.host is not None
    assert desc.shape == tuple(tensor.shape)
    assert desc.strides == tuple(tensor.stride())
    assert desc.dtype == str(tensor.dtype)
    assert desc.itemsize == tensor.element_size()
    assert desc.nbytes == len(desc.host) == ipc.span_bytes(desc.shape, desc.strides, desc.itemsize)
    assert desc.align == tensor.data_ptr() % ipc.ALIGN
    # pickled through the sandbox protocol and decoded without torch: the same values
    (payload,) = FrameReader().feed(encode(("inputs", {name: desc}, [], [])))
    import pickle

    received = pickle.loads(payload)[1][name]
    assert received == desc
    decoded = _host_array(tensor)
    expected = tensor.double().numpy() if tensor.dtype.is_floating_point else tensor.numpy()
    assert decoded.shape == tuple(tensor.shape)
    np.testing.assert_array_equal(np.asarray(decoded.values, dtype=expected.dtype), expected)


def test_span_bytes() -> None:
    assert ipc.span_bytes((4, 6), (0, 1), 4) == 24  # an expanded row: one row's bytes
    assert ipc.span_bytes((3, 2), (1, 3), 2) == 12
    assert ipc.span_bytes((0, 5), (5, 1), 4) == 0
    assert ipc.span_bytes((), (), 8) == 8


class _FakeCudaTensor:
    """A CPU tensor that reports itself on cuda:0 (for the caller-side IPC encoding only)."""

    is_cuda = True

    def __init__(self, tensor: Any, ptr: int) -> None:
        self.tensor, self.ptr = tensor, ptr
        self.shape, self.dtype = tensor.shape, tensor.dtype
        self.device = torch.device("cuda", 0)

    def stride(self) -> tuple[int, ...]:
        return tuple(self.tensor.stride())

    def element_size(self) -> int:
        return int(self.tensor.element_size())

    def data_ptr(self) -> int:
        return self.ptr

    def detach(self) -> Any:
        return self.tensor

    def storage_offset(self) -> int:
        return int(self.tensor.storage_offset())


def test_ipc_descriptor_carries_handle_offset_and_alignment(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    def fake_handle(ptr: int, device: int) -> tuple[bytes, int, int]:
        calls.append((ptr, device))
        return b"H" * 64, 0x7F0000000000, 1 << 21

    monkeypatch.setattr(ipc, "ipc_handle", fake_handle)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    tensor = _FakeCudaTensor(torch.randn(8, 8)[:, :4], 0x7F0000000000 + 4096 + 36)
    desc, reason = ipc.describe_tensor(tensor, 0)
    assert reason is None
    assert calls == [(tensor.ptr, 0)]
    assert desc.handle == b"H" * 64
    assert desc.host is None
    assert desc.via_ipc
    assert desc.offset == 4096 + 36
    assert desc.align == 36
    assert desc.allocation == 0x7F0000000000
    assert desc.nbytes == (7 * 8 + 3 + 1) * 4
    # another device than the sandbox's, a span beyond the allocation, a failing driver,
    # expandable segments: host copies, each with its reason
    assert ipc.describe_tensor(tensor, 1)[1] == "it is on cuda:0, the sandbox on cuda:1"
    far = _FakeCudaTensor(torch.randn(4), 0x7F0000000000 + (1 << 21) - 8)
    desc, reason = ipc.describe_tensor(far, 0)
    assert reason is not None
    assert "does not lie in its allocation" in reason
    assert desc.host is not None

    def failing(ptr: int, device: int) -> tuple[bytes, int, int]:
        raise RuntimeError("CUDA driver error 1 (invalid argument) in cuIpcGetMemHandle")

    monkeypatch.setattr(ipc, "ipc_handle", failing)
    desc, reason = ipc.describe_tensor(tensor, 0)
    assert reason is not None
    assert "cuIpcGetMemHandle" in reason
    assert desc.host is not None
    assert len(desc.host) == desc.nbytes
    monkeypatch.setattr(ipc, "ipc_handle", fake_handle)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    desc, reason = ipc.describe_tensor(tensor, 0)
    assert reason is not None
    assert "expandable segments" in reason
    assert desc.handle is None
    # host_only turns every IPC descriptor into a host copy of the same bytes
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    desc, _ = ipc.describe_tensor(tensor, 0)
    converted = ipc.host_only({"t": desc, "n": 3}, {"t": tensor, "n": 3})
    assert converted["n"] == 3
    assert converted["t"].host == ipc.host_bytes(tensor, desc.nbytes)


def test_device_inputs_copy_from_the_caller_then_close_the_handle() -> None:
    caller = bytearray(os.urandom(4096))
    driver = HostMemoryDriver(caller)
    a = TensorDesc("torch.float32", (16,), (1,), 4, 64, 16, 0, b"A" * 64, offset=128, allocation=1 << 40)
    b = TensorDesc("torch.int32", (4, 2), (1, 4), 4, 32, 0, 0, b"B" * 64, offset=1024, allocation=1 << 40)
    host = TensorDesc("torch.uint8", (5,), (1,), 1, 5, host=b"hello")
    inputs = DeviceInputs(driver)
    inputs.load({"a": a, "b": b, "h": host, "n": 7})
    # one allocation, opened once, synchronized, closed before load() returned
    assert driver.log[:3] == ["open", "sync", "close"]
    assert driver.log.count("open") == 1
    assert inputs.via_ipc == 2
    assert inputs.via_host == 1
    assert inputs.argument("n") == 7
    assert inputs.argument("a") % 256 == 16
    got = inputs.read("a")
    np.testing.assert_array_equal(got, np.frombuffer(bytes(caller[128:192]), dtype=np.float32))
    np.testing.assert_array_equal(
        inputs.read("b"), np.frombuffer(bytes(caller[1024:1056]), dtype=np.int32).reshape(2, 4).T
    )
    assert bytes(inputs.read("h")) == b"hello"
    # a kernel's write lands in the sandbox's copy only; restore_all brings the pristine bytes back
    before = bytes(caller)
    driver.memcpy_htod(inputs.argument("a"), b"\xff" * 64)
    assert inputs.changed() == ["a"]
    assert bytes(caller) == before
    inputs.restore_all()
    assert inputs.changed() == []
    assert inputs.zero_spans(["a", "n"]) == [(inputs.argument("a"), 64)]
    inputs.free()
    assert driver.memory == {}


# ------------------------------------------------------------------------------ compare


def _compare_cases() -> list[tuple[str, dict[str, Any], dict[str, Any], tuple[float, float] | None]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 3, generator=g)
    nan = x.clone()
    nan[3, 1] = float("nan")
    inf = x.clone()
    inf[0, 0] = float("inf")
    ints = torch.arange(20, dtype=torch.int32)
    ints_off = ints.clone()
    ints_off[4] = 99
    return [
        ("equal", {"o": x}, {"o": x.clone()}, None),
        ("within", {"o": x + 5e-5}, {"o": x}, None),
        ("outside", {"o": x + 1e-2}, {"o": x}, None),
        ("tolerance override", {"o": x + 1e-2}, {"o": x}, (0.0, 0.1)),
        ("nan in output", {"o": nan}, {"o": x}, None),
        ("nan in both", {"o": nan}, {"o": nan.clone()}, None),
        ("inf in both", {"o": inf}, {"o": inf.clone()}, None),
        ("inf in reference", {"o": x}, {"o": inf}, None),
        ("shape", {"o": x[:10]}, {"o": x}, None),
        ("dtype", {"o": x.double()}, {"o": x}, None),
        ("ints equal", {"o": ints}, {"o": ints.clone()}, None),
        ("ints differ", {"o": ints_off}, {"o": ints}, None),
        ("bool", {"o": ints > 5}, {"o": ints_off > 5}, None),
        ("fp16", {"o": (x + 3e-3).half()}, {"o": x.half()}, None),
        ("fp16 far", {"o": (x + 3e-1).half()}, {"o": x.half()}, None),
        ("bf16", {"o": (x * 1.01).bfloat16()}, {"o": x.bfloat16()}, None),
        ("bf16 far", {"o": (x * 1.5).bfloat16()}, {"o": x.bfloat16()}, None),
        ("e4m3", {"o": x.to(torch.float8_e4m3fn)}, {"o": (x * 1.05).to(torch.float8_e4m3fn)}, None),
        ("e5m2", {"o": x.to(torch.float8_e5m2)}, {"o": (x * 3).to(torch.float8_e5m2)}, None),
        ("f64", {"o": x.double() + 1e-12}, {"o": x.double()}, None),
        ("no common name", {"o": x}, {"p": x}, None),
        ("second differs", {"a": x, "b": x + 1}, {"a": x, "b": x}, None),
        ("empty", {"o": torch.empty(0, 3)}, {"o": torch.empty(0, 3)}, None),
    ]


@pytest.mark.parametrize("case", _compare_cases(), ids=lambda c: c[0])
def test_numpy_compare_agrees_with_kiln_compare(case: Any) -> None:
    _, outputs, reference, tolerances = case
    expected = torch_compare.compare(outputs, reference, tolerances)
    got = compare_np.compare(
        {n: _host_array(t) for n, t in outputs.items()},
        {n: _host_array(t) for n, t in reference.items()},
        tolerances,
    )
    assert got.ok == expected.ok
    assert got.detail == expected.detail
    if math.isnan(expected.max_abs_diff):
        assert math.isnan(got.max_abs_diff)
    else:
        assert got.max_abs_diff == pytest.approx(expected.max_abs_diff, rel=1e-9, abs=0)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_float8_tables_match_torch(dtype: str) -> None:
    bits = torch.arange(256, dtype=torch.uint8)
    values = bits.view(getattr(torch, dtype)).float().numpy()
    decoded = compare_np.decode(bits.numpy(), f"torch.{dtype}").values
    np.testing.assert_array_equal(np.isnan(decoded), np.isnan(values))
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(decoded[finite], values[finite])


# ------------------------------------------------------------------------------ prestart


def test_prestart_does_nothing_without_a_gpu() -> None:
    if not NO_GPU:
        pytest.skip("this machine has a GPU")
    assert registry.gpu_present() is False
    assert registry.prestart(0) is None


def test_shared_sandbox_is_one_per_device_and_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_SANDBOXES", {})
    with settings.scope(native_sandbox=True):
        first = registry.shared(5)
        assert isinstance(first, NativeSandbox)
        assert registry.shared(5) is first
    monkeypatch.setattr(registry, "_SANDBOXES", {})
    with settings.scope(native_sandbox=False):
        assert isinstance(registry.shared(5), Sandbox)


@pytest.mark.timeout(60)
def test_prestart_starts_the_shared_sandbox_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_SANDBOXES", {})
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    started = time.monotonic()
    with settings.scope(native_sandbox=True, sandbox=True):
        sandbox = registry.prestart(3)
        assert time.monotonic() - started < 2.0  # returns at once; the process warms up on its own
        assert isinstance(sandbox, NativeSandbox)
        assert registry.shared(3) is sandbox
        pid = sandbox.pid
        assert pid is not None
        assert psutil.pid_exists(pid)
        with settings.scope(sandbox=False):
            assert registry.prestart(4) is None  # KILN_SANDBOX=0: nothing to start
    sandbox.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

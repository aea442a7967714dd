"""Triton 3.5/3.6's per-signature C launcher built off the first launch's path:
kiln's source for it is exactly what Triton's ``CudaLauncher`` hands ``compile_module_from_src``
(real compiles for sm_90; the call to gcc with libcuda is the only thing faked: recorded, then
refused), none on Triton 3.7, the build returns ``False`` without libcuda or a C compiler, the
background builds run once per distinct source and never raise, and kiln's plain-jit routing
and autotuner start the build with the kernel's source when they submit its compiles."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import triton
import triton.language as tl
from triton.compiler import ASTSource

import triton_kiln as kiln
from support import kernels
from support.jit_support import (
    SM90,
    fake_driver,  # noqa: F401 - autouse fixture
    route_on,  # noqa: F401 - fixture
)
from triton_kiln import CompilePool, GPUTarget, settings
from triton_kiln.launch import prebuild
from triton_kiln.triton_compat import triton_launcher
from triton_kiln.triton_compat.versions import builds_launcher_per_signature

torch = pytest.importorskip("torch")  # warmup() and the autotuner take torch tensors / dtypes

PER_SIGNATURE = builds_launcher_per_signature()
needs_per_signature = pytest.mark.skipif(
    not PER_SIGNATURE, reason="this Triton builds no launcher per signature"
)

pytestmark = pytest.mark.timeout(300)


@triton.jit
def mixed_kernel(x_ptr, idx_ptr, out_ptr, n, offset, scale, flag, unused, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    y = tl.load(x_ptr + i, mask=mask).to(tl.float32) * scale
    y += tl.load(idx_ptr + i, mask=mask).to(tl.float32) + offset.to(tl.float32)
    if flag:
        y = -y
    tl.store(out_ptr + i, y, mask=mask)


MIXED_SIGNATURE = {
    "x_ptr": "*fp16",
    "idx_ptr": "*i32",
    "out_ptr": "*fp32",
    "n": "i32",
    "offset": "i64",
    "scale": "fp32",
    "flag": "i1",
    "unused": "constexpr",  # None: a constant argument
    "BLOCK": "constexpr",
}


def mixed_source(block: int) -> Any:
    return ASTSource(mixed_kernel, dict(MIXED_SIGNATURE), {"unused": None, "BLOCK": block})


class _Refused(Exception):
    """Raised where Triton would run gcc against libcuda (there is no GPU driver here)."""


def tritons_launcher_source(kernel: Any) -> str:
    """The source Triton's own ``CudaLauncher(kernel.src, kernel.metadata)`` hands
    ``compile_module_from_src`` (the call recorded, then refused: no gcc, no libcuda)."""
    from triton.backends.nvidia import driver

    source, name = what_triton_builds(lambda: driver.CudaLauncher(kernel.src, kernel.metadata))
    assert name == triton_launcher.LAUNCHER_MODULE
    return source


def what_triton_builds(make: Callable[[], Any]) -> tuple[str, str]:
    """``(source, module name)`` of the one ``compile_module_from_src`` call ``make()`` makes in
    Triton's NVIDIA driver (recorded, then refused: no gcc, no libcuda)."""
    from triton.backends.nvidia import driver

    seen: list[tuple[str, str]] = []

    def record(src: str, name: str, **kwargs: Any) -> Any:
        seen.append((src, name))
        raise _Refused

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver, "compile_module_from_src", record)
        patch.setattr(driver, "library_dirs", list)  # libcuda's directories: none here
        with pytest.raises(_Refused):
            make()
    (call,) = seen
    return call


# --- the launcher's source ---------------------------------------------------------------------


@needs_per_signature
def test_the_source_is_the_one_tritons_launcher_builds_for_a_kernel_of_many_types() -> None:
    src = mixed_source(128)
    kernel = triton.compile(src, target=SM90)
    expected = tritons_launcher_source(kernel)
    assert triton_launcher.launcher_source(src, SM90) == expected  # from what kiln submits
    assert triton_launcher.launcher_source(kernel.src, SM90) == expected
    assert "PyObject *launch" in expected or "launch(" in expected  # a real launcher's C source


@needs_per_signature
def test_configs_of_one_kernel_share_one_launcher_source() -> None:
    small = triton.compile(mixed_source(64), target=SM90, options={"num_warps": 2})
    large = triton.compile(mixed_source(256), target=SM90, options={"num_warps": 8})
    assert small.hash != large.hash  # two binaries
    ours = {triton_launcher.launcher_source(mixed_source(b), SM90) for b in (64, 256)}
    assert ours == {tritons_launcher_source(small)} == {tritons_launcher_source(large)}


@needs_per_signature
def test_a_signature_with_tensor_descriptors_or_another_backend_has_no_source() -> None:
    fn = SimpleNamespace(arg_names=["desc", "n"])
    plain = SimpleNamespace(signature={"desc": "*fp16", "n": "i32"}, constants={}, fn=fn)
    assert triton_launcher.launcher_source(plain, SM90) is not None
    desc = SimpleNamespace(signature={"desc": "tensordesc<fp16[64, 64]>", "n": "i32"}, constants={}, fn=fn)
    assert triton_launcher.launcher_source(desc, SM90) is None  # its lowering is in the binary's metadata
    assert triton_launcher.launcher_source(plain, GPUTarget("hip", "gfx942", 64)) is None


@pytest.mark.skipif(PER_SIGNATURE, reason="this Triton builds a launcher per signature")
def test_triton_37_builds_no_launcher_per_signature() -> None:
    from triton.backends.nvidia import driver

    assert not hasattr(driver, "make_launcher")  # what the version switch stands for
    assert triton_launcher.launcher_source(mixed_source(128), SM90) is None


# --- the build ---------------------------------------------------------------------------------


def _launcher_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob(f"{triton_launcher.LAUNCHER_MODULE}*")) if cache.exists() else []


def _some_source() -> str:
    from triton.backends.nvidia import driver

    if hasattr(driver, "make_launcher"):
        return str(driver.make_launcher({}, {"x": "*fp32", "n": "i32"}, None))
    return "int kiln_no_launcher_here;\n"  # Triton 3.7: any C source goes the same way


def skip_where_libcuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the test on a machine with ``libcuda.so.1`` (a GPU machine: Triton's builds succeed)."""
    from triton.backends.nvidia import driver

    monkeypatch.delenv("TRITON_LIBCUDA_PATH", raising=False)
    for cached in (driver.library_dirs, driver.libcuda_dirs):
        cache_clear = getattr(cached, "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
    try:
        driver.libcuda_dirs()
    except AssertionError:
        return  # no libcuda.so.1, as on every CPU machine
    pytest.skip("this machine has libcuda: the build would succeed")


def test_the_build_returns_false_without_libcuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    skip_where_libcuda(monkeypatch)
    assert triton_launcher.build_launcher(_some_source()) is False
    assert _launcher_files(tmp_path / "triton-cache") == []


def test_the_build_returns_false_without_a_c_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triton.backends.nvidia import driver

    fake_libcuda = tmp_path / "libcuda-dir"  # only its name is read before the compiler runs
    fake_libcuda.mkdir()
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(fake_libcuda))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    driver.library_dirs.cache_clear()
    driver.libcuda_dirs.cache_clear()
    try:
        assert triton_launcher.build_launcher(_some_source()) is False
    finally:
        driver.library_dirs.cache_clear()
        driver.libcuda_dirs.cache_clear()
    assert _launcher_files(tmp_path / "triton-cache") == []


# --- the background builds ---------------------------------------------------------------------


class Recorder:
    """A builder standing in for gcc: records each source and the thread it ran on."""

    def __init__(self, result: bool = True, error: Exception | None = None) -> None:
        self.sources: list[str] = []
        self.threads: list[str] = []
        self.result = result
        self.error = error

    def __call__(self, source: str) -> bool:
        self.sources.append(source)
        self.threads.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error
        return self.result


def test_one_build_per_distinct_source_on_a_background_thread() -> None:
    recorder = Recorder()
    builds = prebuild.LauncherPrebuilder(builder=recorder)
    queued = [builds.start_source(s) for s in ("a", "b", "a", "b", "c", "a")]
    assert builds.wait(30)
    assert queued == [True, True, False, False, True, False]
    assert sorted(recorder.sources) == ["a", "b", "c"]
    assert set(recorder.threads) == {"kiln-launcher-prebuild"}  # never the caller's thread


@needs_per_signature
def test_configs_of_one_kernel_start_one_build() -> None:
    recorder = Recorder()
    builds = prebuild.LauncherPrebuilder(builder=recorder)
    assert builds.start(mixed_source(64), SM90) is True
    assert builds.start(mixed_source(256), SM90) is False  # the same launcher
    assert builds.wait(30)
    assert recorder.sources == [triton_launcher.launcher_source(mixed_source(64), SM90)]


def test_a_failing_builder_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    failing = prebuild.LauncherPrebuilder(builder=Recorder(error=RuntimeError("gcc exploded")))
    refused = prebuild.LauncherPrebuilder(builder=Recorder(result=False))
    with caplog.at_level(logging.DEBUG, logger="kiln.launch"):
        assert failing.start_source("x") is True
        assert refused.start_source("x") is True
        assert failing.wait(30)
        assert refused.wait(30)
        assert failing.start_source("y") is True  # its thread survived the exception
        assert failing.wait(30)
    assert "gcc exploded" in caplog.text
    assert "not prebuilt" in caplog.text
    assert refused.start_source("y") is False  # no libcuda or C compiler here: not tried again


def test_start_never_raises_and_kilns_own_processes_never_prebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    builds = prebuild.LauncherPrebuilder(builder=recorder)
    assert builds.start(object(), SM90) is False  # no signature: logged, not raised
    assert prebuild.start_requests([object()]) == 0  # type: ignore[list-item]
    monkeypatch.setenv("KILN_ZYGOTE_FD", "99")  # as in kiln's zygote and its workers
    assert builds.start(mixed_source(64), SM90) is False
    assert builds.wait(5)
    assert recorder.sources == []


def test_the_real_builder_in_the_background_returns_false_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default builder is Triton's own build: here (no libcuda) it logs and builds nothing."""
    skip_where_libcuda(monkeypatch)
    results: list[bool] = []
    builds = prebuild.LauncherPrebuilder()
    assert builds.builder is triton_launcher.build_launcher
    builds.builder = lambda source: results.append(triton_launcher.build_launcher(source)) or results[-1]
    assert builds.start_source(_some_source()) is True
    assert builds.wait(60)
    assert results == [False]


# --- who starts it -----------------------------------------------------------------------------


class RecordingPrebuilder(prebuild.LauncherPrebuilder):
    """This process's prebuilder in the tests: the real queue and threads, gcc recorded."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        super().__init__(builder=self.recorder)
        self.started: list[Any] = []

    def _start(self, src: Any, target: Any) -> tuple[bool, str | None]:
        self.started.append((src, target))
        return super()._start(src, target)


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> RecordingPrebuilder:
    builds = RecordingPrebuilder()
    monkeypatch.setattr(prebuild, "PREBUILDER", builds)
    return builds


@pytest.fixture(autouse=True)
def fresh_jit_caches() -> None:
    kernels.add_kernel.device_caches.clear()


def test_a_routed_plain_jit_compile_starts_its_launchers_build(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    recording: RecordingPrebuilder,
) -> None:
    pool = make_pool()
    route_on(pool)
    f32 = torch.float32
    kernel = kernels.add_kernel.warmup(f32, f32, f32, 1024, BLOCK=128, grid=(1,))
    assert pool.stats.compiled == 1  # compiled in the pool
    assert recording.wait(30)
    ((src, target),) = recording.started
    assert target == SM90
    assert dict(src.signature) == dict(kernel.src.signature)
    if PER_SIGNATURE:  # the very source Triton's launcher builds at the kernel's first launch
        assert recording.recorder.sources == [tritons_launcher_source(kernel)]
    else:
        assert recording.recorder.sources == []


@needs_per_signature
def test_a_routed_compile_returns_after_its_launchers_build_in_flight(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    recording: RecordingPrebuilder,
) -> None:
    """A small kernel compiles faster than gcc builds its launcher: the routed compile waits for
    the build in flight, so the launch that follows finds it in Triton's cache rather than
    running gcc a second time in the caller's thread (seen on the H100: both threads built)."""
    finished: list[float] = []

    def slow_build(source: str) -> bool:
        time.sleep(1.5)  # longer than the pool's compile of add_kernel
        finished.append(time.monotonic())
        return True

    recording.builder = slow_build
    pool = make_pool()
    route_on(pool)
    f32 = torch.float32
    kernels.add_kernel.warmup(f32, f32, f32, 1024, BLOCK=32, grid=(1,))
    returned = time.monotonic()
    assert pool.stats.compiled == 1
    assert len(finished) == 1
    assert finished[0] <= returned


def test_kiln_prebuild_launchers_0_starts_nothing(
    make_pool: Callable[..., CompilePool],
    route_on: Callable[[CompilePool], None],  # noqa: F811
    recording: RecordingPrebuilder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KILN_PREBUILD_LAUNCHERS", "0")
    assert settings.current().prebuild_launchers is False
    pool = make_pool()
    route_on(pool)
    kernels.add_kernel.warmup(torch.float32, torch.float32, torch.float32, 1024, BLOCK=64, grid=(1,))
    assert pool.stats.compiled == 1
    assert recording.started == []


class FakeBench:
    """Stands in for the GPU's timings (test_autotune_cpu.py's, one pass)."""

    owns_timing = False

    def __init__(self, tuner: Any, args: Any, kwargs: Any) -> None:
        self.tuner = tuner

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> Any:
        from triton_kiln.sandbox import BenchOutcome

        ms = 1.0 / candidate.config.kwargs["BLOCK"]
        return BenchOutcome("ok", timings=[ms, ms, ms])

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


def test_a_tuning_run_starts_one_launcher_build_for_its_configs(
    make_pool: Callable[..., CompilePool], tmp_path: Path, recording: RecordingPrebuilder
) -> None:
    from triton_kiln.tuning import TuningDatabase

    tuner = kiln.autotune(
        [kiln.Config({"BLOCK": b}, num_warps=4) for b in (64, 128, 256)],
        key=["n"],
        pool=make_pool(workers=2),
        database=TuningDatabase(tmp_path / "tuning.sqlite3"),
        target=SM90,
    )(kernels.scale_kernel)
    tuner._bencher_factory = FakeBench
    n = 4096
    x = torch.randn(n)
    tuner.run(x, torch.empty_like(x), n, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=True)
    assert tuner.best_config.kwargs == {"BLOCK": 256}
    assert recording.wait(30)
    ((src, target),) = recording.started  # three configs, one signature: one start
    assert target == SM90
    assert dict(src.signature) == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    if PER_SIGNATURE:  # the source Triton's launcher builds for any of these configs' binaries
        source = ASTSource(kernels.scale_kernel, dict(src.signature), {"BLOCK": 64})
        binary = triton.compile(source, target=SM90)
        assert recording.recorder.sources == [tritons_launcher_source(binary)]
    else:
        assert recording.recorder.sources == []


# --- end to end, with a stand-in libcuda: the first launch's launcher is a cache hit ------------

CUDA_STUB_FUNCTIONS = (  # what the launcher's C source calls directly (the rest via dlsym)
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuFuncSetAttribute",
    "cuGetErrorString",
    "cuPointerGetAttribute",
    "cuPointerGetAttributes",
)


@pytest.fixture
def stub_libcuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ``libcuda.so.1`` with the driver functions the launcher links (each returns an error):
    the GPU driver is the one fake; gcc, Triton's build and its cache are real."""
    import subprocess

    from triton.backends.nvidia import driver

    directory = tmp_path / "stub-libcuda"
    directory.mkdir()
    source = directory / "cuda.c"
    source.write_text("".join(f"int {name}(void) {{ return 1; }}\n" for name in CUDA_STUB_FUNCTIONS))
    library = directory / "libcuda.so.1"
    command = ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library), str(source)]
    subprocess.run(command, check=True)
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(directory))
    driver.library_dirs.cache_clear()
    driver.libcuda_dirs.cache_clear()
    yield directory
    driver.library_dirs.cache_clear()
    driver.libcuda_dirs.cache_clear()


FIRST_LAUNCH = """
import ctypes, hashlib, json, os, sys, sysconfig, threading
# the stand-in driver library, loaded first: the launcher's libcuda.so.1 dependency resolves to it
ctypes.CDLL(os.path.join(os.environ["TRITON_LIBCUDA_PATH"], "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
import triton
from triton.backends.nvidia import driver
from triton.runtime.build import platform_key
from triton.runtime.cache import get_cache_manager
from triton_kiln import GPUTarget
from triton_kiln.launch import prebuild
sys.path.insert(0, sys.argv[1])
from support import kernels

original = driver.compile_module_from_src
builds = []  # (thread, whether Triton's cache held the module before the call)

def record(src, name, **kwargs):
    key = hashlib.sha256((src + platform_key()).encode()).hexdigest()
    file = name + sysconfig.get_config_var("EXT_SUFFIX")
    builds.append((threading.current_thread().name, get_cache_manager(key).get_file(file) is not None))
    return original(src=src, name=name, **kwargs)

driver.compile_module_from_src = record
target = GPUTarget("cuda", 90, 32)
sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
src = triton.compiler.ASTSource(kernels.add_kernel, sig, {"BLOCK": 256})
queued = prebuild.start(src, target)  # as kiln's pool submit does
kernel = triton.compile(src, target=target)  # the compile it overlaps with
done = prebuild.PREBUILDER.wait(60)
launcher = driver.CudaLauncher(kernel.src, kernel.metadata)  # what the first launch makes
print(json.dumps({"queued": queued, "done": done, "builds": builds, "loaded": callable(launcher.launch)}))
"""


@needs_per_signature
def test_the_first_launchs_launcher_is_a_cache_hit_after_the_prebuild(
    stub_libcuda: Path, tmp_path: Path
) -> None:
    """Real gcc and Triton's own build and cache, in a fresh process whose libcuda is the stand-in:
    the background thread builds the launcher, the first launch's ``CudaLauncher`` loads it
    from Triton's cache without running gcc."""
    import json
    import os
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": str(tests.parent / "src"),
        "TRITON_CACHE_DIR": str(tmp_path / "first-launch-cache"),
    }
    command = [sys.executable, "-c", FIRST_LAUNCH, str(tests)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["queued"] is True
    assert report["done"] is True
    assert report["builds"] == [["kiln-launcher-prebuild", False], ["MainThread", True]]
    assert report["loaded"] is True


# --- Triton's CUDA driver utilities (cuda_utils): every version --------------------------------


def test_the_driver_utils_source_is_the_one_tritons_driver_builds() -> None:
    from triton.backends.nvidia import driver

    built = what_triton_builds(driver.CudaUtils)
    assert built == (triton_launcher.driver_utils_source(), triton_launcher.DRIVER_UTILS_MODULE)


def test_the_driver_utils_build_returns_false_without_libcuda(monkeypatch: pytest.MonkeyPatch) -> None:
    skip_where_libcuda(monkeypatch)
    assert triton_launcher.build_driver_utils() is False


def test_the_driver_utils_are_built_once_off_the_callers_thread_and_never_raise(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(prebuild, "_driver_utils_started", False)
    threads: list[str] = []
    done = threading.Event()

    def build() -> bool:
        threads.append(threading.current_thread().name)
        done.set()
        raise RuntimeError("gcc is gone")

    with caplog.at_level(logging.DEBUG, logger="kiln.launch"):
        assert prebuild.start_driver_utils(build) is True
        assert prebuild.start_driver_utils(build) is False  # once per process
        assert done.wait(30)
        time.sleep(0.1)  # the thread logs after the builder returns
    assert threads == ["kiln-driver-prebuild"]
    assert "gcc is gone" in caplog.text
    monkeypatch.setattr(prebuild, "_driver_utils_started", False)
    monkeypatch.setenv("KILN_ZYGOTE_FD", "99")  # kiln's own processes never prebuild
    assert prebuild.start_driver_utils(build) is False


def test_install_on_a_gpu_machine_starts_the_driver_utils_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton_kiln.autotuner import prewarm
    from triton_kiln.sandbox import registry

    started: list[bool] = []
    monkeypatch.setattr(registry, "gpu_present", lambda: True)  # the only fake: a GPU
    monkeypatch.setattr(registry, "prestart", lambda: None)  # (no sandbox without one)
    monkeypatch.setattr(prebuild, "start_driver_utils", lambda: started.append(True) or True)
    assert prewarm.prewarm(sandbox=True, pool=False) is True
    assert started == [True]
    monkeypatch.setenv("KILN_PREBUILD_LAUNCHERS", "0")
    assert prewarm.prewarm(sandbox=True, pool=False) is True
    assert started == [True]

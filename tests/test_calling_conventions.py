"""Every calling convention reaches a registered launch after its first call, on CPU.

The tuning is real (real compiles for sm_90 in the pool, a stand-in for the GPU's timings); the
launch itself needs a GPU, so :class:`KernelLauncher.launch` is replaced by a recorder. After a
call has taken the full path once, the same kind of call must be matched by kiln's C dispatcher:
no :class:`CompileRequest` is built and the autotuner's full path (``_run``) is not entered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl

import triton_kiln as kiln
from support.basics import SM90
from triton_kiln.autotuner import autotuner as autotuner_mod
from triton_kiln.autotuner import compile_requests
from triton_kiln.launch.launcher import KernelLauncher
from triton_kiln.sandbox import BenchOutcome
from triton_kiln.tuning import TuningDatabase

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(240)


@triton.jit
def axpy_kernel(x_ptr, out_ptr, bias_ptr, n, SCALE: tl.constexpr = 2, BLOCK: tl.constexpr = 64):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.load(x_ptr + offsets, mask=mask) * SCALE
    if bias_ptr is not None:
        y += tl.load(bias_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, y, mask=mask)


@triton.jit
def even_kernel(x_ptr, out_ptr, n, EVEN: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))
    else:
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class FakeBench:
    owns_timing = False

    def __init__(self, tuner: Any, args: Any, kwargs: Any) -> None:
        self.tuner = tuner

    def bench(self, candidate: Any, artifact: Any, grid: Any, phase: Any = None) -> BenchOutcome:
        ms = 1.0 / candidate.config.kwargs["BLOCK"]  # the largest block wins
        return BenchOutcome("ok", timings=[ms, ms, ms])

    def user_reference(self) -> None:
        return None

    def finish(self) -> None:
        return None


class Recorder:
    """Counts what the second call must not do, and records launches."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.launches: list[tuple[Any, tuple[Any, ...]]] = []
        self.requests = 0
        self.full_paths = 0
        recorder = self

        def launch(launcher: Any, grid: Any, args: tuple[Any, ...]) -> None:
            recorder.launches.append((grid, args))

        real_request = compile_requests.CompileRequest

        def counting_request(*a: Any, **k: Any) -> Any:
            recorder.requests += 1
            return real_request(*a, **k)

        real_run = autotuner_mod.Autotuner._run

        def counting_run(tuner: Any, *a: Any, **k: Any) -> Any:
            recorder.full_paths += 1
            return real_run(tuner, *a, **k)

        monkeypatch.setattr(KernelLauncher, "_launch_triton", launch)  # KILN_FAST_LAUNCH=0: every launch
        monkeypatch.setattr(compile_requests, "CompileRequest", counting_request)
        monkeypatch.setattr(autotuner_mod.Autotuner, "_run", counting_run)

    def reset(self) -> None:
        self.launches.clear()
        self.requests = 0
        self.full_paths = 0


def tuned(make_pool: Any, tmp_path: Path, fn: Any, **kwargs: Any) -> Any:
    kernel = kiln.autotune(
        [kiln.Config({"BLOCK": b}, num_warps=4) for b in (64, 128)],
        key=["n"],
        pool=make_pool(workers=2),
        database=TuningDatabase(tmp_path / "tuning.sqlite3"),
        target=SM90,
        **kwargs,
    )(fn)
    kernel._bencher_factory = FakeBench
    return kernel


@pytest.fixture
def no_fast_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU: every launch goes through KernelLauncher.launch (recorded), never kiln's C launcher.
    monkeypatch.setenv("KILN_FAST_LAUNCH", "0")


GRID = (4,)


def calls(x: Any, out: Any, n: int) -> dict[str, Any]:
    return {
        "positional": lambda k: k[GRID](x, out, None, n),
        "positional, default given": lambda k: k[GRID](x, out, None, n, 2),
        "keywords": lambda k: k[GRID](x_ptr=x, out_ptr=out, bias_ptr=None, n=n),
        "mixed, constexpr at call time": lambda k: k[GRID](x, out, bias_ptr=None, n=n, SCALE=2),
        "run(grid=...)": lambda k: k.run(x, out, None, n=n, grid=GRID, warmup=False),
        "grid function": lambda k: k[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, None, n=n),
    }


@pytest.mark.usefixtures("no_fast_launch")
@pytest.mark.parametrize("convention", list(calls(None, None, 0)))
def test_every_convention_reaches_a_registered_launch_after_its_first_call(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, convention: str
) -> None:
    kernel = tuned(make_pool, tmp_path, axpy_kernel)
    recorder = Recorder(monkeypatch)
    x, out = torch.randn(512), torch.empty(512)
    call = calls(x, out, 512)[convention]
    call(kernel)  # tunes, launches through the full path, registers
    assert kernel.best_config.kwargs == {"BLOCK": 128}
    first_args = recorder.launches[-1][1]
    recorder.reset()
    for _ in range(3):
        call(kernel)
    assert recorder.requests == 0, "a CompileRequest was built after the first call"
    assert recorder.full_paths == 0, "the full path ran after the first call"
    assert len(recorder.launches) == 3
    assert all(args == first_args for _, args in recorder.launches)
    # every parameter, in order: x, out, None, n, SCALE (default 2), BLOCK (the config's)
    assert first_args[:4] == (x, out, None, 512)
    assert first_args[4:] == (2, 128)


@pytest.mark.usefixtures("no_fast_launch")
def test_conventions_naming_the_same_arguments_share_one_launch(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = tuned(make_pool, tmp_path, axpy_kernel)
    x, out = torch.randn(512), torch.empty(512)
    recorder = Recorder(monkeypatch)
    kernel[GRID](x, out, None, n=512)  # first: keywords (full path)
    recorder.reset()
    for name, call in calls(x, out, 512).items():
        if name != "grid function":
            call(kernel)
    assert recorder.full_paths == 0
    assert recorder.requests == 0


@pytest.mark.usefixtures("no_fast_launch")
def test_another_constexpr_value_or_key_value_is_not_matched(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = tuned(make_pool, tmp_path, axpy_kernel)
    x, out = torch.randn(512), torch.empty(512)
    recorder = Recorder(monkeypatch)
    kernel[GRID](x, out, None, n=512)
    recorder.reset()
    kernel[GRID](x, out, None, n=512, SCALE=3)  # another variant: full path (compiles it)
    assert recorder.full_paths == 1
    assert recorder.requests >= 1
    assert recorder.launches[-1][1][4] == 3
    recorder.reset()
    kernel[GRID](x, out, None, n=1024)  # another tuning key: full path (tunes)
    assert recorder.full_paths == 1


@pytest.mark.usefixtures("no_fast_launch")
def test_autotune_over_heuristics_computes_values_per_config_and_keys_them(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []

    def even(args: dict[str, Any]) -> bool:
        seen.append(dict(args))
        return bool(args["n"] % args["BLOCK"] == 0)

    kernel = tuned(make_pool, tmp_path, triton.heuristics({"EVEN": even})(even_kernel))
    recorder = Recorder(monkeypatch)
    x, out = torch.randn(512), torch.empty(512)
    kernel[GRID](x, out, 192)  # 192 % 64 == 0, 192 % 128 != 0: EVEN differs per config
    requests = {c.kwargs["BLOCK"]: kernel._candidate(c, (x, out, 192), {}).request for c in kernel.configs}
    assert requests[64].constexprs["EVEN"] is True
    assert requests[128].constexprs["EVEN"] is False
    assert {"BLOCK", "num_warps", "n", "x_ptr"} <= set(seen[0])  # Triton's argument dict
    assert recorder.launches[-1][1][3:] == (False, 128)  # the winner's value, launched
    recorder.reset()
    kernel[GRID](x, out, 192)
    kernel[GRID](x, out, n=192)
    assert recorder.full_paths == 0
    assert recorder.requests == 0
    assert [a[3:] for _, a in recorder.launches] == [(False, 128), (False, 128)]
    kernel[GRID](x, out, 256)  # another key: tunes; now EVEN is True for the winner
    assert recorder.launches[-1][1][3:] == (True, 128)


@pytest.mark.usefixtures("no_fast_launch")
def test_heuristics_over_autotune_arrive_as_keywords_and_are_matched(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = tuned(make_pool, tmp_path, even_kernel)
    kernel = triton.heuristics({"EVEN": lambda args: args["n"] % 1024 == 0})(inner)
    recorder = Recorder(monkeypatch)
    x, out = torch.randn(2048), torch.empty(2048)
    kernel[GRID](x, out, 2048)
    assert recorder.launches[-1][1][3] is True
    recorder.reset()
    kernel[GRID](x, out, 2048)
    kernel[GRID](x, out, 2048)
    assert recorder.full_paths == 0
    assert recorder.requests == 0
    assert len(recorder.launches) == 2


def test_a_descriptor_pre_hook_changes_the_compiled_signature(make_pool: Any, tmp_path: Path) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def desc_copy(in_desc, out_desc, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        x = in_desc.load([pid * BLOCK]) + tl.arange(0, BLOCK).to(tl.float32) * 0
        out_desc.store([pid * BLOCK], x)

    def set_block(nargs: dict[str, Any]) -> None:
        for name in ("in_desc", "out_desc"):
            nargs[name].block_shape = [nargs["BLOCK"]]

    configs = [kiln.Config({"BLOCK": b}, num_warps=4, pre_hook=set_block) for b in (64, 128)]
    kernel = kiln.autotune(
        configs,
        key=["n"],
        pool=make_pool(workers=2),
        database=TuningDatabase(tmp_path / "tuning.sqlite3"),
        target=SM90,
    )(desc_copy)
    x, out = torch.randn(1024), torch.empty(1024)
    in_desc = TensorDescriptor.from_tensor(x, [1])  # placeholder block shape, as Liger passes them
    out_desc = TensorDescriptor.from_tensor(out, [1])
    for config in configs:
        candidate = kernel._candidate(config, (in_desc, out_desc, 1024), {})
        block = config.kwargs["BLOCK"]
        assert candidate.request.signature["in_desc"] == f"tensordesc<fp32[{block}]>"
        artifact = kernel._get_pool().compile(candidate.request)  # compiles for the real block shape
        assert artifact.binary[:4] == b"\x7fELF"
    assert in_desc.block_shape == [1]  # the caller's descriptors change only when a config runs


def test_install_routes_autotune_and_later_subclasses_and_uninstall_restores() -> None:
    from triton.runtime import autotuner as triton_autotuner

    original_autotune, original_class = triton.autotune, triton_autotuner.Autotuner
    kiln.install()
    try:
        assert triton.autotune is kiln.autotune
        assert triton_autotuner.Autotuner is kiln.Autotuner

        class LibraryTuner(triton_autotuner.Autotuner):  # a library's own class, defined later
            def run(self, *args: Any, **kwargs: Any) -> Any:
                return super().run(*args, **kwargs)

        class Overriding(triton_autotuner.Autotuner):
            def _bench(self, *args: Any, **kwargs: Any) -> Any:
                return [0.0]

        assert issubclass(LibraryTuner, kiln.Autotuner)
        assert not issubclass(Overriding, kiln.Autotuner)  # left on Triton's path, with the reason
        assert issubclass(Overriding, original_class)
        kernel = triton.autotune([triton.Config({"BLOCK": 64})], key=["n"])(axpy_kernel)
        assert isinstance(kernel, kiln.Autotuner)
    finally:
        kiln.uninstall()
    assert triton.autotune is original_autotune
    assert triton_autotuner.Autotuner is original_class


def test_a_subclass_may_assign_its_own_cache_store(make_pool: Any, tmp_path: Path) -> None:
    class Store:
        def __init__(self) -> None:
            self.data: dict[Any, Any] = {}

        def __contains__(self, key: Any) -> bool:
            return key in self.data

        def __getitem__(self, key: Any) -> Any:
            return self.data[key]

        def __setitem__(self, key: Any, value: Any) -> None:
            self.data[key] = value

    kernel = tuned(make_pool, tmp_path, axpy_kernel)
    store = Store()
    kernel.cache = store
    x, out = torch.randn(512), torch.empty(512)
    kernel.run(x, out, None, 512, grid=GRID, warmup=True)
    assert next(iter(store.data.values())).kwargs == {"BLOCK": 128}


@triton.jit
def two_flags_kernel(x_ptr, out_ptr, n, FLAG_A: tl.constexpr, FLAG_B: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.load(x_ptr + offsets, mask=mask)
    if FLAG_A:
        y = y * 2
    if FLAG_B:
        y = y + 1
    tl.store(out_ptr + offsets, y, mask=mask)


@pytest.mark.usefixtures("no_fast_launch")
def test_keyword_only_calls_with_heuristics_in_another_order_are_matched(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FLA's pattern: keyword-only calls, heuristics over the autotuner adding constexprs in an
    order other than the signature's (only tensors' order matters to Triton's key)."""
    inner = tuned(make_pool, tmp_path, two_flags_kernel)
    kernel = triton.heuristics({"FLAG_B": lambda a: True, "FLAG_A": lambda a: a["n"] > 100})(inner)
    recorder = Recorder(monkeypatch)
    x, out = torch.randn(512), torch.empty(512)
    kernel[GRID](x_ptr=x, out_ptr=out, n=512)
    recorder.reset()
    for _ in range(3):
        kernel[GRID](x_ptr=x, out_ptr=out, n=512)
    assert recorder.full_paths == 0
    assert recorder.requests == 0
    assert [a[3:] for _, a in recorder.launches] == [(True, True, 128)] * 3


@pytest.mark.usefixtures("no_fast_launch")
def test_the_full_path_never_formats_argument_values(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call the dispatcher leaves to the full path reuses its compile request by Triton's key,
    never by the arguments' text (a tensor's repr is its contents: slow, and new every call)."""
    kernel = tuned(make_pool, tmp_path, axpy_kernel)
    recorder = Recorder(monkeypatch)
    x, out = torch.randn(512), torch.empty(512)
    kernel[GRID](out_ptr=out, x_ptr=x, bias_ptr=None, n=512)  # tensors out of order: full path
    recorder.reset()
    monkeypatch.setattr(torch.Tensor, "__repr__", lambda self: pytest.fail("a tensor was formatted"))
    kernel[GRID](out_ptr=out, x_ptr=x, bias_ptr=None, n=512)
    assert recorder.full_paths == 1  # Triton's key lists dtypes in call order: kiln decides in Python
    assert recorder.requests == 0  # ...but builds no request


@pytest.mark.usefixtures("no_fast_launch")
def test_descriptor_calls_with_a_block_shape_hook_reach_a_hooked_launch(
    make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Liger's pattern: fresh descriptors with a placeholder block shape every call, a config
    pre_hook that sets it. After the first call the C dispatcher matches the call (descriptors
    keyed by dtype and block shape, as Triton specializes them) and the hook runs on every call,
    before the launch, on the caller's descriptors."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def desc_scale(in_desc, out_desc, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        out_desc.store([pid * BLOCK], in_desc.load([pid * BLOCK]) * 2)

    hooked: list[int] = []

    def set_block(nargs: dict[str, Any]) -> None:
        hooked.append(nargs["BLOCK"])
        for name in ("in_desc", "out_desc"):
            nargs[name].block_shape = [nargs["BLOCK"]]

    kernel = kiln.autotune(
        [kiln.Config({"BLOCK": b}, num_warps=4, pre_hook=set_block) for b in (64, 128)],
        key=["n"],
        pool=make_pool(workers=2),
        database=TuningDatabase(tmp_path / "tuning.sqlite3"),
        target=SM90,
    )(desc_scale)
    kernel._bencher_factory = FakeBench
    recorder = Recorder(monkeypatch)
    x, out = torch.randn(1024), torch.empty(1024)

    def call() -> tuple[Any, Any]:
        descs = TensorDescriptor.from_tensor(x, [1]), TensorDescriptor.from_tensor(out, [1])
        kernel[GRID](*descs, 1024)
        return descs

    call()
    recorder.reset()
    hooked.clear()
    for _ in range(3):
        descs = call()
        assert descs[0].block_shape == [128]  # the hook ran on the caller's descriptors
    assert recorder.full_paths == 0
    assert recorder.requests == 0
    assert hooked == [128, 128, 128]
    assert len(recorder.launches) == 3

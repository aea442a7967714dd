"""Conformance suite: ``kiln.autotune`` must behave exactly like ``triton.autotune`` (Triton 3.6.0).

These are Triton's own autotuner unit tests (``python/test/unit/runtime/test_autotuner.py``), rewritten
and extended from a reading of ``triton/runtime/autotuner.py`` in 3.6.0. Every shared test takes the
``autotune`` fixture, which runs it once with ``triton.autotune`` (the reference: a failure there means
the test is wrong, not kiln) and once with ``kiln.autotune`` (a failure there means kiln differs).

Where kiln deliberately differs (a kiln feature), the test is kiln-only and says so in its name
(``test_kiln_only_...``); shared tests never bend to fit such features. In particular the kernels'
outputs never depend on the config, so that kiln's output check has nothing to object to.

The kernels live at module level so that kiln can rebuild them in its compile workers. To tell which
config a stand-in ``do_bench`` is timing, the tests launch through a grid callable that records the
``BLOCK`` it is evaluated with (Triton evaluates the grid with the config's meta-parameters whenever it
launches a config), so nothing depends on the order in which configs are benchmarked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import triton
import triton.language as tl

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

N = 1000  # not a multiple of any BLOCK used below, so masking matters
F32 = "torch.float32"
# What Triton 3.6 puts into every dict it hands to hooks and perf models, besides the kernel's
# arguments: the launch keywords of ``kernel[grid](...)`` and ``Config.all_kwargs()`` (``maxnreg`` and
# ``ir_override`` only when not None).
LAUNCH_KWARGS = {"grid", "warmup"}
CONFIG_OPTIONS = {"num_warps", "num_ctas", "num_stages"}
DOUBLE_NARGS = {"dst", "src", "n", "BLOCK"} | LAUNCH_KWARGS | CONFIG_OPTIONS


@pytest.fixture(params=["triton", "kiln"])
def autotune(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """The decorator under test: Triton's (the reference) or kiln's, which must behave the same."""
    if request.param == "triton":
        return triton.autotune
    import triton_kiln as kiln

    # Looked up when the test runs, not when it is collected, so the suite collects before kiln has it.
    return getattr(kiln, "autotune")  # noqa: B009


@pytest.fixture(autouse=True)
def _fresh_tuning_state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no persisted tuning results. Triton's ``cache_results`` files already go to a
    fresh ``TRITON_CACHE_DIR`` (conftest); kiln's tuning database goes to a fresh file here, so that one
    test's results never serve another's (within a test, persistence stays observable)."""
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "kiln-tuning.sqlite3"))
    # The shared tests pin Triton's semantics, where results live in the autotuner object unless
    # cache_results asks for more. kiln remembers every tuning by default (its tuning database);
    # with KILN_USE_TUNING_DB=0 it follows Triton exactly. The database-on default is tested below.
    monkeypatch.setenv("KILN_USE_TUNING_DB", "0")


@pytest.fixture
def kiln_autotune() -> Callable[..., Any]:
    """kiln's decorator alone, for the tests of kiln-only behaviour."""
    import triton_kiln as kiln

    return getattr(kiln, "autotune")  # noqa: B009


# --------------------------------------------------------------------------------------------- kernels


@triton.jit
def _double_kernel(dst, src, n, BLOCK: tl.constexpr):
    """dst = 2 * src."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def _increment_kernel(x, n, BLOCK: tl.constexpr):
    """x += 1 in place (so every extra run is visible)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x + offsets, tl.load(x + offsets, mask=mask) + 1, mask=mask)


@triton.jit
def _accumulate_kernel(acc, src, n, BLOCK: tl.constexpr):
    """acc += src in place."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    total = tl.load(acc + offsets, mask=mask) + tl.load(src + offsets, mask=mask)
    tl.store(acc + offsets, total, mask=mask)


# --------------------------------------------------------------------------------------------- helpers


def grid_for(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


class Launches:
    """Makes launch grids that record the ``BLOCK`` of every config they are evaluated for."""

    def __init__(self) -> None:
        self.blocks: list[int] = []

    def grid(self, n: int) -> Callable[[dict[str, Any]], tuple[int]]:
        def grid(meta: dict[str, Any]) -> tuple[int]:
            self.blocks.append(meta["BLOCK"])
            return (triton.cdiv(n, meta["BLOCK"]),)

        return grid

    @property
    def last(self) -> int:
        return self.blocks[-1]


def block_configs(*blocks: int, **options: Any) -> list[triton.Config]:
    return [triton.Config({"BLOCK": block}, **options) for block in blocks]


def int_valued(n: int = N) -> Any:
    """Small integers as floats: sums of them are exact, so outputs can be compared exactly."""
    return torch.randint(-8, 8, (n,), device="cuda").to(torch.float32)


def double_args(n: int = N, dtype: Any = torch.float32, dst_dtype: Any = None) -> tuple[Any, Any]:
    """(dst poisoned with NaN, src) for ``_double_kernel``."""
    src = torch.randn(n, device="cuda").to(dtype)
    return torch.full((n,), float("nan"), device="cuda", dtype=dst_dtype or dtype), src


def assert_equal(actual: Any, expected: Any) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def timing(ms: float) -> list[float]:
    """What the stand-in benchmark returns: [median, 20th, 80th percentile], like Triton's do_bench."""
    return [ms, ms / 2, ms * 2]


class ScriptedBench:
    """A ``do_bench`` stand-in: runs the kernel call ``runs`` times for real, learns from ``launches``
    which BLOCK it ran, and returns scripted timings (by default: smaller BLOCK is faster).

    ``after_run(block)`` is called after each run, once the GPU is idle, to inspect tensors between runs.
    """

    def __init__(
        self,
        launches: Launches,
        timings: dict[int, float] | None = None,
        runs: int = 1,
        after_run: Callable[[int], None] | None = None,
    ) -> None:
        self.launches = launches
        self.timings = dict(timings or {})
        self.runs = runs
        self.after_run = after_run
        self.benchmarked: list[int] = []

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any) -> list[float]:
        block = -1
        for _ in range(self.runs):
            kernel_call()
            torch.cuda.synchronize()
            block = self.launches.last
            if self.after_run is not None:
                self.after_run(block)
        self.benchmarked.append(block)
        return timing(self.timings.get(block, float(block)))


def never_bench(kernel_call: Callable[[], Any], quantiles: Any) -> Any:
    raise AssertionError("do_bench must not be called here")


# ------------------------------------------------------------------------------------- basic tuning


def test_tunes_every_config_once_and_launches_the_fastest(autotune: Callable[..., Any]) -> None:
    """Triton benchmarks each config once through ``do_bench`` (the lowest returned timing wins), then
    launches the winner for real; a second call with the same key reuses it without benchmarking."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(32, 64, 128)
    bench = ScriptedBench(launches, {32: 3.0, 64: 1.0, 128: 2.0})
    kernel = autotune(configs=configs, key=["n"], do_bench=bench)(_double_kernel)

    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert sorted(bench.benchmarked) == [32, 64, 128]
    assert kernel.best_config.kwargs == {"BLOCK": 64}
    assert launches.last == 64, "the real launch must use the best config"
    assert_equal(dst, src * 2)

    dst.fill_(float("nan"))
    launched = len(launches.blocks)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 3, "same key: no second tuning"
    assert launches.blocks[launched:] == [64]
    assert_equal(dst, src * 2)


def test_key_change_retunes(autotune: Callable[..., Any]) -> None:
    """A change in the value of an argument named in ``key`` tunes again (one ``cache`` entry per key
    value); new tensors of the same dtype, or the key argument passed as a keyword, do not."""
    dst, src = double_args()
    launches = Launches()
    bench = ScriptedBench(launches)
    kernel = autotune(configs=block_configs(32, 64), key=["n"], do_bench=bench)(_double_kernel)

    kernel[launches.grid(N)](dst, src, N)
    assert len(bench.benchmarked) == 2
    assert len(kernel.cache) == 1

    dst2, src2 = double_args()
    kernel[launches.grid(N)](dst2, src2, n=N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 2, "same n, new tensors of the same dtypes: no retuning"
    assert_equal(dst2, src2 * 2)

    half = N // 2
    dst.fill_(float("nan"))
    kernel[launches.grid(half)](dst, src, half)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 4, "n changed: tuned again"
    assert len(kernel.cache) == 2
    assert_equal(dst[:half], src[:half] * 2)
    assert torch.isnan(dst[half:]).all()


def test_cache_key_is_key_values_then_tensor_dtypes(autotune: Callable[..., Any]) -> None:
    """``cache`` maps a tuple to the chosen Config: the values of the ``key`` arguments, then
    ``str(arg.dtype)`` of every argument that has a ``dtype``; a dtype change alone retunes."""
    dst, src = double_args()
    launches = Launches()
    bench = ScriptedBench(launches, {32: 2.0, 64: 1.0})
    configs = block_configs(32, 64)
    kernel = autotune(configs=configs, key=["n"], do_bench=bench)(_double_kernel)

    kernel[launches.grid(N)](dst, src, N)
    assert kernel.cache == {(N, F32, F32): configs[1]}
    assert len(bench.benchmarked) == 2

    dst16, src16 = double_args(dtype=torch.float16)
    kernel[launches.grid(N)](dst16, src16, N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 4, "same n but other dtypes: tuned again"
    assert set(kernel.cache) == {(N, F32, F32), (N, "torch.float16", "torch.float16")}
    assert_equal(dst16, src16 * 2)


def test_dtype_part_of_key_follows_argument_order_of_the_call(autotune: Callable[..., Any]) -> None:
    """The dtypes in the key follow the order in which the call passed the arguments (positional ones,
    then keywords as written), so the same tensors passed as keywords in another order retune."""
    dst, src = double_args(dst_dtype=torch.float16)
    launches = Launches()
    bench = ScriptedBench(launches)
    kernel = autotune(configs=block_configs(32, 64), key=["n"], do_bench=bench)(_double_kernel)

    kernel[launches.grid(N)](dst, src, N)
    kernel[launches.grid(N)](dst=dst, src=src, n=N)
    assert len(bench.benchmarked) == 2, "keywords in signature order build the same key"
    kernel[launches.grid(N)](src=src, dst=dst, n=N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 4
    assert set(kernel.cache) == {(N, "torch.float16", F32), (N, F32, "torch.float16")}
    assert_equal(dst, (src * 2).half())


def test_prefilled_cache_entry_is_used_without_tuning(autotune: Callable[..., Any]) -> None:
    """A Config stored in ``cache`` under the key Triton builds for a call is used as is: no pruning, no
    benchmarking, and it becomes ``best_config``."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(32, 64)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no pruning for a cached key")

    kernel = autotune(
        configs=configs, key=["n"], prune_configs_by={"early_config_prune": forbidden}, do_bench=never_bench
    )(_double_kernel)
    kernel.cache[(N, F32, F32)] = configs[1]
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert launches.blocks == [64]
    assert kernel.best_config is configs[1]
    assert_equal(dst, src * 2)


# ------------------------------------------------------------------------ restore_value, reset_to_zero

AS_KEYWORDS = pytest.mark.parametrize("as_keywords", [False, True], ids=["positional", "keywords"])
WITH_BENCH = pytest.mark.parametrize("scripted", [True, False], ids=["scripted-bench", "default-bench"])


@AS_KEYWORDS
@WITH_BENCH
def test_restore_value_undoes_every_benchmark_run(
    autotune: Callable[..., Any], as_keywords: bool, scripted: bool
) -> None:
    """``restore_value`` tensors are copied before and restored after every benchmark run, so a kernel
    that mutates its input ends up applied exactly once (by the real launch), whether the runs come from
    a custom ``do_bench`` (checked between runs) or from Triton's own benchmarker (hundreds of runs)."""
    x0 = int_valued()
    x = x0.clone()
    launches = Launches()

    def after_run(block: int) -> None:
        assert_equal(x, x0)

    bench = ScriptedBench(launches, runs=3, after_run=after_run)
    kernel = autotune(
        configs=block_configs(32, 64, 128),
        key=["n"],
        restore_value=["x"],
        **({"do_bench": bench} if scripted else {}),
    )(_increment_kernel)
    if as_keywords:
        kernel[launches.grid(N)](x=x, n=N)
    else:
        kernel[launches.grid(N)](x, N)
    torch.cuda.synchronize()
    assert len(kernel.configs_timings) == 3
    if scripted:
        assert len(bench.benchmarked) == 3
    assert_equal(x, x0 + 1)


@AS_KEYWORDS
@WITH_BENCH
def test_reset_to_zero_only_while_tuning(
    autotune: Callable[..., Any], as_keywords: bool, scripted: bool
) -> None:
    """``reset_to_zero`` tensors are zeroed before every benchmark run and once more after tuning (before
    the real launch); launches that need no tuning (same key again) do not zero them."""
    src = int_valued()
    acc = torch.full_like(src, 5.0)
    launches = Launches()

    def after_run(block: int) -> None:
        assert_equal(acc, src)

    bench = ScriptedBench(launches, runs=2, after_run=after_run)
    kernel = autotune(
        configs=block_configs(32, 64),
        key=["n"],
        reset_to_zero=["acc"],
        **({"do_bench": bench} if scripted else {}),
    )(_accumulate_kernel)

    def launch() -> None:
        if as_keywords:
            kernel[launches.grid(N)](acc=acc, src=src, n=N)
        else:
            kernel[launches.grid(N)](acc, src, N)
        torch.cuda.synchronize()

    launch()
    assert len(kernel.configs_timings) == 2
    if scripted:
        assert len(bench.benchmarked) == 2
    assert_equal(acc, src)
    launch()
    if scripted:
        assert len(bench.benchmarked) == 2
    assert_equal(acc, src * 2)


# --------------------------------------------------------------------------------------- user hooks


def test_user_hooks_get_the_args_dict(autotune: Callable[..., Any]) -> None:
    """A user ``pre_hook`` runs before and ``post_hook`` after each benchmark run (and only then: exactly
    once per ``kernel_call()``), with one dict of the call's arguments, its keywords (``grid`` and
    ``warmup`` too) and the config's ``all_kwargs()``; ``post_hook`` gets ``exception=None`` as a
    keyword. After tuning, ``pre_hook`` runs once more with ``reset_only=True`` and the best config;
    launches themselves call neither hook."""
    dst, src = double_args()
    launches = Launches()
    events: list[tuple[str, int, Any]] = []
    dicts: list[dict[str, Any]] = []

    def pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
        dicts.append(dict(nargs))
        events.append(("pre", nargs["BLOCK"], reset_only))

    def post_hook(nargs: dict[str, Any], *, exception: BaseException | None) -> None:
        dicts.append(dict(nargs))
        events.append(("post", nargs["BLOCK"], exception))

    bench = ScriptedBench(launches, {32: 2.0, 64: 1.0})
    configs = block_configs(32, 64, num_warps=2)
    kernel = autotune(configs=configs, key=["n"], do_bench=bench, pre_hook=pre_hook, post_hook=post_hook)(
        _double_kernel
    )
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert_equal(dst, src * 2)

    first, second = bench.benchmarked
    assert events == [
        ("pre", first, False),
        ("post", first, None),
        ("pre", second, False),
        ("post", second, None),
        ("pre", 64, True),
    ]
    for nargs in dicts:
        assert set(nargs) == DOUBLE_NARGS
        assert nargs["dst"] is dst
        assert nargs["src"] is src
        assert nargs["n"] == N
        assert nargs["num_warps"] == 2
        assert nargs["warmup"] is False

    kernel[launches.grid(N)](dst, src, N)
    assert len(events) == 5, "no hooks on a launch that needs no tuning"


def test_user_pre_hook_replaces_reset_to_zero(autotune: Callable[..., Any]) -> None:
    """A user ``pre_hook`` replaces the built-in one, so ``reset_to_zero`` is then not applied at all:
    neither before benchmark runs nor at the ``reset_only`` call before the launch."""
    src = int_valued()
    acc = torch.full_like(src, 0.5)  # acc - src is never 0 after any number of additions of src
    launches = Launches()
    reset_only_calls: list[bool] = []

    def pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
        reset_only_calls.append(reset_only)

    def after_run(block: int) -> None:
        assert (acc != src).all(), "acc was zeroed before a benchmark run"

    bench = ScriptedBench(launches, after_run=after_run)
    kernel = autotune(
        configs=block_configs(32, 64), key=["n"], reset_to_zero=["acc"], pre_hook=pre_hook, do_bench=bench
    )(_accumulate_kernel)
    kernel[launches.grid(N)](acc, src, N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 2
    assert reset_only_calls[-1] is True
    assert (acc != src).all(), "acc was zeroed before the launch"


def test_user_post_hook_replaces_restore_value(autotune: Callable[..., Any]) -> None:
    """A user ``post_hook`` replaces the built-in one that restores ``restore_value`` tensors, so a
    benchmark run's mutation is not undone after it."""
    x0 = int_valued()
    x = x0.clone()
    launches = Launches()
    exceptions: list[Any] = []

    def post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
        exceptions.append(exception)

    def after_run(block: int) -> None:
        assert (x != x0).all(), "x was restored after a benchmark run"

    bench = ScriptedBench(launches, after_run=after_run)
    kernel = autotune(
        configs=block_configs(32, 64), key=["n"], restore_value=["x"], post_hook=post_hook, do_bench=bench
    )(_increment_kernel)
    kernel[launches.grid(N)](x, N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 2
    assert exceptions
    assert set(exceptions) == {None}


# --------------------------------------------------------------------------- configs that cannot run

# 64 warps = 2048 threads per block: compiles, but loading it fails with OutOfResources("threads").
TOO_MANY_WARPS = 64


def test_out_of_resources_config_gets_infinite_timing(autotune: Callable[..., Any]) -> None:
    """A config that fails with ``OutOfResources`` when launched does not raise: it is recorded in
    ``configs_timings`` as ``[inf, inf, inf]`` and the autotuner picks another config."""
    dst, src = double_args()
    launches = Launches()
    bad, good = triton.Config({"BLOCK": 64}, num_warps=TOO_MANY_WARPS), triton.Config({"BLOCK": 64})
    bench = ScriptedBench(launches)
    kernel = autotune(configs=[bad, good], key=["n"], do_bench=bench)(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert kernel.best_config is good
    assert bench.benchmarked == [64], "do_bench returned only for the config that ran"
    assert kernel.configs_timings[bad] == [math.inf] * 3
    assert kernel.configs_timings[good] == timing(64.0)
    assert_equal(dst, src * 2)


def test_post_hook_receives_the_launch_exception(autotune: Callable[..., Any]) -> None:
    """When a benchmark run raises (here ``OutOfResources``), ``post_hook`` still runs, with that
    exception as ``exception`` (Triton's ``test_hooks``: pre and post hooks are called in pairs)."""
    dst, src = double_args()
    configs = [triton.Config({"BLOCK": 64}, num_warps=TOO_MANY_WARPS), triton.Config({"BLOCK": 64})]
    balance = {"open": 0}
    exceptions: list[tuple[int, Any]] = []

    def pre_hook(nargs: dict[str, Any], reset_only: bool = False) -> None:
        if not reset_only:
            balance["open"] += 1

    def post_hook(nargs: dict[str, Any], exception: BaseException | None) -> None:
        balance["open"] -= 1
        assert balance["open"] == 0
        exceptions.append((nargs["num_warps"], exception))

    launches = Launches()
    kernel = autotune(
        configs=configs, key=["n"], do_bench=ScriptedBench(launches), pre_hook=pre_hook, post_hook=post_hook
    )(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    by_warps = dict(exceptions)
    assert len(exceptions) == 2
    assert set(by_warps) == {4, TOO_MANY_WARPS}
    assert by_warps[4] is None
    error = by_warps[TOO_MANY_WARPS]
    assert isinstance(error, triton.runtime.errors.OutOfResources)
    assert "out of resource: threads" in str(error)
    assert_equal(dst, src * 2)


class BenchFailure(Exception):
    """Raised by a test's own ``do_bench``."""


def test_exception_from_custom_do_bench_propagates(autotune: Callable[..., Any]) -> None:
    """Only ``OutOfResources``, ``CompileTimeAssertionFailure`` and ``PTXASError`` turn a config into an
    infinite timing; any other exception raised while benchmarking (here by the user's ``do_bench``, for
    one config) propagates out of the launch unchanged, and nothing is cached."""
    dst, src = double_args()
    launches = Launches()

    def do_bench(kernel_call: Callable[[], Any], quantiles: Any) -> list[float]:
        kernel_call()
        if launches.last == 64:
            raise BenchFailure("raised by do_bench")
        return timing(1.0)

    kernel = autotune(configs=block_configs(32, 64), key=["n"], do_bench=do_bench)(_double_kernel)
    with pytest.raises(BenchFailure, match="raised by do_bench"):
        kernel[launches.grid(N)](dst, src, N)
    assert kernel.cache == {}


# ------------------------------------------------------------------------------------------- pruning


def test_early_config_prune_limits_what_is_benchmarked(autotune: Callable[..., Any]) -> None:
    """``early_config_prune(configs, named_args, **kwargs)`` gets every config, the positional arguments
    by name and the call's keywords (``grid`` and ``warmup`` too); only what it returns is benchmarked
    and lands in ``configs_timings``. It runs once per tuning, not on cached launches."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(16, 32, 64, 128)
    seen: list[tuple[list[Any], dict[str, Any], dict[str, Any]]] = []

    def early_config_prune(cfgs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        seen.append((list(cfgs), dict(named_args), dict(kwargs)))
        return [cfgs[1], cfgs[3]]

    bench = ScriptedBench(launches, {32: 2.0, 128: 1.0})
    kernel = autotune(
        configs=configs,
        key=["n"],
        prune_configs_by={"early_config_prune": early_config_prune},
        do_bench=bench,
    )(_double_kernel)
    kernel[launches.grid(N)](dst, src, n=N)
    torch.cuda.synchronize()

    (cfgs, named_args, kwargs) = seen[0]
    assert [id(c) for c in cfgs] == [id(c) for c in configs]
    assert set(named_args) == {"dst", "src"}
    assert named_args["dst"] is dst
    assert set(kwargs) == {"n"} | LAUNCH_KWARGS
    assert kwargs["n"] == N
    assert sorted(bench.benchmarked) == [32, 128]
    assert set(kernel.configs_timings) == {configs[1], configs[3]}
    assert kernel.best_config is configs[3]
    assert_equal(dst, src * 2)

    kernel[launches.grid(N)](dst, src, n=N)
    assert len(seen) == 1


def test_early_config_prune_returning_nothing_raises(autotune: Callable[..., Any]) -> None:
    """An ``early_config_prune`` that returns no config makes the launch raise ``AutotunerError``."""
    dst, src = double_args()
    kernel = autotune(
        configs=block_configs(32, 64),
        key=["n"],
        prune_configs_by={"early_config_prune": lambda configs, named_args, **kwargs: []},
        do_bench=never_bench,
    )(_double_kernel)
    with pytest.raises(
        triton.runtime.errors.AutotunerError, match="No valid autotuner configs after pruning"
    ):
        kernel[grid_for(N)](dst, src, N)


PREDICTED = {16: 4.0, 32: 1.0, 64: 3.0, 128: 2.0}


@pytest.mark.parametrize(("top_k", "benchmarked"), [(2, [32, 128]), (4, [16, 32, 64, 128])])
def test_perf_model_with_integer_top_k(
    autotune: Callable[..., Any], top_k: int, benchmarked: list[int]
) -> None:
    """With ``perf_model`` and an int ``top_k``, only the ``top_k`` configs of lowest predicted time are
    benchmarked. ``perf_model(**named_args, **kwargs, **config.all_kwargs())`` is called once per config,
    and not at all when there are no more than ``top_k`` configs."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(16, 32, 64, 128)
    model_calls: list[dict[str, Any]] = []

    def perf_model(**kwargs: Any) -> float:
        model_calls.append(kwargs)
        return PREDICTED[kwargs["BLOCK"]]

    bench = ScriptedBench(launches)
    kernel = autotune(
        configs=configs,
        key=["n"],
        prune_configs_by={"perf_model": perf_model, "top_k": top_k},
        do_bench=bench,
    )(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert sorted(bench.benchmarked) == benchmarked
    assert len(kernel.configs_timings) == len(benchmarked)
    assert_equal(dst, src * 2)
    if top_k >= len(configs):
        assert model_calls == []
    else:
        assert sorted(call["BLOCK"] for call in model_calls) == [16, 32, 64, 128]
        for call in model_calls:
            assert set(call) == DOUBLE_NARGS
            assert call["dst"] is dst
            assert call["n"] == N


@pytest.mark.parametrize(
    ("top_k", "benchmarked"), [(0.5, [32, 128]), (0.75, [32, 64, 128]), (1.0, [16, 32, 64, 128])]
)
def test_perf_model_with_fractional_top_k(
    autotune: Callable[..., Any], top_k: float, benchmarked: list[int]
) -> None:
    """A float ``top_k`` <= 1.0 keeps ``int(len(configs) * top_k)`` configs (1.0 keeps them all)."""
    dst, src = double_args()
    launches = Launches()
    bench = ScriptedBench(launches)
    kernel = autotune(
        configs=block_configs(16, 32, 64, 128),
        key=["n"],
        prune_configs_by={"perf_model": lambda **kw: PREDICTED[kw["BLOCK"]], "top_k": top_k},
        do_bench=bench,
    )(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert sorted(bench.benchmarked) == benchmarked
    assert_equal(dst, src * 2)


def test_fractional_top_k_is_a_fraction_of_all_configs(autotune: Callable[..., Any]) -> None:
    """In Triton 3.6 a float ``top_k`` is taken of *all* configs, not of those left by
    ``early_config_prune`` (which runs first; ``perf_model`` then sees only its survivors):
    4 configs, 3 left after early pruning, top_k=0.5 -> int(4 * 0.5) = 2 benchmarked (not 1)."""
    dst, src = double_args()
    launches = Launches()
    estimated: list[int] = []

    def perf_model(**kwargs: Any) -> float:
        estimated.append(kwargs["BLOCK"])
        return PREDICTED[kwargs["BLOCK"]]

    bench = ScriptedBench(launches)
    kernel = autotune(
        configs=block_configs(16, 32, 64, 128),
        key=["n"],
        prune_configs_by={
            "early_config_prune": lambda cfgs, named_args, **kwargs: cfgs[1:],
            "perf_model": perf_model,
            "top_k": 0.5,
        },
        do_bench=bench,
    )(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    assert sorted(estimated) == [32, 64, 128]
    assert sorted(bench.benchmarked) == [32, 128]


def test_float_top_k_above_one_raises_type_error(autotune: Callable[..., Any]) -> None:
    """A float ``top_k`` above 1.0 is rejected with ``TypeError`` when pruning runs."""
    dst, src = double_args()
    kernel = autotune(
        configs=block_configs(32, 64),
        key=["n"],
        prune_configs_by={"perf_model": lambda **kw: 1.0, "top_k": 2.0},
        do_bench=never_bench,
    )(_double_kernel)
    with pytest.raises(TypeError, match="top_k must be either"):
        kernel[grid_for(N)](dst, src, N)


# ---------------------------------------------------------------------------- results and attributes


def test_best_config_follows_the_current_key(autotune: Callable[..., Any]) -> None:
    """``best_config`` is the very Config object (one of ``configs``) used by the latest launch: it
    changes with the key, also on launches served from ``cache``."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(32, 64)
    bench = ScriptedBench(launches, {32: 1.0, 64: 2.0})
    kernel = autotune(configs=configs, key=["n"], do_bench=bench)(_double_kernel)

    kernel[launches.grid(N)](dst, src, N)
    assert kernel.best_config is configs[0]
    bench.timings = {32: 2.0, 64: 1.0}
    kernel[launches.grid(N // 2)](dst, src, N // 2)
    assert kernel.best_config is configs[1]
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert len(bench.benchmarked) == 4
    assert kernel.best_config is configs[0]
    assert launches.last == 32


def test_configs_timings_holds_the_latest_tuning(autotune: Callable[..., Any]) -> None:
    """``configs_timings`` maps each benchmarked Config to exactly what ``do_bench`` returned for it; a
    later tuning (new key) replaces the dict rather than adding to it."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(32, 64, 128)

    def early_config_prune(cfgs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        return cfgs if named_args["n"] == N else cfgs[:2]

    bench = ScriptedBench(launches)
    kernel = autotune(
        configs=configs,
        key=["n"],
        prune_configs_by={"early_config_prune": early_config_prune},
        do_bench=bench,
    )(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    assert kernel.configs_timings == {configs[0]: timing(32), configs[1]: timing(64), configs[2]: timing(128)}
    kernel[launches.grid(N // 2)](dst, src, N // 2)
    assert kernel.configs_timings == {configs[0]: timing(32), configs[1]: timing(64)}


def test_default_benchmarker_times_three_quantiles(autotune: Callable[..., Any]) -> None:
    """Without ``do_bench``, Triton's ``do_bench`` times each config with quantiles (0.5, 0.2, 0.8):
    ``configs_timings`` values are lists [median, 20th, 80th percentile] in milliseconds."""
    dst, src = double_args()
    configs = block_configs(64, 128)
    kernel = autotune(configs=configs, key=["n"])(_double_kernel)
    kernel[grid_for(N)](dst, src, N)
    torch.cuda.synchronize()
    assert_equal(dst, src * 2)
    assert set(kernel.configs_timings) == set(configs)
    for value in kernel.configs_timings.values():
        assert isinstance(value, list)
        assert len(value) == 3
        median, low, high = value
        assert 0 < low <= median <= high < math.inf


def test_custom_do_bench_gets_a_callable_and_quantiles(autotune: Callable[..., Any]) -> None:
    """A custom ``do_bench`` is called once per config as ``do_bench(kernel_call, quantiles=(0.5, 0.2,
    0.8))``; ``kernel_call()`` takes no arguments and launches the config; whatever ``do_bench``
    returns (here a bare float) is what is compared and stored in ``configs_timings``."""
    dst, src = double_args()
    launches = Launches()
    calls: list[tuple[Any, Any]] = []

    def do_bench(kernel_call: Callable[[], Any], *, quantiles: Any) -> float:
        calls.append((kernel_call, quantiles))
        assert callable(kernel_call)
        kernel_call()
        torch.cuda.synchronize()
        return {32: 0.5, 64: 0.25}[launches.last]

    configs = block_configs(32, 64)
    kernel = autotune(configs=configs, key=["n"], do_bench=do_bench)(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert len(calls) == 2
    assert [tuple(quantiles) for _, quantiles in calls] == [(0.5, 0.2, 0.8)] * 2
    assert kernel.configs_timings == {configs[0]: 0.5, configs[1]: 0.25}
    assert kernel.best_config is configs[1]
    assert_equal(dst, src * 2)


def test_single_config_skips_tuning_entirely(autotune: Callable[..., Any]) -> None:
    """With one config there is no tuning: no ``do_bench``, no pruning, no hooks, no ``reset_to_zero``
    (the kernel accumulates onto whatever is there), and ``cache`` stays empty; ``best_config`` is set."""
    src = int_valued()
    acc = torch.full_like(src, 5.0)
    launches = Launches()
    configs = block_configs(64)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("must not be called with a single config")

    kernel = autotune(
        configs=configs,
        key=["n"],
        reset_to_zero=["acc"],
        prune_configs_by={"early_config_prune": forbidden},
        do_bench=never_bench,
    )(_accumulate_kernel)
    kernel[launches.grid(N)](acc, src, N)
    torch.cuda.synchronize()
    assert kernel.best_config is configs[0]
    assert kernel.cache == {}
    assert launches.blocks == [64]
    assert_equal(acc, 5.0 + src)


def test_config_pre_hook_runs_before_each_benchmark_run_and_each_launch(autotune: Callable[..., Any]) -> None:
    """A ``Config(pre_hook=...)`` gets the args dict (with that config's meta-parameters) before every
    benchmark run (and only then: once per ``kernel_call()``), ahead of the autotuner's own pre_hook (so
    ``reset_to_zero`` wins there), and before every real launch, cached ones included, where nothing
    runs after it."""
    src = int_valued()
    acc = torch.full_like(src, 5.0)
    launches = Launches()
    seen: list[dict[str, Any]] = []

    def fill_seven(nargs: dict[str, Any]) -> None:
        seen.append(dict(nargs))
        nargs["acc"].fill_(7.0)

    def after_run(block: int) -> None:
        assert_equal(acc, src)

    configs = [triton.Config({"BLOCK": block}, pre_hook=fill_seven) for block in (32, 64)]
    bench = ScriptedBench(launches, {32: 1.0, 64: 2.0}, after_run=after_run)
    kernel = autotune(configs=configs, key=["n"], reset_to_zero=["acc"], do_bench=bench)(_accumulate_kernel)

    kernel[launches.grid(N)](acc, src, N)
    torch.cuda.synchronize()
    assert [nargs["BLOCK"] for nargs in seen] == [*bench.benchmarked, 32]
    for nargs in seen:
        assert set(nargs) == {"acc", "src", "n", "BLOCK"} | LAUNCH_KWARGS | CONFIG_OPTIONS
    assert_equal(acc, 7.0 + src)

    kernel[launches.grid(N)](acc, src, N)
    torch.cuda.synchronize()
    assert len(seen) == 4
    assert_equal(acc, 7.0 + src)


def test_conflicting_meta_parameters_raise(autotune: Callable[..., Any]) -> None:
    """Passing a tuned meta-parameter at call time raises ``ValueError`` naming it ("Conflicting
    meta-parameters"), before anything is benchmarked."""
    dst, src = double_args()
    kernel = autotune(configs=block_configs(32, 64), key=["n"], do_bench=never_bench)(_double_kernel)
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK"):
        kernel[grid_for(N)](dst, src, N, BLOCK=64)


def test_autotuner_attributes(autotune: Callable[..., Any]) -> None:
    """The decorated object wraps the JITFunction as ``fn``, keeps ``configs``, ``keys`` and the kernel's
    ``arg_names``, starts with an empty ``cache`` and resets ``nargs`` to None after each launch."""
    dst, src = double_args()
    configs = block_configs(32, 64)
    launches = Launches()
    kernel = autotune(configs=configs, key=["n"], do_bench=ScriptedBench(launches))(_double_kernel)
    assert kernel.fn is _double_kernel
    assert kernel.configs == configs
    assert kernel.keys == ["n"]
    assert kernel.arg_names == _double_kernel.arg_names
    assert kernel.cache == {}
    kernel[launches.grid(N)](dst, src, N)
    assert kernel.nargs is None


def _tune_twice(autotune: Callable[..., Any], **options: Any) -> tuple[Any, Any, ScriptedBench]:
    """Tune ``_double_kernel`` with one autotuner, then launch it through a second, fresh one made from
    equal (new) Config objects, as a new process would. Returns (first, second, second's bench)."""
    dst, src = double_args()
    launches = Launches()
    timings = {32: 3.0, 64: 1.0, 128: 2.0}
    config_pre_hook = options.pop("config_pre_hook", None)

    def make_configs() -> list[triton.Config]:
        return [triton.Config({"BLOCK": b}, pre_hook=config_pre_hook) for b in timings]

    first_bench = ScriptedBench(launches, timings)
    first = autotune(configs=make_configs(), key=["n"], do_bench=first_bench, **options)(_double_kernel)
    first[launches.grid(N)](dst, src, N)
    assert len(first_bench.benchmarked) == 3

    dst.fill_(float("nan"))
    second_bench = ScriptedBench(launches, timings)
    second = autotune(configs=make_configs(), key=["n"], do_bench=second_bench, **options)(_double_kernel)
    second[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert second.best_config == first.best_config
    assert second.best_config.kwargs == {"BLOCK": 64}
    assert list(second.cache) == [(N, F32, F32)]
    assert launches.last == 64
    assert_equal(dst, src * 2)
    return first, second, second_bench


def test_cache_results_spares_a_fresh_autotuner(autotune: Callable[..., Any]) -> None:
    """With ``cache_results=True`` the timings go to Triton's on-disk cache, and a fresh autotuner for the
    same kernel, configs and key (as in a new process) takes the best config and ``configs_timings``
    from there without benchmarking (its Configs are rebuilt from disk: equal, not identical)."""
    first, second, second_bench = _tune_twice(autotune, cache_results=True)
    assert second_bench.benchmarked == []
    assert second.configs_timings == first.configs_timings
    by_block = {config.kwargs["BLOCK"]: value for config, value in second.configs_timings.items()}
    assert by_block == {32: timing(3.0), 64: timing(1.0), 128: timing(2.0)}


def test_fresh_autotuner_benchmarks_again_without_cache_results(autotune: Callable[..., Any]) -> None:
    """Without ``cache_results`` (the default) tuning results live in the autotuner object only: a fresh
    autotuner for the same kernel, configs and key benchmarks every config again."""
    _, _, second_bench = _tune_twice(autotune)
    assert sorted(second_bench.benchmarked) == [32, 64, 128]


def test_cache_results_is_off_when_a_config_has_a_pre_hook(autotune: Callable[..., Any]) -> None:
    """``cache_results=True`` is ignored when any config has a ``pre_hook`` (it cannot be saved): a fresh
    autotuner benchmarks again."""

    def hook(nargs: dict[str, Any]) -> None:
        pass

    _, _, second_bench = _tune_twice(autotune, cache_results=True, config_pre_hook=hook)
    assert sorted(second_bench.benchmarked) == [32, 64, 128]


def test_deprecated_warmup_and_rep(autotune: Callable[..., Any]) -> None:
    """``warmup``/``rep`` still work but warn (``DeprecationWarning``) when the decorator is applied; they
    switch to Triton's ``do_bench`` with those times, even over a ``do_bench`` passed alongside."""
    dst, src = double_args()
    bench = ScriptedBench(Launches())
    configs = block_configs(64, 128)
    with pytest.warns(DeprecationWarning, match="warmup, rep, and use_cuda_graph parameters are deprecated"):
        kernel = autotune(configs=configs, key=["n"], warmup=1, rep=1, do_bench=bench)(_double_kernel)
    kernel[grid_for(N)](dst, src, N)
    torch.cuda.synchronize()
    assert bench.benchmarked == []
    assert set(kernel.configs_timings) == set(configs)
    assert all(len(value) == 3 for value in kernel.configs_timings.values())
    assert_equal(dst, src * 2)


# ------------------------------------------------------------------------------ kiln-only behaviour

# BLOCK=48 does not compile: tl.arange needs a power-of-2 range (a CompilationError, not one of the
# errors Triton's autotuner turns into an infinite timing).
BROKEN_BLOCK = 48


def test_reference_triton_raises_on_a_config_that_fails_to_compile() -> None:
    """Reference for the next test: in Triton 3.6 a config that fails to compile makes the launch raise."""
    dst, src = double_args()
    kernel = triton.autotune(
        configs=block_configs(BROKEN_BLOCK, 64), key=["n"], do_bench=ScriptedBench(Launches())
    )(_double_kernel)
    with pytest.raises(triton.CompilationError):
        kernel[grid_for(N)](dst, src, N)


def test_kiln_only_skips_configs_that_fail_to_compile(kiln_autotune: Callable[..., Any]) -> None:
    """kiln feature (differs from Triton, see the test above): a config that fails to compile is
    skipped, never benchmarked, and the autotuner goes on with the others."""
    dst, src = double_args()
    launches = Launches()
    configs = block_configs(BROKEN_BLOCK, 64)
    bench = ScriptedBench(launches)
    kernel = kiln_autotune(configs=configs, key=["n"], do_bench=bench)(_double_kernel)
    kernel[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert bench.benchmarked == [64]
    assert kernel.best_config is configs[1]
    assert launches.last == 64
    assert_equal(dst, src * 2)


def test_kiln_only_remembers_tunings_by_default(
    kiln_autotune: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kiln feature (differs from Triton's default): with its tuning database on (kiln's default), a
    fresh autotuner for the same kernel, configs and key, as in a new process, benchmarks nothing and
    takes the best config and timings from the database, even without ``cache_results``."""
    monkeypatch.setenv("KILN_USE_TUNING_DB", "1")
    dst, src = double_args()
    launches = Launches()
    timings = {32: 3.0, 64: 1.0, 128: 2.0}
    first_bench = ScriptedBench(launches, timings)
    first = kiln_autotune(configs=block_configs(32, 64, 128), key=["n"], do_bench=first_bench)(_double_kernel)
    first[launches.grid(N)](dst, src, N)
    assert sorted(first_bench.benchmarked) == [32, 64, 128]
    second_bench = ScriptedBench(launches, timings)
    second = kiln_autotune(configs=block_configs(32, 64, 128), key=["n"], do_bench=second_bench)(
        _double_kernel
    )
    dst.fill_(float("nan"))
    second[launches.grid(N)](dst, src, N)
    torch.cuda.synchronize()
    assert second_bench.benchmarked == []
    assert second.best_config.kwargs == {"BLOCK": 64}
    assert second.configs_timings == first.configs_timings
    assert_equal(dst, src * 2)

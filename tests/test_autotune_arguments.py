"""``kiln.autotune``'s arguments are checked when the decorator is applied (CPU, real Triton).

Called directly, ``kiln.autotune`` refuses what would fail later or tune the wrong thing; a kernel
that ``kiln.install()`` routes here from ``@triton.autotune`` is decorated as Triton would, with
one :class:`~kiln.autotuner.arguments.AutotuneArgumentWarning` naming what is wrong (a library
that imports under Triton must import under kiln). Items from an audit, each failing before.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import triton

import triton_kiln as kiln
from support.basics import SM90
from support.kernels import scale_kernel
from test_autotune_cpu import by_block, configs, make_tuner, tune
from triton_kiln import triton_compat
from triton_kiln.autotuner.arguments import AutotuneArgumentWarning

pytestmark = pytest.mark.timeout(240)

C = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]


@pytest.fixture
def routed() -> Iterator[None]:
    """``triton.autotune`` is kiln's while the test runs."""
    kiln.install()
    try:
        yield
    finally:
        kiln.uninstall()


def ours(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, AutotuneArgumentWarning)]


def decorate_routed(fn: Any = scale_kernel, **kwargs: Any) -> tuple[Any, list[str]]:
    kwargs.setdefault("configs", C)
    kwargs.setdefault("key", ["n"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = triton.autotune(**kwargs)(fn)
    return kernel, ours(caught)


# -- 1. not a @triton.jit kernel --------------------------------------------------------------


def test_a_python_function_is_refused_with_the_decorator_order() -> None:
    def f(x: Any, n: Any) -> None:
        pass

    with pytest.raises(TypeError, match=r"got a Python function f\); put @triton.jit below @kiln.autotune"):
        kiln.autotune(configs=C, key=["n"], target=SM90)(f)


# -- 2. key -------------------------------------------------------------------------------------


def test_an_unknown_key_is_refused_naming_it_and_the_parameters() -> None:
    with pytest.raises(ValueError, match=r"'N'.*x_ptr, out_ptr, n, BLOCK"):
        kiln.autotune(configs=C, key=["N"], target=SM90)(scale_kernel)


def test_an_unknown_key_routed_by_install_warns_once(routed: None) -> None:
    kernel, told = decorate_routed(key=["N", "M"])
    assert isinstance(kernel, kiln.Autotuner)
    assert len(told) == 1
    assert "'N'" in told[0]
    assert "'M'" in told[0]


def test_a_bare_string_key_is_one_name() -> None:
    kernel = kiln.autotune(configs=C, key="n", target=SM90)(scale_kernel)
    assert kernel.keys == ["n"]


# -- 3. kiln's own arguments' types -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("target", 90, "target"),
        ("target", "cuda90", "cuda:90"),
        ("database", 5, "TuningDatabase"),
        ("pool", "x", "CompilePool"),
        ("tolerances", (1,), "(rtol, atol)"),
        ("tolerances", ("a", "b"), "(rtol, atol)"),
        ("reference", 3, "reference"),
        ("do_bench", 5, "do_bench"),
        ("pre_hook", 5, "pre_hook"),
        ("post_hook", "x", "post_hook"),
    ],
)
def test_a_wrongly_typed_argument_is_refused_at_decoration(name: str, value: Any, words: str) -> None:
    kwargs: dict[str, Any] = {"target": SM90, name: value}
    with pytest.raises(TypeError, match=re_escape(words)):
        kiln.autotune(configs=C, key=["n"], **kwargs)(scale_kernel)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_target_string_is_read_as_the_cli_reads_it() -> None:
    kernel = kiln.autotune(configs=C, key=["n"], target="cuda:90")(scale_kernel)
    assert kernel._target == SM90


def test_a_database_path_opens_a_tuning_database(tmp_path: Path) -> None:
    from triton_kiln.tuning import TuningDatabase

    kernel = kiln.autotune(configs=C, key=["n"], target=SM90, database=str(tmp_path / "x.db"))(scale_kernel)
    assert isinstance(kernel._database, TuningDatabase)


# -- 4. configs ---------------------------------------------------------------------------------


def test_configs_none_is_triton_default_config() -> None:
    kernel = kiln.autotune(configs=None, key=["n"], target=SM90)(scale_kernel)  # type: ignore[arg-type]
    assert len(kernel.configs) == 1
    assert kernel.configs[0].kwargs == {}


@pytest.mark.parametrize("bad", [[{"BLOCK": 64}], {"BLOCK": 64}, triton.Config({"BLOCK": 64})])
def test_configs_that_are_not_a_list_of_triton_configs_are_refused(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"list of triton.Config"):
        kiln.autotune(configs=bad, key=["n"], target=SM90)(scale_kernel)


def test_a_config_kwarg_the_kernel_lacks_is_named() -> None:
    with pytest.raises(ValueError, match=r"'BLOCKZ'"):
        kiln.autotune(configs=[triton.Config({"BLOCKZ": 64})], key=["n"], target=SM90)(scale_kernel)


def test_a_config_setting_a_runtime_argument_is_named() -> None:
    with pytest.raises(ValueError, match=r"'n'.*constexpr"):
        kiln.autotune(configs=[triton.Config({"n": 64, "BLOCK": 64})], key=["n"], target=SM90)(scale_kernel)


def test_a_backend_option_in_a_config_is_not_an_unknown_kwarg() -> None:
    kiln.autotune(configs=[triton.Config({"BLOCK": 64, "waves_per_eu": 2})], key=["n"], target=SM90)(
        scale_kernel
    )


def test_bad_config_kwargs_routed_by_install_warn(routed: None) -> None:
    kernel, told = decorate_routed(
        configs=[triton.Config({"BLOCKZ": 64}), triton.Config({"n": 4, "BLOCK": 4})]
    )
    assert isinstance(kernel, kiln.Autotuner)
    assert len(told) == 1
    assert "'BLOCKZ'" in told[0]
    assert "'n'" in told[0]


# -- 5. a config whose options Triton's backend refuses -------------------------------------------


def test_a_config_with_num_warps_3_is_a_failed_config(make_pool: Any, tmp_path: Path) -> None:
    cs = [*configs(64, 128), triton.Config({"BLOCK": 256}, num_warps=3)]
    tuner, bench = make_tuner(make_pool, tmp_path, cs, by_block({64: 2.0, 128: 1.0, 256: 0.1}), sandbox=False)
    tune(tuner, bench)
    assert tuner.best_config.kwargs == {"BLOCK": 128}
    failed = [r for r in tuner.last_run.results if r.status != "ok"]
    assert [r.status for r in failed] == ["compile_error"]
    assert "num_warps" in (failed[0].reason or "")
    assert tuner.configs_timings[cs[2]] == [float("inf")] * 3


# -- 6. pruning to nothing ----------------------------------------------------------------------


@pytest.mark.parametrize("top_k", [0.4, 0])
def test_pruning_to_no_config_names_top_k(make_pool: Any, tmp_path: Path, top_k: float) -> None:
    perf = lambda **kw: kw["BLOCK"]  # noqa: E731
    tuner, bench = make_tuner(
        make_pool,
        tmp_path,
        configs(64, 128),
        by_block({64: 1.0, 128: 2.0}),
        prune_configs_by={"perf_model": perf, "top_k": top_k},
    )
    with pytest.raises(kiln.AutotuneError, match=r"pruning left no configs.*top_k"):
        tune(tuner, bench)


# -- 7. reset_to_zero / restore_value -------------------------------------------------------------


@pytest.mark.parametrize("name", ["reset_to_zero", "restore_value"])
def test_unknown_names_to_reset_or_restore_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name}.*'outz'"):
        kiln.autotune(configs=C, key=["n"], target=SM90, **{name: ["outz"]})(scale_kernel)


@pytest.mark.parametrize("name", ["reset_to_zero", "restore_value"])
def test_a_string_to_reset_or_restore_is_refused(name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name}.*list"):
        kiln.autotune(configs=C, key=["n"], target=SM90, **{name: "out_ptr"})(scale_kernel)


def test_unknown_names_to_reset_routed_by_install_warn(routed: None) -> None:
    kernel, told = decorate_routed(reset_to_zero=["outz"], restore_value="x_ptr")
    assert isinstance(kernel, kiln.Autotuner)
    assert len(told) == 1
    assert "'outz'" in told[0]
    assert "restore_value" in told[0]


# -- 8. warmup / rep ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"), [("rep", "abc"), ("rep", 0), ("rep", math.nan), ("rep", math.inf), ("warmup", -1)]
)
def test_bad_benchmark_lengths_are_refused(name: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        kiln.autotune(configs=C, key=["n"], target=SM90, **{name: value})(scale_kernel)


def test_warmup_zero_is_accepted() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        kiln.autotune(configs=C, key=["n"], target=SM90, warmup=0, rep=10)(scale_kernel)


# -- 9. stacked autotuners ----------------------------------------------------------------------


def test_kiln_over_triton_autotune_is_refused_clearly() -> None:
    inner = triton.autotune(configs=C, key=["n"])(scale_kernel)
    with pytest.raises(NotImplementedError, match=r"over another autotuner is not supported"):
        kiln.autotune(configs=C, key=["n"], target=SM90)(inner)


def test_kiln_over_kiln_is_refused_clearly() -> None:
    inner = kiln.autotune(configs=C, key=["n"], target=SM90)(scale_kernel)
    with pytest.raises(NotImplementedError, match=r"over another autotuner is not supported"):
        kiln.autotune(configs=C, key=["n"], target=SM90)(inner)


def test_stacked_triton_autotune_routed_keeps_the_inner_one(routed: None) -> None:
    inner, told = decorate_routed()
    assert told == []
    outer, told = decorate_routed(fn=inner)
    assert type(outer) is triton_compat.triton_autotuner_class()  # Triton's, over kiln's inner one
    assert outer.fn is inner
    assert len(told) == 1
    assert "not supported" in told[0]


# -- the direct/routed boundary -------------------------------------------------------------------


def test_a_correct_routed_kernel_gets_no_warning(routed: None) -> None:
    kernel, told = decorate_routed(reset_to_zero=["out_ptr"], key=["n"])
    assert isinstance(kernel, kiln.Autotuner)
    assert told == []


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("AutotuneArgumentWarning", "triton_kiln.autotuner.arguments"),
        ("CacheWriteWarning", "triton_kiln.artifacts.store"),
    ],
)
def test_the_warnings_kiln_gives_are_importable_from_the_package(name: str, module: str) -> None:
    # to filter one, a user writes warnings.filterwarnings("ignore", category=kiln.<Name>)
    import importlib

    import triton_kiln

    assert name in triton_kiln.__all__
    assert getattr(triton_kiln, name) is getattr(importlib.import_module(module), name)

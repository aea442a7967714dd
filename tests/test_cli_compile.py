"""``kiln compile MODULE:KERNEL``: configs x targets into the kiln cache, a summary of failures by cause."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.cli import main

SCALE_SIGNATURE = "x_ptr=*fp32,out_ptr=*fp32,n=i32"


def _stored(cache: Path) -> int:
    root = cache / "artifacts-v2"
    return sum(1 for p in root.glob("*/*") if (p / "artifact.json").exists()) if root.exists() else 0


@pytest.mark.timeout(300)
def test_an_autotuned_kernels_own_configs_for_two_targets(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = CliRunner().invoke(
        main,
        ["compile", "support.farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--target", "cuda:90",
         "--target", "cuda:100", "--workers", "2", "--cache-dir", str(cache),
         "--json", str(tmp_path / "s.json")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "6 of 6 compiled on the local pool" in result.output
    assert _stored(cache) == 6  # 3 configs x 2 targets, each in the cache
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["compiled"] == 6
    assert summary["failed"] == {}
    ArtifactStore(cache)  # a valid kiln cache


@pytest.mark.timeout(300)
def test_failures_are_summarized_by_cause_and_fail_the_exit_only_with_strict(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # faults.faulty_scale with FAULT=4 makes Triton's compiler abort() (the crash matrix's hook).
    args = [
        "compile", "support.faults:faulty_scale", "--signature", SCALE_SIGNATURE,
        "--config", "BLOCK=64,FAULT=0", "--config", "BLOCK=64,FAULT=4,num_warps=2",
        "--config", "BLOCK=128,FAULT=0", "--preload", "support.faults",
        "--workers", "2", "--cache-dir", str(cache),
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "2 of 3 compiled" in result.output
    assert "1 failed: crashed: SIGABRT" in result.output
    # a --config is a triton.Config: Triton's defaults for the options it leaves out, as tuning has
    label = "faulty_scale[BLOCK=64, FAULT=4, num_warps=2, num_stages=3, num_ctas=1] cuda:90"
    assert f"{label}: compile of" in result.output
    strict = CliRunner().invoke(main, [*args, "--strict"])
    assert strict.exit_code == 1, strict.output
    assert "1 failed: crashed: SIGABRT" in strict.output


def test_bad_arguments_are_one_error_line(tmp_path: Path) -> None:
    runner = CliRunner()
    no_signature = runner.invoke(main, ["compile", "support.farm_kernels:tuned_scale"])
    assert no_signature.exit_code != 0
    assert "--signature is required" in no_signature.output
    bad_target = runner.invoke(
        main,
        ["compile", "support.farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--target", "sm90"],
    )
    assert bad_target.exit_code != 0
    assert "cuda:90" in bad_target.output
    missing = runner.invoke(main, ["compile", "no_such_module_here:k", "--signature", SCALE_SIGNATURE])
    assert missing.exit_code == 1
    assert "cannot import 'no_such_module_here'" in missing.output
    bundle = runner.invoke(
        main,
        [
            "compile",
            "support.farm_kernels:tuned_scale",
            "--signature",
            SCALE_SIGNATURE,
            "--bundle",
            str(tmp_path / "b"),
        ],
    )
    assert bundle.exit_code == 1
    assert "kiln bundle save" in bundle.output


ROWS_TYPES = "x_ptr=*fp32:1,out_ptr=*fp32,n_rows=i32,n_cols=i32,stride=i32"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("spec", "rows", "cols", "offset"),
    [
        (["--signature", ROWS_TYPES, "--value", "n_rows=1,n_cols=32,stride=33"], 1, 32, 1),
        (["--signature", "x_ptr=*fp32:1,out_ptr=*fp32:16,n_rows=i32:1,n_cols=i32:16,stride=i32"], 1, 32, 1),
        (["--signature", "x_ptr=*fp32,out_ptr=*fp32,n_rows=i32,n_cols=i32,stride=i32"], 3, 33, 0),
    ],
    ids=["values", "hints", "defaults"],
)
def test_the_autotuner_finds_every_binary_kiln_compile_made(
    spec: list[str], rows: int, cols: int, offset: int, tmp_path: Path, make_pool: Any
) -> None:
    """``kiln compile`` then a real call's compile requests (``kiln.precompile`` on CPU tensors:
    the requests a GPU call would build) on the same cache: every one is a cache hit. The calls
    specialize every way Triton does: a view at an odd offset (``x[:, 1:]``, not 16-byte aligned)
    or aligned tensors, an integer equal to 1, one that is a multiple of 16, ones that are
    neither ("defaults": the plain types, torch's aligned pointers, unspecialized integers)."""
    import triton_kiln as kiln
    from support.basics import SM90
    from support.farm_kernels import tuned_rows

    cache = tmp_path / "cache"
    result = CliRunner().invoke(
        main,
        ["compile", "support.farm_kernels:tuned_rows", *spec, "--target", "cuda:90", "--workers", "2",
         "--cache-dir", str(cache)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 of 2 compiled" in result.output
    x = torch.randn(rows, cols + 1)[:, offset : offset + cols]
    assert (x.data_ptr() % 16 == 0) == (offset == 0)
    out = torch.empty(rows, cols)
    pool = make_pool(cache_dir=cache)
    tuner = kiln.autotune(
        tuned_rows.configs, key=["n_rows", "n_cols"], pool=pool, target=SM90, database=False
    )(tuned_rows.fn)
    futures = kiln.precompile(tuner, x, out, rows, cols, x.stride(0))
    assert all(f.result(timeout=120).binary for f in futures)
    assert len(futures) == 2
    assert pool.stats.disk_hits == 2, pool.stats
    assert pool.stats.dispatched == 0, pool.stats  # nothing compiled again


@pytest.mark.timeout(300)
def test_calls_that_specialize_alike_compile_once(tmp_path: Path) -> None:
    args = ["compile", "support.farm_kernels:tuned_scale", "--signature", SCALE_SIGNATURE, "--workers", "2",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    alike = CliRunner().invoke(main, [*args, "--value", "n=4096", "--value", "n=64"])
    assert alike.exit_code == 0, alike.output
    assert "3 of 3 compiled" in alike.output  # both multiples of 16: one call's requests
    unlike = CliRunner().invoke(main, [*args, "--value", "n=4096", "--value", "n=17", "--value", "n=1"])
    assert unlike.exit_code == 0, unlike.output
    assert "9 of 9 ready" in unlike.output  # the first call's 3 are in the cache already
    assert "6 compiled, 3 found in the cache" in unlike.output


@pytest.mark.parametrize(
    ("signature", "values", "expected"),
    [
        ("x_ptr=*fp16:7,out_ptr=*fp32,n=i32", [],
         "x_ptr=*fp16:7: ':7' is not a hint; write x_ptr=*fp16 or x_ptr=*fp16:16 (16-byte aligned, "
         "the default), x_ptr=*fp16:1 (not aligned)"),
        ("x_ptr=*fp32,out_ptr=*fp32,n=i32:8", [],
         "n=i32:8: ':8' is not a hint; write n=i32 (unspecialized), n=i32:16 (a multiple of 16), "
         "n=i32:1 (equal to 1)"),
        ("x_ptr=*fp32,out_ptr=*fp32,n=i32:16", ["n=17"], "n: --signature says i32:16, --value gives 17"),
        ("x_ptr=*fp32,out_ptr=*fp32,n=i64", ["n=4096"],
         "n: --signature says i64, but Triton passes 4096 as i32"),
        ("x_ptr=*fp32,out_ptr=*fp32", [], "no type for n"),
        ("x_ptr=*fp32,out_ptr=*fp32,n=i32", ["x_ptr=0"],
         "x_ptr is a pointer (*fp32); --value gives integers"),
    ],
    ids=["pointer-hint", "int-hint", "value-against-hint", "int-type-by-value", "missing", "pointer-value"],
)  # fmt: skip
def test_a_bad_signature_or_value_is_one_error_line(signature: str, values: list[str], expected: str) -> None:
    args = ["compile", "support.farm_kernels:tuned_scale", "--signature", signature]
    for value in values:
        args += ["--value", value]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert expected in errors[0], result.output


# --- the audit of `kiln compile` (its messages and exit status): each case below failed before ---

ADD_SIGNATURE = "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n=i32"  # tests/support/kernels.py's add_kernel


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], Path]]:
    """Writes a module of the test's own, importable by name while the test runs (sys.path and
    sys.modules as they were after it)."""
    folder = tmp_path / "modules"
    folder.mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.syspath_prepend(str(folder))
    names: list[str] = []

    def write(name: str, source: str) -> Path:
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        names.append(name)
        return path

    yield write
    for name in names:
        sys.modules.pop(name, None)


def _error_line(result: Any) -> str:
    """The one ``Error:`` line of a refused command (no traceback, nothing compiled)."""
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output, result.output
    assert "compiled on" not in result.output, result.output  # refused before any compile
    return errors[0]


REASONS = """
import triton
import triton.language as tl


@triton.jit
def offsets_of(start, BLOCK: tl.constexpr):
    return start + tl.arange(0, BLOCK)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK != 32, "BLOCK=32 is not supported")
    offsets = offsets_of(tl.program_id(0) * BLOCK, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)
"""


@pytest.mark.timeout(300)
def test_a_compile_errors_reason_and_location_are_on_its_failure_line(
    tmp_path: Path, user_module: Callable[[str, str], Path]
) -> None:
    """Triton's CompilationError reads ``at 2:4:``, the source, a caret, then the reason: the
    failure line shows the location and the reason (for an error in a called @triton.jit
    function, whose own message ends at the caret, the reason of the innermost error)."""
    user_module("cli_reason_kernels", REASONS)
    result = CliRunner().invoke(
        main,
        ["compile", "cli_reason_kernels:add_kernel", "--signature", ADD_SIGNATURE, "--config", "BLOCK=32",
         "--config", "BLOCK=100", "--config", "BLOCK=64", "--workers", "2",
         "--cache-dir", str(tmp_path / "c")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "1 of 3 compiled" in result.output
    lines = {
        line.split("[")[1].split(",")[0]: line for line in result.output.splitlines() if "] cuda:90: " in line
    }
    assert lines["BLOCK=32"].endswith("cuda:90: at 2:4: BLOCK=32 is not supported"), result.output
    assert "cuda:90: at 3:14: " in lines["BLOCK=100"], result.output
    assert lines["BLOCK=100"].endswith("arange's range must be a power of 2"), result.output


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], "BLOCK is a tl.constexpr parameter with no value: give --constexpr BLOCK=... or --config "
             "'BLOCK=...'"),
        (["--config", "BLOCK=64", "--config", "num_warps=2"],
         "BLOCK is a tl.constexpr parameter with no value in --config 'num_warps=2': give --constexpr "
         "BLOCK=... or --config 'BLOCK=...'"),
    ],
    ids=["no-value", "one-config-without"],
)  # fmt: skip
def test_a_constexpr_without_a_value_is_named(extra: list[str], expected: str) -> None:
    result = CliRunner().invoke(
        main, ["compile", "support.kernels:add_kernel", "--signature", ADD_SIGNATURE, *extra]
    )
    assert result.exit_code == 2, result.output
    assert expected in _error_line(result)
    assert "dynamic_func" not in result.output


@pytest.mark.timeout(300)
def test_the_exit_status_is_1_when_nothing_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["compile", "support.kernels:add_kernel", "--signature", ADD_SIGNATURE, "--workers", "1",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    every_one_failed = CliRunner().invoke(main, [*args, "--config", "BLOCK=100", "--config", "BLOCK=48"])
    assert every_one_failed.exit_code == 1, every_one_failed.output
    assert "0 of 2 compiled" in every_one_failed.output
    monkeypatch.setenv("KILN_ZYGOTE_START_TIMEOUT_S", "0.01")
    monkeypatch.setenv("KILN_ZYGOTE_RESTARTS", "1")
    no_pool = CliRunner().invoke(main, [*args, "--constexpr", "BLOCK=64"])
    assert no_pool.exit_code == 1, no_pool.output
    assert "0 of 1 compiled" in no_pool.output
    assert "it did not become ready within 10 ms (KILN_ZYGOTE_START_TIMEOUT_S" in no_pool.output


def test_an_unknown_or_failing_preload_is_refused_up_front(user_module: Callable[[str, str], Path]) -> None:
    args = ["compile", "support.kernels:add_kernel", "--signature", ADD_SIGNATURE, "--constexpr", "BLOCK=64"]
    unknown = CliRunner().invoke(main, [*args, "--preload", "no_such_preload_module_here"])
    assert unknown.exit_code == 2, unknown.output
    line = _error_line(unknown)
    assert "--preload no_such_preload_module_here: no module of that name" in line, line
    user_module("cli_failing_preload", "raise RuntimeError('preload boom')\n")
    failing = CliRunner().invoke(main, [*args, "--preload", "cli_failing_preload"])
    assert failing.exit_code == 2, failing.output
    line = _error_line(failing)
    expected = (
        "--preload cli_failing_preload: importing 'cli_failing_preload' raised RuntimeError: preload boom "
        "(cli_failing_preload.py:1)"
    )
    assert expected in line, line


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["--config", "BLOCK=64,num_warps=four"], "num_warps=four: expected a power of two of at least 1"),
        (["--config", "BLOCK=64,num_warps=3"], "num_warps=3: expected a power of two of at least 1"),
        (["--config", "BLOCK=64,num_warps=0"], "num_warps=0: expected a power of two of at least 1"),
        (["--config", "BLOCK=64,num_stages=-1"], "num_stages=-1: expected an integer of at least 0"),
        (["--config", "BLOCK=64,num_stages=2.5"], "num_stages=2.5: expected an integer of at least 0"),
        (["--config", "BLOCK=64,num_ctas=0"], "num_ctas=0: expected an integer of at least 1"),
        (["--config", "BLOCK=64,maxnreg=0"], "maxnreg=0: expected a positive integer"),
        (["--config", "BLOCK=64,BOGUS=3"],
         "BOGUS is neither a compile option (num_warps, num_stages, num_ctas, maxnreg, ir_override) nor a "
         "parameter of add_kernel (its parameters: x_ptr, y_ptr, out_ptr, n, BLOCK)"),
        (["--constexpr", "BLOCK=64,BOGUS=3"],
         "BOGUS is not a parameter of add_kernel (its parameters: x_ptr, y_ptr, out_ptr, n, BLOCK)"),
    ],
    ids=["warps-word", "warps-3", "warps-64", "stages-negative", "stages-float", "ctas-0", "maxnreg-0",
         "config-unknown", "constexpr-unknown"],
)  # fmt: skip
def test_a_bad_config_value_is_one_error_line(option: list[str], expected: str) -> None:
    result = CliRunner().invoke(
        main, ["compile", "support.kernels:add_kernel", "--signature", ADD_SIGNATURE, *option]
    )
    assert result.exit_code == 2, result.output
    assert expected in _error_line(result)


@pytest.mark.timeout(300)
def test_the_json_path_is_checked_before_compiling_and_its_folder_made(tmp_path: Path) -> None:
    args = ["compile", "support.kernels:add_kernel", "--signature", ADD_SIGNATURE, "--constexpr", "BLOCK=64",
            "--workers", "1", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    (tmp_path / "a-file").write_text("")
    under_a_file = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "a-file" / "s.json")])
    assert under_a_file.exit_code == 2, under_a_file.output
    assert "a-file is not a directory" in _error_line(under_a_file)
    target = tmp_path / "new" / "folder" / "s.json"
    made = CliRunner().invoke(main, [*args, "--json", str(target)])
    assert made.exit_code == 0, made.output
    assert json.loads(target.read_text())["compiled"] == 1


def test_keyboard_interrupt_at_import_still_propagates(user_module: Callable[[str, str], Path]) -> None:
    from triton_kiln.cli.compile import resolve

    user_module("cli_interrupted_import", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        resolve("cli_interrupted_import:k")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "support.kernels:ZERO_WRITER",
            "support.kernels:ZERO_WRITER is an int, not a @triton.jit kernel nor an autotuned one",
        ),
        (
            "cli_compile_plain:helper",
            "cli_compile_plain:helper is a Python function, not a @triton.jit kernel",
        ),
    ],
)
def test_an_object_that_is_no_kernel_is_named_as_given(
    spec: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it said "<function helper at 0x7f...> is not a @triton.jit kernel nor an autotuned one"
    (tmp_path / "cli_compile_plain.py").write_text("def helper(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compile", spec, "--signature", "x=i32"])
    assert result.exit_code == 1, result.output
    assert expected in result.output
    assert "0x" not in result.output

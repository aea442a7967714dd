"""Accepted but unusable no more: every setting is range-checked with an error naming its
variable, and a request's target, signature and constexprs are checked in the caller with
messages that name the fix."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from support import kernels
from support.basics import SM90
from triton_kiln import CompilePool, CompileRequest, GPUTarget, SettingsError, settings
from triton_kiln.errors import JobInfo, RequestError, TargetError, WorkerCrashedError

ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in os.environ:
        if var.startswith("KILN_"):
            monkeypatch.delenv(var)


# -- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("KILN_MEMORY_POLL_S", "inf", "positive, finite number of seconds"),
        ("KILN_MEMORY_POLL_S", "nan", "positive, finite number of seconds"),
        ("KILN_MEMORY_POLL_S", "0", "positive, finite number of seconds"),
        ("KILN_MEMORY_POLL_S", "-0.5", "positive, finite number of seconds"),
        ("KILN_MEMORY_POLL_S", "3600", "from 0.001 to 60"),
        ("KILN_JOB_TIMEOUT_S", "inf", "positive, finite number of seconds"),
        ("KILN_BENCH_TIMEOUT_S", "1e999", "positive, finite number of seconds"),
        ("KILN_ZYGOTE_START_TIMEOUT_S", "inf", "positive, finite number of seconds"),
        ("KILN_WORKERS", "100000", "4 per CPU core, at least 8, at most 512"),
        ("KILN_STDERR_TAIL_LINES", "1000000000", "from 1 to 100,000"),
        ("KILN_ZYGOTE_RESTARTS", "99999", "from 1 to 1,000"),
        ("KILN_MEMORY_LIMIT_MB", str(1 << 40), "MiB from 1 to"),
        ("KILN_CACHE_DIR", "/dev/null", "expected a directory, and this is a file"),
        ("KILN_CACHE_DIR", "/dev/null/kiln", "/dev/null is not a directory"),
        ("KILN_TUNING_DB", "/dev/null/tuning.sqlite3", "/dev/null is not a directory"),
    ],
)
def test_out_of_range_settings_name_their_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=message) as info:
        settings.current()
    assert str(info.value).startswith(f"{var}=")
    with pytest.raises(SettingsError, match=var):
        CompilePool(start=False)  # before starting anything


def test_paths_that_are_files_or_directories_of_the_wrong_kind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    monkeypatch.setenv("KILN_CACHE_DIR", str(a_file))
    with pytest.raises(SettingsError, match=r"KILN_CACHE_DIR=.*file.*point it at a directory"):
        settings.current()
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "new" / "cache"))  # creatable: fine
    assert settings.current().cache_dir == tmp_path / "new" / "cache"
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path))
    with pytest.raises(SettingsError, match=r"KILN_TUNING_DB=.* is a directory; name a file in it"):
        settings.current()
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "sub" / "t.sqlite3"))
    assert settings.current().tuning_db == tmp_path / "sub" / "t.sqlite3"


def test_the_worker_cap_scales_with_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = settings.max_workers()
    assert cap == min(512, max(8, 4 * (os.cpu_count() or 1)))
    monkeypatch.setenv("KILN_WORKERS", str(cap))
    assert settings.current().workers == cap
    monkeypatch.setenv("KILN_WORKERS", str(cap + 1))
    with pytest.raises(SettingsError, match=f"from 1 to {cap}"):
        settings.current()


def test_arguments_and_scopes_are_range_checked_too() -> None:
    with pytest.raises(SettingsError, match=r"the setting job_timeout_s=inf \(KILN_JOB_TIMEOUT_S\)"):
        CompilePool(job_timeout_s=float("inf"), start=False)
    with pytest.raises(SettingsError, match=r"workers=100000 \(KILN_WORKERS\)"):
        CompilePool(workers=100_000, start=False)
    with pytest.raises(SettingsError, match=r"job_timeout_s=nan"), settings.scope(job_timeout_s=float("nan")):
        pass
    assert settings.current().job_timeout_s == 600.0  # the refused scope left nothing behind


# -- requests -----------------------------------------------------------------------------------


def _request(**changes: Any) -> CompileRequest:
    args: dict[str, Any] = {
        "kernel": kernels.add_kernel,
        "signature": ADD_SIGNATURE,
        "constexprs": {"BLOCK": 128},
        "target": SM90,
    }
    args.update(changes)
    return CompileRequest(**args)


def test_a_string_arch_does_not_blame_triton_override_arch() -> None:
    with pytest.raises(TargetError) as info:
        _request(target=GPUTarget("cuda", "sm_90", 32))
    text = str(info.value)
    assert "TRITON_OVERRIDE_ARCH" not in text
    assert "arch must be an int compute capability such as 90" in text
    assert "GPUTarget('cuda', 90, 32)" in text


def test_an_unknown_arch_lists_the_supported_ones() -> None:
    with pytest.raises(
        TargetError, match=r"arch 12 is not a CUDA compute capability .* supported: 70, .*, 90"
    ):
        _request(target=GPUTarget("cuda", 12, 32))


@pytest.mark.parametrize("bad", ["int32", "*float16", "float", "i33", "*"])
def test_a_bad_signature_type_is_refused_naming_valid_ones(bad: str) -> None:
    with pytest.raises(RequestError) as info:
        _request(signature={**ADD_SIGNATURE, "n": bad})
    text = str(info.value)
    assert f"signature['n']: {bad!r} is not a Triton type" in text
    assert "i32" in text
    assert "'*fp16'" in text


def test_signature_types_are_checked_against_tritons() -> None:
    _request(signature={**ADD_SIGNATURE, "x_ptr": "*kfp32", "n": "u64"})  # Triton's spellings pass
    _request(signature={**ADD_SIGNATURE, "y_ptr": "*bf16", "n": "i64"})
    with pytest.raises(RequestError, match=r"'\*kint32' is not a Triton type"):
        _request(signature={**ADD_SIGNATURE, "x_ptr": "*kint32"})


def test_a_signature_given_as_a_list_is_refused() -> None:
    with pytest.raises(RequestError, match=r"signature must be a dict mapping argument names .*got a list"):
        _request(signature=["*fp32", "*fp32", "*fp32", "i32"])
    with pytest.raises(RequestError, match=r"constexprs must be a dict .*got a tuple"):
        _request(constexprs=(("BLOCK", 128),))


def test_a_missing_constexpr_is_reported_as_a_missing_constexpr() -> None:
    with pytest.raises(RequestError) as info:
        _request(constexprs={})
    text = str(info.value)
    assert "the constexpr argument(s) ['BLOCK'] have no value" in text
    assert "constexprs={'BLOCK': ...}" in text
    assert "signature must name" not in text


# -- messages -----------------------------------------------------------------------------------


def test_a_fast_crash_does_not_read_zero_seconds() -> None:
    """The demo's abort fires ~30 ms into its compile; one decimal made that '0.0 s'."""
    error = WorkerCrashedError(JobInfo("demo_abort", (("BLOCK", 64),)), 0.031, (), -signal.SIGABRT)
    assert "after 31 ms" in str(error)
    assert "0.0 s" not in str(error)
    assert "after 3.1 s" in str(WorkerCrashedError(JobInfo("k"), 3.1, (), -signal.SIGABRT))


@pytest.mark.parametrize("arch", ["gfx", "gfxzzz", "gfx12345", "942", "sm_90"])
def test_a_hip_arch_that_is_no_gfx_name_is_refused_before_the_compile(arch: str) -> None:
    # `kiln compile --target hip:gfx` ended in Triton's "invalid literal for int()", and
    # hip:gfx12345 went to the compiler and failed there as "PassManager::run failed"
    with pytest.raises(TargetError) as info:
        _request(target=GPUTarget("hip", arch, 64))
    text = str(info.value)
    assert f"GPUTarget arch {arch!r} is not an AMD GPU name" in text
    assert "gfx942" in text


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"])
def test_hip_gfx_names_pass_the_check(arch: str) -> None:
    from triton_kiln.triton_compat import target_problem

    assert target_problem(GPUTarget("hip", arch, 64)) is None

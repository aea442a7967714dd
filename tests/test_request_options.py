"""A request's compile options are checked in the caller, with the rules ``kiln compile --config``
uses (compile/options.py): Triton would fail late, in a worker, with a message naming the
wrong cause (``'>' not supported between 'str' and 'int'``, a bare AssertionError)."""

from __future__ import annotations

from typing import Any

import pytest

from support import kernels
from support.basics import SM90
from triton_kiln import CompileRequest, GPUTarget
from triton_kiln.errors import RequestError

ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def _request(target: GPUTarget = SM90, **options: Any) -> CompileRequest:
    return CompileRequest(kernels.add_kernel, ADD_SIGNATURE, {"BLOCK": 64}, options=options, target=target)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("num_warps", "4"),
        ("num_warps", 3),
        ("num_warps", 0),
        ("num_warps", 48),
        ("num_warps", 4.0),
        ("num_warps", True),
        ("num_stages", -1),
        ("num_stages", "3"),
        ("num_ctas", 0),
        ("maxnreg", 0),
        ("maxnreg", "128"),
    ],
)
def test_bad_option_values_are_refused_naming_the_option(option: str, value: Any) -> None:
    with pytest.raises(RequestError, match=rf"add_kernel: options\[{option!r}\]={value!r}"):
        _request(**{option: value})


@pytest.mark.parametrize(
    "options",
    [
        {"num_warps": 1, "num_stages": 0, "num_ctas": 1, "maxnreg": 128},
        {"num_warps": 32, "num_stages": 5},
        {"num_warps": 64},  # Triton compiles it; loading it fails (OutOfResources), as under Triton
        {"num_warps": 8, "enable_fp_fusion": False},  # other options: Triton checks their names only
    ],
)
def test_good_options_pass(options: dict[str, Any]) -> None:
    assert dict(_request(**options).options) == options


def test_amd_num_stages_zero_passes() -> None:
    request = _request(GPUTarget("hip", "gfx942", 64), num_warps=4, num_stages=0)
    assert request.options["num_stages"] == 0

"""Compile keys: every input that changes the binary changes the key, and nothing else does.

No pool and no compile here: a key is computed in the caller's thread when a request is built.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import triton.language as tl

from support import kernels
from support.basics import SM90, add_request, gpu_available
from support.module_files import load_file
from triton_kiln import CompileRequest, GPUTarget, RequestError, TargetError

ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
MM_CONSTEXPRS = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}


def mm_signature(dtype: str = "*fp16") -> dict[str, str]:
    sig = {name: "i32" for name in kernels.matmul_kernel.arg_names if name not in MM_CONSTEXPRS}
    sig.update(a_ptr=dtype, b_ptr=dtype, c_ptr=dtype)
    return sig


def add_req(**changes: Any) -> CompileRequest:
    args: dict[str, Any] = {
        "signature": ADD_SIG,
        "constexprs": {"BLOCK": 128},
        "options": {"num_warps": 4},
        "target": SM90,
    }
    args.update(changes)
    return CompileRequest(kernels.add_kernel, **args)


def mm_req(**changes: Any) -> CompileRequest:
    args: dict[str, Any] = {
        "signature": mm_signature(),
        "constexprs": MM_CONSTEXPRS,
        "options": {"num_warps": 4, "num_stages": 3},
        "target": SM90,
    }
    args.update(changes)
    return CompileRequest(kernels.matmul_kernel, **args)


BUILDERS = {"add": add_req, "matmul": mm_req}


def assert_all_distinct(requests: list[CompileRequest]) -> None:
    keys = [r.key for r in requests]
    assert len(set(keys)) == len(keys), [(r.label(), r.key[:12]) for r in requests]


# ---------------------------------------------------------------------------- "the same"


@pytest.mark.parametrize("which", ["add", "matmul"])
def test_same_request_twice_same_key(which: str) -> None:
    build = BUILDERS[which]
    first, second = build(), build()
    assert first is not second
    assert first.key == second.key
    assert len(first.key) == 64
    assert int(first.key, 16) >= 0
    assert first == second
    assert hash(first) == hash(second)


def test_dict_order_does_not_matter() -> None:
    base = mm_req()
    reordered = mm_req(
        signature=dict(reversed(list(mm_signature().items()))),
        constexprs=dict(reversed(list(MM_CONSTEXPRS.items()))),
        options={"num_stages": 3, "num_warps": 4},
    )
    assert reordered.key == base.key
    # ... while the very same reordering with one value changed does change it.
    changed = mm_req(
        constexprs=dict(reversed(list({**MM_CONSTEXPRS, "BLOCK_K": 64}.items()))),
        options={"num_stages": 3, "num_warps": 4},
    )
    assert changed.key != base.key


def test_unrelated_module_global_does_not_change_key(monkeypatch: pytest.MonkeyPatch) -> None:
    base = add_req()
    monkeypatch.setattr(kernels, "UNRELATED_SETTING", tl.constexpr(7), raising=False)
    first = add_req()
    monkeypatch.setattr(kernels, "UNRELATED_SETTING", tl.constexpr(8))
    second = add_req()
    # Another kernel of the same module (not called by add_kernel) changing is unrelated too.
    monkeypatch.setattr(kernels, "broken_kernel", kernels.matmul_kernel)
    third = add_req()
    assert base.key == first.key == second.key == third.key


def test_key_is_stable_across_processes(tmp_path: Path) -> None:
    tests_dir = str(Path(__file__).parent)
    script = textwrap.dedent(
        """
        import sys
        from support.basics import add_request
        from support import kernels
        from triton_kiln import CompileRequest
        from test_keys import mm_req
        print(add_request(256, num_warps=8).key)
        print(mm_req().key)
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests_dir, env.get("PYTHONPATH", "")) if p)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out == [add_request(256, num_warps=8).key, mm_req().key]
    assert out[0] != add_request(128, num_warps=8).key  # the subprocess really computed this request's key


# ---------------------------------------------------------------------------- constexprs


def test_add_constexpr_values_and_types() -> None:
    values: list[Any] = [1, True, 1.0, 2, 128, 256, "128", None, (1, 2), [1, 2], tl.constexpr(128)]
    assert_all_distinct([add_req(constexprs={"BLOCK": v}) for v in values])
    # 0 vs False vs 0.0, and 1.5 vs 1.50000001 (float repr, not truncation)
    assert_all_distinct([add_req(constexprs={"BLOCK": v}) for v in (0, False, 0.0, 1.5, 1.50000001)])


@pytest.mark.parametrize("name", list(MM_CONSTEXPRS))
def test_matmul_each_constexpr_changes_key(name: str) -> None:
    base = mm_req()
    value = MM_CONSTEXPRS[name]
    variants = [
        mm_req(constexprs={**MM_CONSTEXPRS, name: v})
        for v in (value * 2, value // 2, float(value), str(value))
    ]
    assert_all_distinct([base, *variants])


def test_matmul_bool_vs_int_constexpr() -> None:
    ones = [mm_req(constexprs={**MM_CONSTEXPRS, "BLOCK_K": v}) for v in (1, True, 1.0)]
    assert_all_distinct(ones)


# ---------------------------------------------------------------------------- options, target, signature


@pytest.mark.parametrize("which", ["add", "matmul"])
@pytest.mark.parametrize(
    "change",
    [
        {"num_warps": 8},
        {"num_warps": 2},
        {"num_stages": 2},
        {"num_stages": 5},
        {"maxnreg": 128},
        {"num_ctas": 2},
        {"enable_fp_fusion": False},
    ],
)
def test_option_change_changes_key(which: str, change: dict[str, Any]) -> None:
    build = BUILDERS[which]
    base = build()
    options = {**base.options, **change}
    assert options != dict(base.options)
    changed = build(options=options)
    assert changed.key != base.key, (dict(base.options), options)
    assert build(options=options).key == changed.key


def test_leaving_an_option_out_changes_key() -> None:
    assert add_req(options={}).key != add_req().key


def test_option_values_are_type_tagged() -> None:
    # an option whose value kiln does not check (num_warps must be an int: test_request_options.py)
    assert_all_distinct([add_req(options={"enable_fp_fusion": v}) for v in (1, 1.0, True, 0)])


def test_all_option_variants_distinct() -> None:
    variants = [
        add_req(options={"num_warps": w, "num_stages": s, "maxnreg": r})
        for w in (2, 4, 8)
        for s in (2, 3)
        for r in (128, 255)
    ]
    assert_all_distinct(variants)


@pytest.mark.parametrize("which", ["add", "matmul"])
def test_target_changes_key(which: str) -> None:
    build = BUILDERS[which]
    sm80 = build(target=GPUTarget("cuda", 80, 32))
    sm90 = build(target=GPUTarget("cuda", 90, 32))
    sm90_again = build(target=GPUTarget("cuda", 90, 32))
    assert sm80.key != sm90.key
    assert sm90.key == sm90_again.key


def test_signature_changes_key() -> None:
    base = add_req()
    variants = [
        add_req(signature={**ADD_SIG, "x_ptr": "*fp16"}),
        add_req(signature={**ADD_SIG, "out_ptr": "*bf16"}),
        add_req(signature={**ADD_SIG, "n": "i64"}),
        add_req(signature={**ADD_SIG, "n": "constexpr"}, constexprs={"BLOCK": 128, "n": 1024}),
    ]
    assert_all_distinct([base, *variants])
    assert mm_req(signature=mm_signature("*fp32")).key != mm_req().key


def test_attrs_change_key() -> None:
    base = add_req()
    aligned = add_req(attrs={"x_ptr": [["tt.divisibility", 16]]})
    aligned_other = add_req(attrs={"y_ptr": [["tt.divisibility", 16]]})
    assert_all_distinct([base, aligned, aligned_other])
    assert add_req(attrs={"x_ptr": [["tt.divisibility", 16]]}).key == aligned.key


# ---------------------------------------------------------------------------- kernel identity

HELPER_MODULE = """
import triton
import triton.language as tl
{pad}

@triton.jit
def helper(x):
    return {expr}


@triton.jit
def kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs, mask=mask)), mask=mask)
"""


def helper_module(tmp_path: Path, name: str, expr: str, pad: str = "") -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(HELPER_MODULE.format(expr=expr, pad=pad))
    return load_file(path, name)


@pytest.fixture
def module_names() -> Iterator[None]:
    """Forget the test modules imported from tmp_path afterwards."""
    yield
    for name in [n for n in sys.modules if n.startswith("kiln_keytest_")]:
        del sys.modules[name]


def kernel_req(module: ModuleType) -> CompileRequest:
    return CompileRequest(module.kernel, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 64}, target=SM90)


@pytest.mark.usefixtures("module_names")
def test_helper_source_changes_key(tmp_path: Path) -> None:
    times_two = helper_module(tmp_path, "kiln_keytest_a", "x * 2")
    times_three = helper_module(tmp_path, "kiln_keytest_b", "x * 3")
    a, b = kernel_req(times_two), kernel_req(times_three)
    # Same kernel source, same line numbers: only the helper's body differs.
    assert a.spec.src == b.spec.src
    assert a.spec.first_line == b.spec.first_line
    assert a.key != b.key


@pytest.mark.usefixtures("module_names")
def test_helper_of_helper_source_changes_key(tmp_path: Path) -> None:
    nested = HELPER_MODULE.replace("return {expr}", "return inner(x)").replace(
        "{pad}", "@triton.jit\ndef inner(x):\n    return {expr}\n"
    )
    keys = []
    for name, expr in (("kiln_keytest_n1", "x + 1"), ("kiln_keytest_n2", "x - 1")):
        path = tmp_path / f"{name}.py"
        path.write_text(nested.format(expr=expr))
        keys.append(kernel_req(load_file(path, name)).key)
    assert keys[0] != keys[1]


@pytest.mark.usefixtures("module_names")
def test_kernel_line_change_changes_key(tmp_path: Path) -> None:
    top = helper_module(tmp_path, "kiln_keytest_l1", "x * 2")
    lower = helper_module(tmp_path, "kiln_keytest_l2", "x * 2", pad="\n\n\n")
    a, b = kernel_req(top), kernel_req(lower)
    assert a.spec.src == b.spec.src
    assert a.spec.first_line != b.spec.first_line
    assert a.key != b.key


def test_global_constexpr_value_changes_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # kernels.SCALE is read by the helper `double`, which add_kernel calls.
    assert kernels.SCALE.value == 2
    base = add_req()
    monkeypatch.setattr(kernels, "SCALE", tl.constexpr(3))
    three = add_req()
    monkeypatch.setattr(kernels, "SCALE", tl.constexpr(2.0))
    two_float = add_req()
    monkeypatch.setattr(kernels, "SCALE", tl.constexpr(2))
    back = add_req()
    assert_all_distinct([base, three, two_float])
    assert back.key == base.key


def test_matmul_kernel_does_not_depend_on_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    base = mm_req()
    monkeypatch.setattr(kernels, "SCALE", tl.constexpr(3))
    assert mm_req().key == base.key  # matmul_kernel never reads SCALE


# ---------------------------------------------------------------------------- validation


def test_unknown_option_raises() -> None:
    with pytest.raises(RequestError, match="num_warp") as info:
        add_req(options={"num_warp": 4})
    assert "num_warps" in str(info.value)  # lists what Triton accepts
    with pytest.raises(RequestError, match="block_size"):
        mm_req(options={"num_warps": 4, "block_size": 3})


def test_missing_signature_args_raise() -> None:
    sig = dict(ADD_SIG)
    del sig["n"]
    with pytest.raises(RequestError, match=r"missing \['n'\]"):
        add_req(signature=sig)
    sig = mm_signature()
    del sig["stride_cn"]
    with pytest.raises(RequestError, match="stride_cn"):
        mm_req(signature=sig)


def test_unknown_signature_arg_raises() -> None:
    with pytest.raises(RequestError, match="z_ptr"):
        add_req(signature={**ADD_SIG, "z_ptr": "*fp32"})


def test_constexpr_not_an_argument_raises() -> None:
    with pytest.raises(RequestError, match="BLOCK_SIZE"):
        add_req(constexprs={"BLOCK": 128, "BLOCK_SIZE": 64})
    with pytest.raises(RequestError, match="BLOCK_Q"):
        mm_req(constexprs={**MM_CONSTEXPRS, "BLOCK_Q": 16})


def test_constexpr_without_value_raises() -> None:
    with pytest.raises(RequestError, match="BLOCK"):
        add_req(constexprs={})


@pytest.mark.skipif(gpu_available(), reason="a GPU is present: target=None means the local GPU")
def test_no_target_without_gpu_raises() -> None:
    with pytest.raises(TargetError, match="no GPU") as info:
        add_req(target=None)
    assert "GPUTarget" in str(info.value)  # says how to fix it

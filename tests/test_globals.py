"""Globals exactly as Triton sees them: whatever a kernel's source and signature name (parameter
defaults, module and imported constants, aliases, ``tl.constexpr`` globals, ``@jit`` helpers of
other modules, aliases of ``triton.language``) resolves in a worker to what Triton resolves in
the caller, and a global that cannot travel is a clear error before any compile.

The kernels are those of ``tests/support/globals_pkg`` (a package, as libraries are), one defined in a
function body (sent by source) and one in a ``__main__`` script. Each compiles through the pool
to the binary Triton compiles from the original kernel in this process, for the constexprs
``kiln.autotune`` binds from the call exactly as Triton's JIT does (defaults included).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import triton
import triton.language as tl
from triton import language as lang

import triton_kiln as kiln
from support.basics import SM90, is_cubin
from support.globals_pkg import config, kernels, lazy_kernels
from support.globals_pkg.config import QUANT_GROUP
from support.globals_pkg.helpers import group_scale
from triton_kiln import CompileRequest, KernelSpecError, triton_compat
from triton_kiln.autotuner.compile_requests import request_for

torch = pytest.importorskip("torch")

TESTS_DIR = Path(__file__).resolve().parent


def make_local_kernel() -> Any:
    """A kernel in a function body (not importable: it travels by source) naming the test
    module's imported globals in its signature only."""

    @triton.jit
    def local_defaults(
        x_ptr,
        n,
        BLOCK: lang.constexpr,
        GROUP: tl.constexpr = QUANT_GROUP,
        GATE: tl.constexpr = config.RCP_LN2,
    ):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, group_scale(x) * GATE + GROUP, mask=offs < n)

    return local_defaults


KERNELS: dict[str, Callable[[], Any]] = {
    "imported_default": lambda: kernels.imported_default,
    "module_default": lambda: kernels.module_default,
    "aliased_default": lambda: kernels.aliased_default,
    "attribute_default": lambda: kernels.attribute_default,
    "expression_default": lambda: kernels.expression_default,
    "constexpr_global": lambda: kernels.constexpr_global,
    "helper_default": lambda: kernels.helper_default,
    "language_alias": lambda: kernels.language_alias,
    "shadowing_default": lambda: kernels.shadowing_default,
    "lazy_annotations": lambda: lazy_kernels.lazy_annotations,
    "local_defaults": make_local_kernel,
}
# The parameter each kernel leaves to its default, and the value Triton binds.
DEFAULTED = {
    "imported_default": ("GROUP", 64),
    "module_default": ("GROUP", 16),
    "aliased_default": ("GROUP", 64),
    "attribute_default": ("GROUP", 64),
    "expression_default": ("GATE", 2.0 * config.RCP_LN2),
    "constexpr_global": ("FACTOR", 3.0),
    "language_alias": ("GROUP", 64),
    "shadowing_default": ("QUANT_GROUP", 64),
    "lazy_annotations": ("GROUP", 64),
    "local_defaults": ("GROUP", 64),
}


def signature_as_triton_sees_it(fn: Any) -> list[tuple[Any, ...]]:
    """Each parameter as Triton's JIT reads it: name, annotation, constexpr-ness, default."""
    python_fn = fn.fn
    return [
        (p.name, p.annotation, p.is_constexpr, p.has_default, repr(p.default) if p.has_default else None)
        for p in fn.params
    ] + [(python_fn.__defaults__, python_fn.__kwdefaults__, python_fn.__annotations__)]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_rebuilt_kernel_has_the_callers_signature(name: str) -> None:
    kernel = KERNELS[name]()
    spec = CompileRequest(kernel, {"x_ptr": "*fp32", "n": "i32"}, all_constexprs(kernel), target=SM90).spec
    assert spec.by_source  # every global is data: the worker rebuilds it, never imports it
    rebuilt = spec.load()  # what a worker does
    assert rebuilt is not kernel
    assert signature_as_triton_sees_it(rebuilt) == signature_as_triton_sees_it(kernel)
    helpers = [helper for helper, (kind, _) in spec.globals if kind == "jit"]
    for helper in helpers:  # and so have the @jit helpers that travel with it
        original, copy = kernel.fn.__globals__[helper], rebuilt.__globals__[helper]
        assert signature_as_triton_sees_it(copy) == signature_as_triton_sees_it(original)


def all_constexprs(kernel: Any) -> dict[str, Any]:
    """Every constexpr parameter's value, BLOCK=128 and the rest at their defaults."""
    values = {}
    for param in kernel.params:
        if param.is_constexpr:
            values[param.name] = param.default if param.has_default else 128
    return values


def configs_for(name: str) -> list[Any]:
    blocks = (64, 128) if name == "imported_default" else (128,)
    return [kiln.Config({"BLOCK": block}, num_warps=4) for block in blocks]


def tritons_own_binary(request: CompileRequest, kernel: Any, cache: Path) -> bytes:
    """Triton's own compile of the original kernel for this request's specialization, in this
    process, on a Triton cache of its own (the pool's workers cannot answer it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(cache))
        compiled = triton_compat.compile_kernel(request.ast_source(kernel), SM90, dict(request.options))
    binary: bytes = compiled.asm["cubin"]
    return binary


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_autotuned_kernel_compiles_in_the_pool_to_tritons_own_binary(
    name: str, make_pool: Any, tmp_path: Path
) -> None:
    kernel = KERNELS[name]()
    pool = make_pool(workers=1)
    configs = configs_for(name)
    tuner = kiln.autotune(configs, key=["n"], pool=pool, target=SM90, database=False)(kernel)
    n = 4096
    x = torch.randn(n)
    # The compiles kiln.autotune starts for a call, built as its run builds them.
    futures = kiln.precompile(tuner, x, n)
    artifacts = [future.result(timeout=180) for future in futures]
    assert len(artifacts) == len(configs)
    for config_, artifact in zip(configs, artifacts, strict=True):
        request, _ = request_for(kernel, config_, (x, n), {}, SM90)
        if name in DEFAULTED:  # the default, bound as Triton's JIT binds it
            param, value = DEFAULTED[name]
            assert request.constexprs[param] == value
        assert pool.compile(request).binary == artifact.binary  # the same request the tuner sent
        assert is_cubin(artifact.binary)
        assert artifact.binary == tritons_own_binary(request, kernel, tmp_path / "direct-triton-cache")


MAIN_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import triton
    import triton.language as tl
    from triton import language as lang

    from support.globals_pkg import config
    from support.globals_pkg.config import QUANT_GROUP as QG
    from support.globals_pkg.helpers import group_scale as scale_by_group
    from triton_kiln import CompilePool, CompileRequest, GPUTarget, triton_compat

    SM90 = GPUTarget("cuda", 90, 32)


    @triton.jit
    def main_defaults(
        x_ptr, n, BLOCK: lang.constexpr, GROUP: tl.constexpr = QG, GATE: tl.constexpr = config.RCP_LN2
    ):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, scale_by_group(x) * GATE + GROUP, mask=offs < n)


    if __name__ == "__main__":
        defaults = {p.name: p.default for p in main_defaults.params if p.has_default}
        constexprs = {"BLOCK": 128, **defaults}
        request = CompileRequest(main_defaults, {"x_ptr": "*fp32", "n": "i32"}, constexprs, target=SM90)
        assert not request.spec.importable
        with CompilePool(workers=1, cache_dir=sys.argv[1]) as pool:
            artifact = pool.compile(request, timeout_s=90)
        os.environ["TRITON_CACHE_DIR"] = sys.argv[2]  # Triton's own compile, on a cache of its own
        direct = triton_compat.compile_kernel(request.ast_source(main_defaults), SM90, {})
        print("module", request.spec.module)
        print("group", constexprs["GROUP"])
        print("same", artifact.binary == direct.asm["cubin"])
    """
)


@pytest.mark.timeout(180)
def test_kernel_defined_in_main_with_imported_defaults(tmp_path: Path) -> None:
    script = tmp_path / "main_defaults_script.py"
    script.write_text(MAIN_SCRIPT)
    env = dict(os.environ)
    src = str(TESTS_DIR.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "cache"), str(tmp_path / "direct-triton-cache")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines == {"module": "__main__", "group": "64", "same": "True"}


# ---------------------------------------------------------------------------- defaults as Python made them

REBOUND_MODULE = """
import triton
import triton.language as tl

QUANT = {defined}


@triton.jit
def helper(x, G: tl.constexpr = QUANT):
    return x * G


@triton.jit
def kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs)))


QUANT = {rebound}  # after the def: the helper's default stays what it was
"""


@pytest.fixture
def load_module(tmp_path: Path) -> Iterator[Callable[[str, str], ModuleType]]:
    """Import a module written to tmp_path; forget it afterwards."""
    names: list[str] = []

    def load(name: str, text: str) -> ModuleType:
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        names.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in names:
        sys.modules.pop(name, None)


def rebound_request(module: ModuleType) -> CompileRequest:
    return CompileRequest(module.kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}, {"num_warps": 4}, SM90)


def test_a_helpers_default_value_is_part_of_the_key(load_module: Callable[[str, str], ModuleType]) -> None:
    # Same sources, same lines: only the constant a helper's default names differs.
    sixty_four = load_module("kiln_globals_q64", REBOUND_MODULE.format(defined=64, rebound=64))
    thirty_two = load_module("kiln_globals_q32", REBOUND_MODULE.format(defined=32, rebound=32))
    a, b = rebound_request(sixty_four), rebound_request(thirty_two)
    assert (a.spec.src, a.spec.first_line) == (b.spec.src, b.spec.first_line)
    assert a.key != b.key


@pytest.mark.timeout(120)
def test_a_default_keeps_the_value_python_gave_it_at_the_def(
    make_pool: Any, tmp_path: Path, load_module: Callable[[str, str], ModuleType]
) -> None:
    module = load_module("kiln_globals_rebound", REBOUND_MODULE.format(defined=64, rebound=32))
    assert module.helper.fn.__defaults__ == (64,)
    request = rebound_request(module)
    assert request.spec.by_source
    artifact = make_pool(workers=1).compile(request, timeout_s=90)
    direct = tritons_own_binary(request, module.kernel, tmp_path / "direct-triton-cache")
    assert artifact.binary == direct
    assert "0f42800000" in artifact.asm["ptx"]  # x * 64.0: Triton bound the helper's default, 64
    assert "0f42000000" not in artifact.asm["ptx"]  # not the 32 the name holds now


# ---------------------------------------------------------------------------- globals that cannot travel


class QuantSettings:
    """An arbitrary object: not a constexpr, dtype, plain value, module or @jit function."""

    def __repr__(self) -> str:
        return "QuantSettings()"


SETTINGS = QuantSettings()


def make_unshippable_default_kernel() -> Any:
    @triton.jit
    def settings_default(x_ptr, n, BLOCK: tl.constexpr, SETTINGS_ARG: tl.constexpr = SETTINGS):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, 1.0, mask=offs < n)

    return settings_default


@pytest.mark.timeout(60)
def test_a_default_that_cannot_travel_is_an_error_before_any_compile(make_pool: Any) -> None:
    kernel = make_unshippable_default_kernel()
    pool = make_pool(workers=1, start=False)
    request = CompileRequest(
        kernel, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 64, "SETTINGS_ARG": SETTINGS}, target=SM90
    )
    assert not request.spec.by_source
    with pytest.raises(KernelSpecError) as info:
        pool.submit(request)
    text = str(info.value)
    assert "settings_default" in text
    assert "'SETTINGS'" in text  # the global, by name
    assert "SETTINGS_ARG" in text  # the parameter whose default it is
    assert "importable module" in text  # what to do
    assert pool.stats.dispatched == 0
    assert pool.worker_pids() == []
    assert pool.zygote_pid is None


@pytest.mark.timeout(60)
def test_autotune_reports_it_once_not_as_a_compile_error_per_config(make_pool: Any) -> None:
    pool = make_pool(workers=1, start=False)
    configs = [kiln.Config({"BLOCK": block}, num_warps=4) for block in (64, 128)]
    tuner = kiln.autotune(configs, key=["n"], pool=pool, target=SM90, database=False)(
        make_unshippable_default_kernel()
    )
    with pytest.raises(KernelSpecError, match=r"'SETTINGS'"):
        kiln.precompile(tuner, torch.randn(256), 256)
    assert pool.stats.dispatched == 0
    assert pool.zygote_pid is None


SCALE_FOR_BATCH = 2


@triton.jit
def _batch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE_FOR_BATCH, mask=offs < n)


def test_a_batch_describes_a_kernel_once_and_only_inside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton_kiln.compile.kernel_spec import KernelSpec

    with KernelSpec.batch():
        first = KernelSpec.of(_batch_kernel)
        assert KernelSpec.of(_batch_kernel) is first  # the configs of one kernel: read once
    monkeypatch.setattr(sys.modules[__name__], "SCALE_FOR_BATCH", 3)
    after = KernelSpec.of(_batch_kernel)  # outside a batch the globals are read again
    assert after is not first
    assert dict(after.globals)["SCALE_FOR_BATCH"] != dict(first.globals)["SCALE_FOR_BATCH"]
    with KernelSpec.batch():
        with pytest.raises(KernelSpecError):
            KernelSpec.of(object())
        assert KernelSpec.of(_batch_kernel) == after

"""The Helion abort hook (``helion_faults.py``) on every supported Triton, without Helion: a
pool that preloads it aborts, in a worker, the compiles of kernels named as Helion names the
marked ones, and compiles the rest; installing it in this process keeps Triton's own compiles
working (Triton 3.7 also calls the hook with no arguments, for its cache key); and no test
module touches Triton's stage hook when pytest imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl

from support import faults, helion_faults
from support.basics import SM90, is_cubin
from triton_kiln import CompileRequest, WorkerCrashedError

TESTS = Path(__file__).resolve().parent


@triton.jit
def _helion_crashall_probe(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def _helion_crashy_probe(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def _helion_healthy_probe(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def _request(kernel: Any, num_warps: int) -> CompileRequest:
    return CompileRequest(kernel, {"x_ptr": "*fp32"}, {"BLOCK": 128}, {"num_warps": num_warps}, SM90)


@pytest.fixture
def helion_hook() -> Iterator[None]:
    """The Helion abort hook, installed in this process for one test, then removed."""
    helion_faults.install()
    yield
    helion_faults.uninstall()


def test_hook_aborts_only_marked_configs() -> None:
    assert helion_faults.should_abort("_helion_crashall_add", 4)
    assert helion_faults.should_abort("_helion_crashy_add", helion_faults.ABORT_NUM_WARPS)
    assert not helion_faults.should_abort("_helion_crashy_add", helion_faults.ABORT_NUM_WARPS * 2)
    assert not helion_faults.should_abort("_helion_add", helion_faults.ABORT_NUM_WARPS)


@pytest.mark.timeout(120)
def test_preloaded_hook_aborts_marked_compiles_in_workers_only(make_pool: Any) -> None:
    pool = make_pool(workers=2, preload=[helion_faults.PRELOAD])
    abort_warps = helion_faults.ABORT_NUM_WARPS
    crash_all = pool.submit(_request(_helion_crashall_probe, 4))
    crash_marked = pool.submit(_request(_helion_crashy_probe, abort_warps))
    unmarked = pool.submit(_request(_helion_crashy_probe, abort_warps * 2))
    healthy = pool.submit(_request(_helion_healthy_probe, abort_warps))
    for future in (crash_all, crash_marked):
        exc = future.exception(timeout=90)
        assert isinstance(exc, WorkerCrashedError), repr(exc)
        assert exc.signal_name == "SIGABRT"
        assert faults.ASSERTION_TEXT in str(exc)
    assert is_cubin(unmarked.result(timeout=90).binary)
    assert is_cubin(healthy.result(timeout=90).binary)
    assert pool.stats.worker_deaths >= 2


def test_installed_hook_keeps_in_process_compiles_working(helion_hook: None) -> None:
    """Triton 3.6 calls the hook with the stage table, 3.7 also with no arguments (for its cache
    key): a hook of the wrong form breaks every compile in the process (this one included)."""
    source = triton.compiler.ASTSource(
        _helion_healthy_probe, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64}
    )
    compiled = triton.compile(source, target=SM90, options={"num_warps": 4})
    assert is_cubin(compiled.asm["cubin"])


# Imports every test module (as pytest's collection does) in a fresh interpreter and reports the
# ones after whose import Triton's stage hook is not what the helpers (faults.py) left.
_IMPORT_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    import pytest, triton
    from triton.backends import backends

    def state():
        runtime = triton.knobs.runtime
        return (getattr(runtime, "add_stages_inspection_hook", None),
                [b.compiler.add_stages for b in backends.values()])

    from support import faults  # installs its hooks at import by design (workers import it with its kernels)
    before = state()
    changed, skipped = [], []
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except (ImportError, pytest.skip.Exception):
            skipped.append(name)
            continue
        if state() != before:
            changed.append(name)
            before = state()
    print("REPORT " + json.dumps({"changed": changed, "skipped": skipped}))
    """
)


@pytest.mark.timeout(240)
def test_no_test_module_changes_the_stage_hook_at_import() -> None:
    modules = sorted(p.stem for p in TESTS.glob("test_*.py"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), *sys.path]))
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, *modules],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, f"the probe printed no report (exit {out.returncode}):\n{out.stderr[-3000:]}"
    report = json.loads(line[len("REPORT ") :])
    assert report["changed"] == [], (
        f"{report['changed']} change Triton's stage hook when imported: install hooks in a fixture "
        f"(or a preload module) through triton_kiln.triton_compat.install_stages_hook"
    )

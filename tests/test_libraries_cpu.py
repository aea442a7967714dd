"""Real libraries import with kiln in place of ``triton.autotune`` (no GPU needed).

Liger-Kernel 0.8.5 and fla-core 0.6.0 are imported in a fresh interpreter after
``triton.autotune`` was routed to kiln (``kiln.install()`` once kiln has it; until then by
assigning ``kiln.autotune`` to ``triton.autotune``, ``triton.runtime.autotune`` and
``triton.runtime.autotuner.autotune``), and every autotuned kernel the libraries' modules hold
is inventoried: which class built it, and whether it is kiln's. Skipped when a library is not
installed. FLA stacks ``@triton.autotune`` over ``@triton.heuristics`` and builds 55 kernels with
its own ``CachedAutotuner`` (a subclass of Triton's ``Autotuner``, defined after ``kiln.install()``):
every one of them must be kiln's.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

_PROBE = textwrap.dedent(
    """
    import json, sys, importlib
    report = {"error": None, "kernels": []}
    try:
        import triton_kiln as kiln
        if hasattr(kiln, "install"):
            kiln.install()
            report["install"] = "kiln.install()"
        else:
            import triton, triton.runtime, triton.runtime.autotuner as autotuner_mod
            triton.autotune = triton.runtime.autotune = autotuner_mod.autotune = kiln.autotune
            report["install"] = "assignment"
        for name in sys.argv[1:]:
            importlib.import_module(name)
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface
    import triton_kiln as kiln
    seen = set()
    prefixes = tuple(name.split(".")[0] for name in sys.argv[1:])
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        for value in list(vars(module).values()):
            obj = value
            while isinstance(obj, KernelInterface):
                if isinstance(obj, Autotuner) and id(obj) not in seen:
                    seen.add(id(obj))
                    cls = type(obj)
                    report["kernels"].append({
                        "name": f"{obj.base_fn.__module__}.{obj.base_fn.__qualname__}",
                        "class": f"{cls.__module__}.{cls.__qualname__}",
                        "kiln": isinstance(obj, kiln.Autotuner),
                    })
                obj = getattr(obj, "fn", None)
    print("REPORT " + json.dumps(report))
    """
)


@functools.cache
def import_report(*modules: str) -> dict[str, Any]:
    """Import ``modules`` with kiln routed in, in a fresh interpreter; its inventory as a dict."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, f"the probe printed no report (exit {out.returncode}):\n{out.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(line[len("REPORT ") :])
    return report


def _needs(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install liger-kernel==0.8.5 fla-core==0.6.0)")


def _not_on_kiln(report: dict[str, Any]) -> list[str]:
    return [f"{k['name']} ({k['class']})" for k in report["kernels"] if not k["kiln"]]


def test_liger_ops_import_with_every_autotuned_kernel_on_kiln() -> None:
    _needs("liger_kernel")
    report = import_report("liger_kernel.ops")
    assert report["error"] is None, report["error"]
    # Liger 0.8.5 autotunes dyt, fused MoE (6 kernels), the SwiGLU MLP (3) and more.
    names = {k["name"].rsplit(".", 1)[-1] for k in report["kernels"]}
    assert {
        "_dyt_fwd_kernel",
        "_dyt_bwd_kernel",
        "_swiglu_kernel_forward",
        "_fused_up_proj_swiglu_kernel",
    } <= names
    assert not _not_on_kiln(report), _not_on_kiln(report)


def test_fla_ops_and_modules_import_with_kiln() -> None:
    _needs("fla")
    report = import_report("fla.ops", "fla.modules")
    assert report["error"] is None, report["error"]
    assert len(report["kernels"]) > 150


def test_fla_autotuned_kernels_all_on_kiln_subclasses_included() -> None:
    _needs("fla")
    report = import_report("fla.ops", "fla.modules")
    assert report["error"] is None, report["error"]
    assert any(k["class"].endswith("CachedAutotuner") for k in report["kernels"]), "no CachedAutotuner found"
    assert not _not_on_kiln(report), _not_on_kiln(report)


def test_fla_imports_without_kiln() -> None:
    """The baseline: FLA imports here on Triton alone (so a failure above is kiln's, not FLA's)."""
    _needs("fla")
    out = subprocess.run(
        [sys.executable, "-c", "import fla.ops, fla.modules"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]

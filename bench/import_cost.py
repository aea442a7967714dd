"""What ``import triton_kiln``, ``kiln.install()`` and decorating Liger's and FLA's kernels cost.

Run from the repository root (no GPU needed)::

    python bench/import_cost.py                    # 5 processes per arm, JSON then a table
    python bench/import_cost.py --repeats 1 --out a.json

Each process is fresh and imports ``liger_kernel.ops``, ``fla.ops`` and ``fla.modules`` (those
installed; every autotuned kernel they hold is defined at import): arm ``triton`` on stock
Triton, arm ``kiln`` after ``import triton_kiln`` and ``kiln.install()`` (every one of those
kernels kiln's). Per arm: the median wall seconds of the imports (``import_s``; ``kiln`` and
``install_s`` are the kiln arm's own parts), the processes started (Python's audit events for
``subprocess.Popen``, ``os.fork``, ``os.posix_spawn``: 0 expected), whether kiln's C launcher was
loaded (no: it loads at the first call) and how many autotuned kernels kiln holds. The arms
alternate, so machine load falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("liger_kernel.ops", "fla.ops", "fla.modules")

_CHILD = textwrap.dedent(
    """
    import importlib, json, sys, time
    started = []
    def audit(event, args):
        if event in ("subprocess.Popen", "os.fork", "os.posix_spawn", "os.forkpty"):
            started.append(event + (" " + repr(args[0]) if event == "subprocess.Popen" else ""))
    sys.addaudithook(audit)
    arm = sys.argv[1]
    report = {"arm": arm}
    began = time.perf_counter()
    import torch, triton  # both arms: their cost is not kiln's
    report["torch_triton_s"] = time.perf_counter() - began
    mark = time.perf_counter()
    if arm == "kiln":
        import triton_kiln as kiln
        report["kiln_import_s"] = time.perf_counter() - mark
        mark2 = time.perf_counter()
        kiln.install()
        report["install_s"] = time.perf_counter() - mark2
    modules = []
    for name in sys.argv[2:]:
        try:
            importlib.import_module(name)
            modules.append(name)
        except ImportError:
            pass
    report["import_s"] = time.perf_counter() - mark
    report["modules"] = modules
    report["started"] = started
    if arm == "kiln":
        from triton_kiln.launch import native
        report["launcher_loaded"] = native._module is not None
        seen = set()
        for m in list(sys.modules.values()):
            if m is None or not m.__name__.startswith(("liger_kernel", "fla")):
                continue
            for value in list(vars(m).values()):
                obj = value
                while isinstance(obj, triton.runtime.KernelInterface):
                    if isinstance(obj, kiln.Autotuner):
                        seen.add(id(obj))
                    obj = getattr(obj, "fn", None)
        report["kiln_kernels"] = len(seen)
    print("REPORT " + json.dumps(report), flush=True)
    """
)


def one(arm: str, timeout_s: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("KILN_AUTOTUNE", None)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, arm, *MODULES],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("REPORT ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(
            f"bench/import_cost.py: the {arm} process failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    report: dict[str, Any] = json.loads(line[len("REPORT ") :])
    return report


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {"processes": len(runs), "modules": runs[0]["modules"]}
    for field in ("import_s", "torch_triton_s", "kiln_import_s", "install_s"):
        values = [r[field] for r in runs if field in r]
        if values:
            data[field] = round(statistics.median(values), 3)
    data["started"] = sorted({s for r in runs for s in r["started"]})
    if "launcher_loaded" in runs[0]:
        data["launcher_loaded"] = any(r["launcher_loaded"] for r in runs)
        data["kiln_kernels"] = runs[0]["kiln_kernels"]
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="processes per arm")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    runs: dict[str, list[dict[str, Any]]] = {"triton": [], "kiln": []}
    for _ in range(args.repeats):
        for arm, done in runs.items():
            done.append(one(arm, args.timeout))
    result = {"arms": {arm: summary(r) for arm, r in runs.items()}}
    stock, kiln = result["arms"]["triton"], result["arms"]["kiln"]
    result["kiln_extra_s"] = round(kiln["import_s"] - stock["import_s"], 3)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(
        f"\nimports of {', '.join(stock['modules']) or 'no library'}: stock {stock['import_s']:.2f} s, "
        f"with kiln {kiln['import_s']:.2f} s (import triton_kiln {kiln.get('kiln_import_s', 0):.2f} s, "
        f"install() {kiln.get('install_s', 0):.3f} s; {kiln.get('kiln_kernels', 0)} kernels kiln's); "
        f"processes started: {len(kiln['started'])}; launcher loaded: {kiln.get('launcher_loaded')}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a kiln arm's first call of a ``bench/realworld.py`` op spends its wall time (GPU).

::

    python bench/first_call_timeline.py --op liger_moe_fwd --out /tmp/tl   # fresh caches
    python bench/first_call_timeline.py --op liger_moe_fwd --out /tmp/tl --keep   # again, warm

As the ``kiln`` arm of ``bench/realworld.py`` (fresh ``TRITON_CACHE_DIR``/``KILN_CACHE_DIR``,
``kiln.install()`` before the library's import), then the first call under ``cProfile`` with
kiln's DEBUG log (milliseconds since the process started) and a timeline of the calls that
matter (plain JIT compiles, tuning runs, launches, the launcher's build, pool start): each
``name thread start_s dur_s`` since the first call began. Writes ``timeline.txt``,
``profile.txt`` (cumulative and own time) and ``kiln.log`` under ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import logging
import os
import pstats
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

T0 = time.perf_counter()
EVENTS: list[tuple[str, str, float, float]] = []

WATCHED = (
    "triton_kiln.routing.jit._compile_in_pool",
    "triton_kiln.autotuner.session.TuningSession.tune",
    "triton_kiln.autotuner.session.TuningSession.compile",
    "triton_kiln.autotuner.session.TuningSession.final_round",
    "triton_kiln.autotuner.session.make_bencher",
    "triton_kiln.autotuner.session.apply_rule",
    "triton.runtime.jit.JITFunction._do_compile",
    "triton_kiln.triton_compat.seed_caller_triton_key",
    "triton_kiln.autotuner.autotuner.Autotuner._run",
    "triton_kiln.autotuner.autotuner.Autotuner.prune_configs",
    "triton_kiln.autotuner.launch_tables.Variants.launch",
    "triton_kiln.launch.native.native",
    "triton_kiln.launch.native_build.build",
    "triton_kiln.pool.pool.CompilePool.start",
    "triton_kiln.pool.pool.CompilePool.wait_ready",
    "triton_kiln.sandbox.registry.prestart",
    "triton_kiln.sandbox.native_client.NativeSandbox.start",
    "triton_kiln.sandbox.native_client.NativeSandbox._ensure_ready",
    "triton_kiln.triton_compat.triton_key",
    "triton.compiler.compiler.compile",
)


def _wrap(path: str) -> None:
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:-1]:
            owner = getattr(owner, attr, None)
        if owner is None or not hasattr(owner, parts[-1]):
            print(f"timeline: {path} not found", file=sys.stderr)
            return
        original = getattr(owner, parts[-1])

        @functools.wraps(original)
        def timed(*args: Any, __orig: Any = original, __name: str = path, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return __orig(*args, **kwargs)
            finally:
                EVENTS.append((__name, threading.current_thread().name, began, time.perf_counter() - began))

        setattr(owner, parts[-1], timed)
        return


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--op", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/kiln-timeline"), help="cache root")
    parser.add_argument("--keep", action="store_true", help="keep the kiln cache (a second process)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import realworld_ops

    op = realworld_ops.OPS[args.op]
    root = args.cache / args.op
    os.environ.update(op.env)
    os.environ["TRITON_CACHE_DIR"] = str(root / f"triton-{time.time_ns()}")  # always fresh, as the arms
    os.environ["KILN_CACHE_DIR"] = str(root / "kiln")
    os.environ["KILN_TUNING_DB"] = str(root / "kiln" / "tuning.sqlite3")
    os.environ.setdefault("KILN_PROGRESS", "0")
    if not args.keep and (root / "kiln").exists():
        import shutil

        shutil.rmtree(root / "kiln")
    handler = logging.FileHandler(args.out / ("kiln-keep.log" if args.keep else "kiln.log"))
    handler.setFormatter(logging.Formatter("%(relativeCreated)8.0f %(threadName)s %(name)s %(message)s"))
    logging.getLogger("kiln").addHandler(handler)
    logging.getLogger("kiln").setLevel(logging.DEBUG)
    import triton_kiln as kiln

    for path in WATCHED:
        _wrap(path)
    kiln.install()
    began = time.perf_counter()
    for module in op.modules:
        importlib.import_module(module)
    import_s = time.perf_counter() - began
    import torch

    torch.manual_seed(0)
    case = op.build()
    torch.cuda.synchronize()
    logging.getLogger("kiln").info("timeline: first call starts")
    profile = cProfile.Profile()
    t_first = time.perf_counter()
    profile.enable()
    case.run()
    torch.cuda.synchronize()
    profile.disable()
    first_s = time.perf_counter() - t_first
    logging.getLogger("kiln").info("timeline: first call ends")
    tag = "-keep" if args.keep else ""
    lines = [f"op {args.op} import_s {import_s:.2f} first_s {first_s:.3f} (keep={args.keep})"]
    for name, thread, start, dur in sorted(EVENTS, key=lambda e: e[2]):
        lines.append(f"{start - t_first:9.3f} {dur:8.3f} {thread:14s} {name}")
    (args.out / f"timeline{tag}.txt").write_text("\n".join(lines) + "\n")
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("cumulative").print_stats(70)
    stats.sort_stats("tottime").print_stats(40)
    (args.out / f"profile{tag}.txt").write_text(text.getvalue())
    print("\n".join(lines[:80]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

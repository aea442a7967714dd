"""Ranks of one node: N processes started together on one GPU, tuning the same kernel.

Run from the repository root on a machine with a GPU (fresh caches every case; one run)::

    python bench/ranks.py --processes 8 --out /tmp/ranks.json

Arms, each in two cases (1 lone process, then N processes started together), every case from a
fresh Triton cache, kiln cache and tuning database shared by its processes (as ranks of one job
share them on a node):

* ``kiln``: ``kiln.autotune`` with its defaults (node sharing on: one compile per config on the
  node, one process tunes, the others adopt its run);
* ``triton``: ``triton.autotune`` as shipped (compiles counted with Triton's compilation listener,
  cache misses only).

Each process builds its inputs and its tuned kernel, prints ``READY``, waits for a go-file and
times its first call (synchronized): tuning included. It reports that time, its chosen config
and how many compiles it ran. One row per arm and case: ``arm``, ``processes``, ``gpus``,
``configs``, ``compiles_total``, ``lone_first_s``, ``first_s_max``, ``same_choice`` (plus each
process's numbers). The issue's bar: kiln's 8 processes compile 72 in all, each first call
<= 1.3x the lone process's, and all choose the same config.

``--op liger_moe_fwd --gpus 2`` (or ``fla_chunk_gla_fwd``: ops of ``bench/realworld_ops.py``, the
library installed) is the issue's two-GPU case: per arm, one rank alone on GPU 0, then two ranks
started together, each on its own GPU (``CUDA_VISIBLE_DEVICES=0`` and ``=1``, as torchrun gives
them), sharing one cache and database; each builds the op's seeded inputs, times its first call
(every autotuned kernel the op reaches tuned, kiln through ``kiln.install()``) and reports its
choices per kernel and a digest of its outputs. Rows as above (``configs``: the autotuned kernels'
configs summed), plus ``outputs_equal`` and ``first_over_lone`` (the issue's bar: kiln's two
ranks <= 0.65x the lone rank, the same choice, equal outputs). With fewer than two GPUs it prints
one row saying it was skipped, and exits 0::

    python bench/ranks.py --op liger_moe_fwd --gpus 2 --arms kiln,triton \
        --out /tmp/ranks-2gpu.json

``--cpu`` runs the kiln arm's compile half without a GPU: N processes compile the 72 requests for
``GPUTarget("cuda", 90, 32)`` at once through one cache (no tuning, so no choice).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
CONFIGS = 72


def _host() -> dict[str, Any]:
    sys.path.insert(0, str(BENCH))
    import machine_state

    return machine_state.host()


def child(arm: str, go: Path, every: int = 1) -> dict[str, Any]:
    """One process of a case (see the module docstring); returns what it reports."""
    sys.path.insert(0, str(BENCH))
    if arm == "kiln-cpu":
        import ranks_set
        import triton_kiln as kiln

        pool = kiln.get_pool().start()
        requests = ranks_set.matmul_requests()[::every]
        print("READY", flush=True)
        _wait(go)
        started = time.perf_counter()
        results = pool.compile_many(requests, progress=False)
        failed = sum(isinstance(r, BaseException) for r in results)
        return {"first_s": time.perf_counter() - started, "compiles": pool.stats.dispatched,
                "choice": None, "failed": failed}  # fmt: skip
    import torch
    import triton

    import autotune

    kernel, configs, case = autotune.SETS["matmul"]
    call, check, key = case()
    misses = [0]
    if arm == "triton":

        def listener(**kw: Any) -> None:
            misses[0] += not kw["cache_hit"]

        triton.knobs.compilation.listener = listener
        tuned = triton.autotune(configs(), key=key)(kernel)
    else:
        import triton_kiln as kiln

        tuned = kiln.autotune(configs(), key=key)(kernel)
    torch.cuda.synchronize()
    print("READY", flush=True)
    _wait(go)
    started = time.perf_counter()
    call(tuned)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    row: dict[str, Any] = {"first_s": first_s, "choice": json.dumps(tuned.best_config.all_kwargs()),
                           "max_abs_err": check()}  # fmt: skip
    if arm == "kiln":
        import triton_kiln as kiln

        row.update(compiles=kiln.get_pool().stats.dispatched, loaded_from=tuned.loaded_from)
    else:
        row.update(compiles=misses[0])
    return row


def op_child(arm: str, op_name: str, go: Path) -> dict[str, Any]:
    """One rank of the op case: ``arm`` (kiln: ``kiln.install()`` before the library's import)
    tuning every autotuned kernel ``op_name`` reaches, on its one visible GPU."""
    import hashlib
    import importlib

    sys.path.insert(0, str(BENCH))
    import realworld_child
    import realworld_ops

    fallbacks: list[dict[str, str]] = []
    if arm == "kiln":
        realworld_child.route_to_kiln(False, fallbacks)
    op = realworld_ops.OPS[op_name]
    for module in op.modules:
        importlib.import_module(module)
    tuners = list(realworld_child._autotuners())
    import torch
    import triton

    misses = [0]
    if arm == "triton":

        def listener(**kw: Any) -> None:
            misses[0] += not kw["cache_hit"]

        triton.knobs.compilation.listener = listener
    torch.manual_seed(0)
    case = op.build()
    torch.cuda.synchronize()
    print("READY", flush=True)
    _wait(go)
    started = time.perf_counter()
    case.run()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    outputs = case.run()
    torch.cuda.synchronize()
    digest = hashlib.sha256()
    for name in sorted(outputs):
        digest.update(name.encode())
        digest.update(outputs[name].detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    invoked = realworld_child._invoked(tuners)
    choice = {realworld_child._name(t): realworld_child._chosen(t) for t in invoked}
    row: dict[str, Any] = {"first_s": first_s, "choice": json.dumps(choice, sort_keys=True),
                           "configs": sum(len(t.configs) for t in invoked), "outputs": digest.hexdigest(),
                           "gpu": str(torch.cuda.get_device_properties(0).uuid),
                           "refused": fallbacks}  # fmt: skip
    if arm == "kiln":
        import triton_kiln as kiln

        row["compiles"] = kiln.get_pool().stats.dispatched
        row["loaded_from"] = sorted({str(getattr(t, "loaded_from", None)) for t in invoked})
    else:
        row["compiles"] = misses[0]
    return row


def op_row(arm: str, lone: dict[str, Any], case: dict[str, Any], gpus: int) -> dict[str, Any]:
    """A row of the op case: ``case`` (two ranks on two GPUs) of ``arm`` against its lone rank,
    as :func:`row` (its ``compiles_total`` includes kiln's output-check kernel: the op case
    records no store listing to tell it apart), with the outputs and GPUs compared:
    ``outputs_equal`` between the ranks (the issue's bar), ``outputs_equal_lone`` also with the
    lone rank's (which tuned on its own, so it may have chosen otherwise and rounded otherwise)."""
    reports = case["reports"]
    return {
        **row(arm, lone, case, gpus, configs=max(r["configs"] for r in reports)),
        "outputs_equal": len({r["outputs"] for r in reports}) == 1,
        "outputs_equal_lone": len({r["outputs"] for r in [*reports, *lone["reports"]]}) == 1,
        "distinct_gpus": len({r["gpu"] for r in reports}) == len(reports),
    }


def skip_row(arm: str, gpus: int, processes: int) -> dict[str, Any]:
    return {"arm": arm, "processes": processes, "gpus": gpus, "configs": 0, "compiles_total": 0,
            "lone_first_s": 0.0, "first_s_max": 0.0, "first_over_lone": 0.0, "same_choice": False,
            "skipped": f"needs {processes} GPUs, found {gpus}"}  # fmt: skip


def _wait(go: Path) -> None:
    while not go.exists():
        time.sleep(0.005)


def run_case(arm: str, processes: int, every: int = 1, op: str | None = None) -> dict[str, Any]:
    """``processes`` processes of ``arm`` started together on fresh caches; their reports. With
    ``op``: the op case, process ``i`` on GPU ``i`` alone (``CUDA_VISIBLE_DEVICES``)."""
    root = Path(tempfile.mkdtemp(prefix=f"kiln-ranks-{arm}-{processes}-"))
    env = dict(os.environ)
    env.update(TRITON_CACHE_DIR=str(root / "triton"), KILN_CACHE_DIR=str(root / "kiln"),
               KILN_TUNING_DB=str(root / "kiln" / "tuning.sqlite3"))  # fmt: skip
    if op is not None:
        import realworld_ops

        env.update(realworld_ops.OPS[op].env)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(BENCH.parent / "src"), *filter(None, [env.get("PYTHONPATH")])]
        )
    go = root / "go"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        arm,
        "--go",
        str(go),
        "--every",
        str(every),
    ]
    command += ["--op", op] if op is not None else []
    children = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env if op is None else {**env, "CUDA_VISIBLE_DEVICES": str(i)},
        )
        for i in range(processes)
    ]
    try:
        for proc in children:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "READY":
                raise RuntimeError(f"a {arm} process did not start: {line!r} {proc.communicate()[1][-3000:]}")
        go.touch()
        reports = []
        for proc in children:
            out, err = proc.communicate(timeout=1800)
            found = [x for x in out.splitlines() if x.startswith("RESULT ")]
            if proc.returncode != 0 or not found:
                raise RuntimeError(f"a {arm} process failed ({proc.returncode}): {err[-3000:]}")
            reports.append(json.loads(found[-1][7:]))
        if arm.startswith("kiln") and op is None:  # what the node's store holds, by kernel
            names = _stored_kernels(root / "kiln")
    finally:
        for proc in children:
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "processes": processes,
        "reports": reports,
        "stored": names if arm.startswith("kiln") and op is None else {},
    }


def _stored_kernels(cache: Path) -> dict[str, int]:
    """Entries of the kiln store under ``cache``, counted by kernel name: the matmul set's, and
    kiln's own output-check kernel (compiled once for the node, not one of the set's configs)."""
    from triton_kiln.artifacts.artifact import STORE_DIR
    from triton_kiln.artifacts.store import ArtifactStore

    store = ArtifactStore(cache)
    counts: dict[str, int] = {}
    for entry in sorted((cache / STORE_DIR).glob("*/*")):
        artifact = store.get(entry.name, quiet=True)
        name = artifact.name if artifact is not None else "?"
        counts[name] = counts.get(name, 0) + 1
    return counts


def row(
    arm: str, lone: dict[str, Any], case: dict[str, Any], gpus: int, configs: int = CONFIGS
) -> dict[str, Any]:
    """One table row: ``case`` of ``arm`` against its lone process."""
    reports = case["reports"]
    choices = {r["choice"] for r in reports}
    lone_s = lone["reports"][0]["first_s"]
    first_max = max(r["first_s"] for r in reports)
    return {
        "arm": arm,
        "processes": case["processes"],
        "gpus": gpus,
        "configs": configs,
        # kiln: its pools' dispatched jobs less its own output-check kernel's compiles (one per
        # node, in the store beside the set's 72); Triton: its compile listener's cache misses
        "compiles_total": sum(r["compiles"] for r in reports) - _check_compiles(case),
        "check_kernel_compiles": _check_compiles(case),
        "stored_by_kernel": case.get("stored", {}),
        "lone_first_s": lone_s,
        "first_s_max": first_max,
        "first_over_lone": first_max / lone_s,
        "same_choice": len(choices) == 1,
        "choices": sorted(c for c in choices if c is not None),
        "per_process": reports,
    }


def _check_compiles(case: dict[str, Any]) -> int:
    return sum(n for name, n in case.get("stored", {}).items() if name != "matmul_kernel")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "arm       processes  gpus  configs  compiles_total  lone_first_s  first_s_max  x lone  same_choice"
    ]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"{r['arm']:9} {r['processes']:9d} {r['gpus']:5d}  skipped: {r['skipped']}")
            continue
        lines.append(
            f"{r['arm']:9} {r['processes']:9d} {r['gpus']:5d} {r['configs']:8d} {r['compiles_total']:15d} "
            f"{r['lone_first_s']:13.2f} {r['first_s_max']:12.2f} {r['first_over_lone']:7.2f}  "
            f"{r['same_choice']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--arms", default="kiln,triton", help="comma-separated: kiln, triton")
    parser.add_argument("--cpu", action="store_true", help="kiln's compile half only, no GPU")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    parser.add_argument(
        "--every", type=int, default=1, help="with --cpu: every N-th config only (a quick look)"
    )
    parser.add_argument("--op", default=None, help="a bench/realworld_ops.py op: the multi-GPU case")
    parser.add_argument("--gpus", type=int, default=2, help="with --op: ranks, one per GPU")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--go", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        report = op_child(args.child, args.op, args.go) if args.op else child(args.child, args.go, args.every)
        print("RESULT " + json.dumps(report), flush=True)
        return 0
    args.host = _host()  # as the run starts, before its processes load the machine
    if args.op is not None:
        return main_op(args)
    arms = ["kiln-cpu"] if args.cpu else [a.strip() for a in args.arms.split(",") if a.strip()]
    device = "cpu"
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            print("bench/ranks.py needs a GPU (or --cpu for the compile half alone)", file=sys.stderr)
            return 2
        device = torch.cuda.get_device_name()
    every = args.every if args.cpu else 1
    configs, gpus = len(range(0, CONFIGS, every)), 0 if args.cpu else 1
    rows = []
    for arm in arms:
        print(f"[ranks] {arm}: 1 process", file=sys.stderr, flush=True)
        lone = run_case(arm, 1, every)
        rows.append(row(arm, lone, lone, gpus, configs))
        print(f"[ranks] {arm}: {args.processes} processes", file=sys.stderr, flush=True)
        rows.append(row(arm, lone, run_case(arm, args.processes, every), gpus, configs))
    return _write(args, rows, device)


def main_op(args: argparse.Namespace) -> int:
    """The op case (see the module docstring): per arm, one rank alone, then ``--gpus`` ranks."""
    import torch

    sys.path.insert(0, str(BENCH))
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    found = torch.cuda.device_count()
    device = torch.cuda.get_device_name() if found else "no GPU"
    if found < args.gpus or args.gpus < 2:
        print(f"[ranks] {args.op}: needs {max(2, args.gpus)} GPUs, found {found}: skipped", file=sys.stderr)
        return _write(args, [skip_row(arm, found, max(2, args.gpus)) for arm in arms], device)
    rows = []
    for arm in arms:
        print(f"[ranks] {args.op} {arm}: 1 rank on GPU 0", file=sys.stderr, flush=True)
        lone = run_case(arm, 1, op=args.op)
        print(f"[ranks] {args.op} {arm}: {args.gpus} ranks, one per GPU", file=sys.stderr, flush=True)
        rows.append(op_row(arm, lone, run_case(arm, args.gpus, op=args.op), args.gpus))
    return _write(args, rows, device)


def _write(args: argparse.Namespace, rows: list[dict[str, Any]], device: str) -> int:
    import triton

    result = {
        "meta": {
            "device": device,
            "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
            "triton_version": triton.__version__,
            "cores": len(os.sched_getaffinity(0)),  # the cores this run may use (taskset)
            "host": args.host,  # the CPU model and the load as the run started
            "op": args.op,
        },
        "rows": rows,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print("\n" + table(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The compile pool on Ray against the local pool: the 72-config matmul set, same cores.

Run from the repository root (Ray installed: ``pip install 'triton-kiln[ray]'``)::

    python bench/farm.py --runs 3 --json /tmp/farm.json
    python bench/farm.py --cores 16 --runs 3 --json /tmp/farm.json   # GPU machine

Arms, interleaved (the order flips every run, so drift in the machine's load hits both), each
from a fresh ``TRITON_CACHE_DIR`` and a fresh kiln cache, compiling ``bench/autotune.py``'s 72
matmul configs (``bench/kernels_bench.py``) for ``GPUTarget("cuda", 90, 32)`` (no GPU needed):

* ``local``: :class:`kiln.CompilePool` with ``--cores`` workers, created inside the timed region;
* ``ray``: a local Ray cluster (``ray start --head`` on 127.0.0.1, ``--num-cpus=<cores>``, started
  and stopped outside the timed region, fresh each run so no Ray worker process is warm from
  the run before); the timed region joins it (``ray.init``), creates
  :class:`kiln.farm.RayCompilePool` and waits for every artifact verified in the local store.
  The pool starts one node actor (the node's kiln pool, ``--cores`` workers) when it is made:
  that start-up (Ray worker process, zygote, warm-up) is timed, as the local pool's is.
* ``ray_settled``: the same on a cluster that has been up a while: before the timed region one
  driver connects and leaves (Ray prestarts worker processes, up to one per core, for a
  cluster's first driver) and the cluster goes quiet (under 0.1 core for a second). A
  production cluster is in this state; ``ray`` measures a cluster's very first driver, whose
  timed region shares the cores with Ray starting its own workers.
* ``ray_no_prestart`` (not in the default arms): ``ray``, the cluster's first driver, on a cluster
  started with ``RAY_prestart_worker_first_driver=0`` (no worker process per core for it: kiln's
  farm runs one actor per node), the set-up docs/DISTRIBUTED.md recommends for a farm.
* ``ray_standing`` (not in the default arms): standing node compilers. A fresh
  cluster as for ``ray``; then, outside the timed region, ``kiln farm up --ray ADDRESS`` (a
  separate process, as a farm's set-up runs it: the node's standing compiler starts and its
  kiln pool warms; the command returns when it is warm) and the cluster left to go quiet as for
  ``ray_settled``. The timed region is a driver as in the other arms, with ``standing=True``: it
  joins the cluster and attaches to the warm pool instead of starting one (``actors_attached``
  1, ``actor_starts`` 0; its ``timeline``'s actor times are negative: made before the driver).

Ray rows also carry ``cluster_cpu_s``: the CPU seconds the cluster used in the timed region,
``ray`` (its own processes, prestarted workers included) against ``node_pool`` (the node
actor's kiln pool: zygote, compile workers, ptxas), and ``ray_worker_processes``.

Rows: ``arm``, ``cores``, ``configs``, ``wall_s``, ``failed`` (failures by cause),
``first_result_s`` (the first job done, from the pool's creation), ``zygote_s`` (the zygote's
own start-up: Triton's key, warm-up compile, in all); Ray rows add ``timeline``, seconds from
the pool's creation: Ray joined, the node actor asked for, its process started, its
constructor, its kiln pool, its zygote ready, its ready() reply, the first job sent, the first
reply (``RayCompilePool.stats``). The summary has the medians and ``ray / local`` (acceptance:
<= 1.2). The full JSON goes to stdout (and ``--json``); a short table to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

import triton  # noqa: E402 - after the path above

import ranks_set  # noqa: E402
from support.ray_cluster import LocalRayCluster  # noqa: E402
from triton_kiln import CompilePool, CompileRequest, GPUTarget  # noqa: E402
from triton_kiln.cli.compile import failure_cause  # noqa: E402
from triton_kiln.farm import RayCompilePool  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
JOB_TIMEOUT_S = 900.0


def log(message: str) -> None:
    print(f"[farm] {message}", file=sys.stderr, flush=True)


def requests() -> list[CompileRequest]:
    """The 72 configs as tuning compiles them (``ranks_set``; made after the fresh
    TRITON_CACHE_DIR is set: requests carry it)."""
    return ranks_set.matmul_requests(TARGET)


@contextlib.contextmanager
def fresh_caches(tag: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=f"kiln-farm-{tag}-"))
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    try:
        yield root / "kiln"
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
        shutil.rmtree(root, ignore_errors=True)


def outcome(futures: list[Any]) -> tuple[int, dict[str, int]]:
    failed = Counter(failure_cause(f.exception()) for f in futures if f.exception() is not None)
    return len(futures) - sum(failed.values()), dict(failed)


def zygote_times(info: dict[str, Any]) -> dict[str, float]:
    """A zygote's own start-up: Triton's key (read, or hashed), warm-up compile, in all."""
    return {k: round(info[k], 3) for k in ("key_s", "warmup_s", "startup_s") if k in info}


def run_local(cores: int) -> dict[str, Any]:
    with fresh_caches("local") as kiln_dir:
        reqs = requests()
        started = time.perf_counter()
        pool = CompilePool(
            workers=cores, cache_dir=kiln_dir, job_timeout_s=JOB_TIMEOUT_S, warmup_target=TARGET
        )
        try:
            first: list[float] = []
            futures = [pool.submit(r) for r in reqs]
            for f in futures:
                f.add_done_callback(lambda _f: first.append(time.perf_counter()))
            wait(futures)
            wall = time.perf_counter() - started
            compiled, failed = outcome(futures)
            extra = {
                "zygote_ready_s": pool.stats.zygote_ready_s,
                "compiled": compiled,
                "first_result_s": round(min(first) - started, 3) if first else None,
                "zygote_s": zygote_times(pool.zygote_info),
            }
        finally:
            pool.shutdown(wait=True)
    return {
        "arm": "local",
        "cores": cores,
        "configs": len(reqs),
        "wall_s": round(wall, 3),
        "failed": failed,
        **extra,
    }


def cluster_cpu_s(cluster: LocalRayCluster) -> dict[int, tuple[str, float]]:
    """``{pid: (part, CPU seconds)}`` of the cluster's live processes (with their reaped children),
    ``part`` being ``node_pool`` for the node actor's subtree (its kiln pool: zygote, compile
    workers, ptxas) and ``ray`` for the rest (GCS, raylet, agents, idle and prestarted workers)."""
    procs = cluster.processes()
    pool_pids: set[int] = set()
    for proc in procs:
        with contextlib.suppress(Exception):
            if "NodeCompiler" in " ".join(proc.cmdline()) or "NodeCompiler" in proc.name():
                pool_pids.add(proc.pid)
                pool_pids.update(child.pid for child in proc.children(recursive=True))
    used: dict[int, tuple[str, float]] = {}
    for proc in procs:
        with contextlib.suppress(Exception):
            t = proc.cpu_times()
            part = "node_pool" if proc.pid in pool_pids else "ray"
            used[proc.pid] = (part, t.user + t.system + t.children_user + t.children_system)
    return used


def cpu_between(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds used between two :func:`cluster_cpu_s` readings, by part (a process that ended
    in between is not counted: an undercount, of Ray's short-lived workers mostly)."""
    totals = {"ray": 0.0, "node_pool": 0.0}
    for pid, (part, seconds) in after.items():
        totals[part] += seconds - before.get(pid, (part, 0.0))[1]
    return {k: round(v, 2) for k, v in totals.items()}


def settle(
    cluster: LocalRayCluster,
    *,
    quiet_cores: float = 0.1,
    limit_s: float = 60.0,
    command: list[str] | None = None,
) -> float:
    """A cluster that has been up a while: one driver connects and leaves (Ray prestarts its
    workers for the first driver), then wait until the cluster's processes use under
    ``quiet_cores`` of CPU over a second. Returns the seconds it took (outside the timed region).
    ``command``: the driver to run instead (``kiln farm up``: its output logged)."""
    started = time.perf_counter()
    code = "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); ray.shutdown()"
    if command is None:
        join = [sys.executable, "-c", code, cluster.address]
        subprocess.run(join, env=cluster.env, check=True, timeout=120)
    else:
        options: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 300}
        done = subprocess.run(command, env=cluster.env, check=False, **options)
        if done.returncode != 0:
            raise RuntimeError(f"{command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        log(f"  {done.stdout.strip()}")
    previous = cluster_cpu_s(cluster)
    while time.perf_counter() - started < limit_s:
        time.sleep(1.0)
        now = cluster_cpu_s(cluster)
        if sum(cpu_between(previous, now).values()) < quiet_cores:
            break
        previous = now
    return round(time.perf_counter() - started, 2)


NO_PRESTART = {"RAY_prestart_worker_first_driver": "0"}
"""Ray's setting (read by ``ray start``) that stops the raylet from starting a worker process per
core when the first driver connects: kiln's farm needs one actor per node, not those workers."""


def farm_up_command(cluster: LocalRayCluster) -> list[str]:
    """``kiln farm up`` for ``cluster``: its node's standing compiler, warm when it returns."""
    return [sys.executable, "-m", "triton_kiln", "farm", "up", "--ray", cluster.address]


def run_ray(
    cores: int, *, settled: bool = False, prestart: bool = True, standing: bool = False
) -> dict[str, Any]:
    cluster_env = None if prestart else NO_PRESTART
    with fresh_caches("ray") as kiln_dir, LocalRayCluster(num_cpus=cores, env=cluster_env) as cluster:
        settle_s = settle(cluster) if settled else None
        if standing:  # cluster set-up, as `ray start` is: the standing compiler up and warm
            settle_s = settle(cluster, command=farm_up_command(cluster))
        reqs = requests()
        cpu_before = cluster_cpu_s(cluster)
        started = time.perf_counter()
        pool = RayCompilePool(
            cluster.address, cache_dir=kiln_dir, job_timeout_s=JOB_TIMEOUT_S, standing=standing
        )
        try:
            first: list[float] = []
            futures = [pool.submit(r) for r in reqs]
            for f in futures:
                f.add_done_callback(lambda _f: first.append(time.perf_counter()))
            wait(futures)
            wall = time.perf_counter() - started
            cpu_after = cluster_cpu_s(cluster)
            ray_workers = sum(1 for p in cluster.processes() if "default_worker" in " ".join(_cmdline(p)))
            compiled, failed = outcome(futures)
            nodes = pool.wait_ready(30.0)  # after the wall: the node's zygote timings, for the timeline
            stats = pool.stats
            extra = {
                "compiled": compiled,
                "first_result_s": round(min(first) - started, 3) if first else None,
                "nodes_used": len(stats.nodes),
                "dispatched": stats.dispatched,
                "actor_starts": stats.actor_starts,
                "actors_attached": stats.actors_attached,
                "node_retries": stats.node_retries,
                "timeline": {
                    "connect_s": stats.connect_s,
                    "actor_created_s": stats.actor_created_s,
                    **{f"actor_{k}": v for k, v in stats.actor_timeline.items()},
                    "actor_ready_s": stats.actor_ready_s,
                    "first_dispatch_s": stats.first_dispatch_s,
                    "first_reply_s": stats.first_result_s,
                },
                "zygote_s": nodes[0].get("zygote_s") if nodes else None,
                # CPU the cluster used during the timed region: Ray's own processes (prestarted
                # workers included) against the node's kiln pool
                "cluster_cpu_s": cpu_between(cpu_before, cpu_after),
                "ray_worker_processes": ray_workers,
                "settle_s": settle_s,
            }
        finally:
            pool.shutdown(wait=True)
    left = cluster.leftovers()
    extra["leftover_processes"] = len(left)
    return {
        "arm": "ray_standing"
        if standing
        else ("ray_settled" if settled else ("ray" if prestart else "ray_no_prestart")),
        "cores": cores,
        "configs": len(reqs),
        "wall_s": round(wall, 3),
        "failed": failed,
        **extra,
    }


def _cmdline(proc: Any) -> list[str]:
    try:
        return list(proc.cmdline())
    except Exception:
        return []


def run_ray_settled(cores: int) -> dict[str, Any]:
    return run_ray(cores, settled=True)


def run_ray_no_prestart(cores: int) -> dict[str, Any]:
    return run_ray(cores, prestart=False)


def run_ray_standing(cores: int) -> dict[str, Any]:
    return run_ray(cores, standing=True)


ARMS = {
    "local": run_local,
    "ray": run_ray,
    "ray_settled": run_ray_settled,
    "ray_no_prestart": run_ray_no_prestart,
    "ray_standing": run_ray_standing,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--arms", default="local,ray,ray_settled")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; choose from {sorted(ARMS)}")
    imported = time.perf_counter()
    import ray  # once, outside every timed region (a process using Ray pays it once)

    import_ray_s = round(time.perf_counter() - imported, 3)
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        order = arms if run % 2 == 0 else arms[::-1]
        for arm in order:
            log(f"run {run + 1}/{args.runs}: {arm} ({args.cores} cores)")
            row = ARMS[arm](args.cores)
            row["run"] = run
            log(f"  wall {row['wall_s']:.1f} s, failed {row['failed']}")
            rows.append(row)
            if args.json:  # what ran so far, should a later run not finish
                args.json.write_text(json.dumps({"partial": True, "rows": rows}, indent=1) + "\n")
    medians = {arm: statistics.median(r["wall_s"] for r in rows if r["arm"] == arm) for arm in arms}
    summary: dict[str, Any] = {"median_wall_s": medians}
    if "local" in medians and "ray" in medians:
        ratio = medians["ray"] / medians["local"]
        summary.update({"ray_over_local": round(ratio, 3), "target": 1.2, "ok": ratio <= 1.2})
    if "local" in medians and "ray_settled" in medians:
        summary["ray_settled_over_local"] = round(medians["ray_settled"] / medians["local"], 3)
    if "local" in medians and "ray_no_prestart" in medians:
        summary["ray_no_prestart_over_local"] = round(medians["ray_no_prestart"] / medians["local"], 3)
    if "local" in medians and "ray_standing" in medians:
        summary["ray_standing_over_local"] = round(medians["ray_standing"] / medians["local"], 3)
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "versions": {"triton": triton.__version__, "ray": ray.__version__},
        "import_ray_s": import_ray_s,
        "load_average_at_end": os.getloadavg(),
        "rows": rows,
        "summary": summary,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    print(f"{'arm':<12} {'cores':>5} {'configs':>7} {'wall_s':>8} {'first_s':>8}  failed", file=sys.stderr)
    for row in rows:
        first = row.get("first_result_s")
        print(
            f"{row['arm']:<12} {row['cores']:>5} {row['configs']:>7} {row['wall_s']:>8.1f} "
            f"{first if first is not None else float('nan'):>8.2f}  {row['failed']}",
            file=sys.stderr,
        )
        if "timeline" in row:
            print(
                f"       start-up: {row['timeline']}; zygote {row.get('zygote_s')}; "
                f"cluster CPU s {row.get('cluster_cpu_s')}, Ray workers {row.get('ray_worker_processes')}",
                file=sys.stderr,
            )
    print(
        f"median: {medians}  ray/local {summary.get('ray_over_local', '')}, settled/local "
        f"{summary.get('ray_settled_over_local', '')}, standing/local "
        f"{summary.get('ray_standing_over_local', '')} (target <= 1.2)",
        file=sys.stderr,
    )
    return 0 if summary.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``kiln farm up`` / ``kiln farm down``: the standing node compilers of a Ray cluster.

``up`` starts (or finds) one warm kiln pool per live node, a named detached Ray actor that every
driver (``kiln compile --ray ADDRESS --standing``, ``RayCompilePool(standing=True)``) shares,
and prints one line per node once each is warm; ``down`` ends them. See docs/DISTRIBUTED.md.
Ray is imported only when a command runs (:mod:`triton_kiln.farm.ray_api`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click


@click.group("farm", short_help="Standing compilers on the nodes of a Ray cluster.")
def farm_group() -> None:
    """Standing node compilers on a Ray cluster: one warm kiln pool per node, shared by every driver."""


@farm_group.command("up", short_help="Start every live node's standing compiler.")
@click.option("--ray", "ray_address", required=True, help="The Ray cluster (host:port, or 'auto').")
@click.option(
    "--cpus-per-node", type=int, default=None, help="CPUs each node's compiler holds [default: all]."
)
@click.option("--preload", multiple=True, help="Modules every node's zygote imports first (repeat).")
@click.option(
    "--memory-limit-mb",
    type=int,
    default=None,
    help="Memory one compile may use [default: KILN_MEMORY_LIMIT_MB, else none].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds to wait for every node's pool to be warm (more than 0).",
)
def farm_up(
    ray_address: str,
    cpus_per_node: int | None,
    preload: tuple[str, ...],
    memory_limit_mb: int | None,
    timeout_s: float,
) -> None:
    """Start the standing compiler of every live node and wait until each is warm.

    One line per node; the exit status is 1 if a pool did not warm within --timeout, or if a
    node's compiler was running already with other preloads or memory limit (the line says so)."""
    from triton_kiln import settings
    from triton_kiln.farm import standing

    if cpus_per_node is not None and cpus_per_node < 1:
        raise click.BadParameter(f"must be at least 1, got {cpus_per_node}", param_hint="--cpus-per-node")
    limit = memory_limit_mb if memory_limit_mb is not None else settings.current().memory_limit_mb
    rows = standing.up(
        ray_address,
        cpus_per_node=cpus_per_node,
        preload=preload,
        memory_limit_mb=limit,
        niceness=os.getpriority(os.PRIO_PROCESS, 0),
        timeout_s=timeout_s,
    )
    for row in rows:
        click.echo(node_line(row))
    if not all(row.get("warm") and not row.get("mismatch") for row in rows):
        sys.exit(1)  # a pool not warm in time, or one running other settings than asked


def node_line(row: dict[str, Any]) -> str:
    """One node: where, its actor and pool, whether it was started now, and any mismatch."""
    state = "started" if row["started"] else "already running"
    warm = "warm" if row.get("warm") else "NOT warm (its kiln pool did not start in time)"
    line = (
        f"{row.get('host', row['address'])} ({row['node'][:8]}): {state}, {warm}, "
        f"actor pid {row.get('pid')}, {row.get('workers')} workers, zygote {row.get('zygote')}, "
        f"preload {row.get('preload')}, memory limit {row.get('memory_limit_mb') or 'none'}"
    )
    if row.get("mismatch"):
        line += f"; not as asked: {row['mismatch']} (run `kiln farm down` first to change it)"
    return line


@farm_group.command("down", short_help="End every standing compiler of the cluster.")
@click.option("--ray", "ray_address", required=True, help="The Ray cluster (host:port, or 'auto').")
def farm_down(ray_address: str) -> None:
    """End every standing compiler of the cluster (its kiln pool, then its actor)."""
    from triton_kiln.farm import standing

    names = standing.down(ray_address)
    for name in names:
        click.echo(f"ended {name}")
    click.echo(f"{len(names)} standing compiler(s) ended")

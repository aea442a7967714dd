"""Standing node compilers: one warm kiln pool per Ray node, shared by every driver (``kiln farm``).

::

    kiln farm up --ray ADDRESS        every live node with a CPU: its named, detached NodeCompiler
      up(address, ...)                (``kiln-node-<node id>`` in the ``kiln-farm`` namespace) is
                                      attached to, or made; then each one's kiln pool is waited
                                      for (zygote and workers up): one row per node
    RayCompilePool(standing=True)     attaches to them (or makes one where none runs), compiles,
                                      and leaves them running when it ends (farm/nodes.py)
    kiln farm down --ray ADDRESS      every standing compiler: its pool shut down (10 s at most),
      down(address)                   then the actor killed (its zygote and workers die with it)

A standing compiler lives until ``down``, its node's end, or its process's death; it runs the
kiln and Triton it imported when it started, so after upgrading either, run ``down`` then ``up``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from triton_kiln.farm import ray_api
from triton_kiln.farm.errors import FarmError
from triton_kiln.farm.nodes import actor_args, compile_concurrency, mismatch

_CLOSE_WAIT_S = 10.0


def up(
    address: str | None,
    *,
    cpus_per_node: int | None = None,
    preload: Iterable[str] = (),
    memory_limit_mb: int | None = None,
    niceness: int | None = None,
    timeout_s: float = 120.0,
) -> list[dict[str, Any]]:
    """Start (or find) the standing compiler of every live node and wait until each kiln pool is
    warm; one dict per node: ``node``, ``address``, ``started`` (``False``: it was running),
    ``warm``, ``mismatch`` (why it does not run these settings, or ``None``) and what
    :meth:`~triton_kiln.farm.node_actor.NodeCompiler.warm` says (host, pid, workers, zygote, preloads)."""
    modules = tuple(preload)
    owns = ray_api.connect(address, {})
    try:
        nodes = ray_api.nodes()
        if not nodes:
            raise FarmError(f"the Ray cluster at {address or 'RAY_ADDRESS'} has no live node with a CPU")
        started = []
        for node in nodes:
            cpus = min(node.cpus, cpus_per_node or node.cpus)
            handle, made = ray_api.start_node_actor(
                node,
                cpus,
                compile_concurrency(cpus, standing=True),
                actor_args(cpus, modules, memory_limit_mb, niceness),
                standing=True,
            )
            started.append((node, handle, made))
        deadline = time.monotonic() + timeout_s
        rows = []
        for node, handle, made in started:
            left = max(1.0, deadline - time.monotonic())
            info = ray_api.call(handle.warm, left, left)
            rows.append(
                {
                    "node": node.node_id,
                    "address": node.address,
                    "started": made,
                    "mismatch": mismatch(info, modules, memory_limit_mb),
                    **info,
                }
            )
        return rows
    finally:
        if owns:
            ray_api.disconnect()


def down(address: str | None, *, timeout_s: float = 30.0) -> list[str]:
    """End every standing compiler of the cluster (its kiln pool first, then the actor); the
    names ended. Drivers still using them lose their calls (re-run by kiln) and, being standing,
    start new ones: end the drivers first."""
    owns = ray_api.connect(address, {})
    try:
        actors = ray_api.standing_actors()
        closing = [ray_api.control(handle, "close") for handle in actors.values()]
        ray_api.wait_all(closing, _CLOSE_WAIT_S)
        del closing
        for handle in actors.values():
            ray_api.kill(handle)
        deadline = time.monotonic() + timeout_s
        while ray_api.standing_actors():  # gone when Ray has freed their names
            if time.monotonic() > deadline:
                left = sorted(ray_api.standing_actors())
                raise FarmError(f"standing compilers still listed after {timeout_s:g} s: {left}")
            time.sleep(0.1)
        return sorted(actors)
    finally:
        if owns:
            ray_api.disconnect()

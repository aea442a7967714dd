"""The sandbox's side of kiln's runtime autotune with the GPU's two steps stood in, for CPU tests.

:func:`load_here` and :func:`time_here` replace :mod:`triton_kiln.inductor.runtime_autotune`'s
functions of those names in the process that sends them. They run in kiln's real sandbox
process, which rebuilds the real kernel from kiln's real payload
(:func:`~triton_kiln.triton_compat.inductor.unpickle_kernel`); only making its launchers (loading
binaries on a GPU) and timing them are stood in: each config's outcome comes from the modes the
test passes as the kernel's one argument, ``{"<num_warps>": mode}``, a mode being ``ok:<ms>`` or a
:class:`~support.inductor_bench_requests.FaultyRequest` fault (``abort``, ``segv``, ``exit``,
``hang``, ``raise``, ``ima``), made for real in the sandbox process. Each call appends one JSON
line to the file named by the kernel's second argument: the pid and what it did.
"""

from __future__ import annotations

import json
import os
from typing import Any

from support.inductor_bench_requests import FaultyRequest
from triton_kiln.inductor.runtime_autotune import NOT_LOADED
from triton_kiln.triton_compat import inductor as compat

_HELD: dict[str, tuple[dict[str, str], str, dict[tuple[Any, ...], str]]] = {}


def _note(log: str, **what: Any) -> None:
    with open(log, "a") as handle:
        handle.write(json.dumps({"pid": os.getpid(), **what}) + "\n")


def load_here(token: str, payload: bytes, arguments: Any) -> None:
    kernel = compat.unpickle_kernel(payload)
    modes, log = json.loads(arguments.args[0]), arguments.args[1]
    keys = {compat.config_key(r.config): str(r.config.num_warps) for r in kernel.compile_results}
    _HELD.clear()
    _HELD[token] = (modes, log, keys)
    _note(log, did="load", kernel=compat.kernel_label(kernel), configs=sorted(keys.values()))


def time_here(token: str, key: tuple[Any, ...]) -> tuple[float, str | None] | str:
    held = _HELD.get(token)
    if held is None:
        return NOT_LOADED
    modes, log, keys = held
    warps = keys[key]
    _note(log, did="time", num_warps=warps)
    mode = modes[warps]
    if mode.startswith("ok:"):
        return float(mode[3:]), None
    return FaultyRequest(mode).benchmark()

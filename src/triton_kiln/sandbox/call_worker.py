"""The call sandbox's process: runs pickled zero-argument callables, one at a time, and replies.

::

    CallSandbox (caller process)                  this process (spawned; its own CUDA context)
      CallInit(sys_path, env, warmup)       ->    sys.path, variables, warm-up (torch's CUDA
                                            <-    context...) -> CallHello(pid) | CallStartFailed
      CallItem(label, payload, env)         ->    env set; pickle.loads(payload)(); its value
                                            <-    CallReturned(value) | CallRaised(error, tb, sticky)
      (socket closed)                       ->    exit

A callable that raises (an ``Exception``) is that call's
:class:`~triton_kiln.sandbox.call_messages.CallRaised` and the process goes on; after a sticky CUDA error
(an illegal memory access: this process's context is gone for good) it replies, then exits with
``STICKY_EXIT``. A callable that ends the process (``abort()``, a segfault, ``sys.exit``) or hangs is the
client's to see: it watches the process and the deadline, and kills the process's whole group (it leads
its own), so what a call started (a compiler, a helper process) goes with it. The process dies with its
parent (parent-death signal).
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from typing import Any

from triton_kiln import child_env, procs
from triton_kiln.framing import encode, recv_frame
from triton_kiln.sandbox.call_messages import (
    CallHello,
    CallInit,
    CallItem,
    CallRaised,
    CallReturned,
    CallStartFailed,
    is_sticky,
)
from triton_kiln.sandbox.torch_worker import STICKY_EXIT

ENV_FD = child_env.CALL_SANDBOX_FD
ENV_PARENT = child_env.CALL_SANDBOX_PARENT


def run_one(item: CallItem) -> tuple[bytes, bool]:
    """The encoded reply to ``item``, and whether this process must exit after sending it."""
    os.environ.update(item.env)
    try:
        value = pickle.loads(item.payload)()
        return encode(CallReturned(value)), False
    except Exception as exc:  # SystemExit and the like end the process, as they would anyway
        text = f"{type(exc).__name__}: {exc}"
        sticky = is_sticky(text)
        return encode(CallRaised(text, traceback.format_exc(), sticky)), sticky


def main() -> None:
    os.setpgid(0, 0)  # its own process group: a timeout kills what it started too
    chan, _parent = procs.parent_channel(ENV_FD, ENV_PARENT)
    init: CallInit = recv_frame(chan)
    sys.path[:] = init.sys_path
    os.environ.update(init.env)
    if init.warmup is not None:
        try:
            warmup: Any = pickle.loads(init.warmup)
            warmup()
        except Exception as exc:
            chan.sendall(encode(CallStartFailed(f"{type(exc).__name__}: {exc}", traceback.format_exc())))
            os._exit(1)
    chan.sendall(encode(CallHello(os.getpid())))
    while True:
        try:
            item: CallItem = recv_frame(chan)
        except (EOFError, ConnectionResetError):
            return
        reply, must_exit = run_one(item)
        chan.sendall(reply)
        if must_exit:
            os._exit(STICKY_EXIT)  # this process's CUDA context is gone for good

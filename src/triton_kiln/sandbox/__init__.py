"""The benchmark sandbox: a spawned GPU process per device that times configs for the tuner.

Two kinds: the native one (:mod:`.native_client` / :mod:`.native_worker`: no torch, inputs over
CUDA IPC, ready in well under a second) and the torch one (:mod:`.client` / :mod:`.worker`),
which runs what kiln's launcher cannot. :func:`shared` gives a process's sandbox for a device;
:func:`prestart` starts it early (see :mod:`.registry`).
"""

from triton_kiln.sandbox.client import BenchOutcome, BenchSpec, Sandbox
from triton_kiln.sandbox.registry import prestart, shared

__all__ = ["BenchOutcome", "BenchSpec", "Sandbox", "prestart", "shared"]

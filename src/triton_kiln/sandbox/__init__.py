"""The benchmark sandbox: a spawned GPU process per device that times configs for the tuner.

Two kinds: the native one (:mod:`.native_client` / :mod:`.native_worker`: no torch, inputs over
CUDA IPC, ready in well under a second) and the torch one (:mod:`.torch_client` / :mod:`.torch_worker`),
which runs what kiln's launcher cannot. :func:`shared` gives a process's sandbox for a device;
:func:`prestart` starts it early (see :mod:`.registry`). The call sandbox
(:mod:`.call_client` / :mod:`.call_worker`, messages in :mod:`.call_messages`) runs picklable
zero-argument calls, such as Inductor's benchmarks, the same way. The output check is
:mod:`.compare` / :mod:`.compare_np` on the host and :mod:`.device_check` on the GPU.

Imports: artifacts, the launcher's C module (:mod:`triton_kiln.launch`), ``triton_compat`` and
the top-level errors, framing, procs and settings; never the pool or the autotuner, not even
through another package (``tests/test_import_graph.py``), so a sandbox process loads neither.
"""

from triton_kiln.sandbox.registry import prestart, shared
from triton_kiln.sandbox.torch_client import BenchOutcome, BenchSpec, Sandbox

__all__ = ["BenchOutcome", "BenchSpec", "Sandbox", "prestart", "shared"]

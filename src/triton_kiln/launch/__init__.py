"""Launching compiled binaries without Triton's dispatch: kiln's C launcher and launch specs.

Nothing here imports Triton unless a binary needs Triton's launcher (see :mod:`.launcher`) or
its runtime allocator (scratch buffers, :mod:`.scratch`), so a process that loads a bundle runs
its kernels without Triton's compiler.

Modules: :mod:`.native` / :mod:`.native_build` (which C launcher a process loads, and its
first-use build), :mod:`.dispatch` (the dispatcher's tables), :mod:`.entry` (``LaunchEntry``: a
launch ready to go), :mod:`.spec`, :mod:`.scratch`, :mod:`.launcher`, :mod:`.prebuild`
(Triton's own launcher built ahead).

Imports: artifacts, ``triton_compat`` and the top-level errors, files, procs and settings; the
autotuner, bundles, routing and the sandbox build on it.
"""

from triton_kiln.launch.launcher import KernelLauncher, current_stream, fast_path_blocker
from triton_kiln.launch.native import NativeBuildError
from triton_kiln.launch.spec import ArgSpec, LaunchSpec, LaunchSpecError, call_key_for, param_flags

__all__ = [
    "ArgSpec",
    "KernelLauncher",
    "LaunchSpec",
    "LaunchSpecError",
    "NativeBuildError",
    "call_key_for",
    "current_stream",
    "fast_path_blocker",
    "param_flags",
]

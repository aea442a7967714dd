"""Launching compiled binaries without Triton's dispatch: kiln's C launcher and launch specs.

Nothing here imports Triton unless a binary needs Triton's launcher (see :mod:`.launcher`) or
its runtime allocator (scratch buffers, :mod:`.scratch`), so a process that loads a bundle runs
its kernels without Triton's compiler.
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

"""A compiled binary, ready to launch: kiln's C launcher, or Triton's with a logged reason.

::

    CompiledArtifact + LaunchSpec --load_launcher--> KernelLauncher
        fast:     _kiln_launch.Launcher (cuModuleLoadData once per context; per call: pack the
                  arguments, cuLaunchKernel on the caller's current torch stream)
        fallback: Triton's CompiledKernel built from the same files (no compile), for binaries
                  kiln's launcher does not handle; the reason is logged once at INFO

kiln's launcher covers the common case: pointer, integer, float and constexpr arguments, any
grid, any stream (CUDA graph capture included), shared memory above 48 KiB, and binaries that
ask for Triton's runtime allocation (global scratch: device-side tensor descriptors made with
``tl.make_tensor_descriptor``; profile scratch: instrumented builds). Those get their buffers
as Triton's launcher gets them, at every launch, from the allocator the caller set with
``triton.set_allocator`` (``set_profile_allocator``), read in the calling thread's context,
with Triton's size and alignment (:mod:`.scratch`). It hands over to Triton's launcher for:
thread-block clusters (``num_ctas > 1``), cooperative grids, programmatic dependent launch, TMA
tensor descriptor arguments, tuple arguments, Triton launch hooks
(``knobs.runtime.launch_enter_hook``), and ``KILN_FAST_LAUNCH=0``. The number of Triton's
trailing scratch parameters is checked against what the driver reports for the function
(``cuFuncGetParamInfo``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.launch.scratch import ScratchNeeds
from triton_kiln.launch.spec import LaunchSpec

log = logging.getLogger("kiln.launch")

# Triton >= 3.5 appends two pointer parameters (global and profile scratch) to every kernel.
_TRITON_EXTRA_PARAMS = 2


def fast_path_blocker(
    artifact: CompiledArtifact, spec: LaunchSpec, fast_launch: bool | None = None
) -> str | None:
    """Why this binary must go through Triton's launcher (``None``: kiln's can launch it).

    ``fast_launch``: the caller's ``Settings.fast_launch`` (``KILN_FAST_LAUNCH``); ``None``, for
    a user's direct call only, reads the settings in force.
    """
    if fast_launch is None:
        from triton_kiln import settings

        fast_launch = settings.current().fast_launch
    if not fast_launch:
        return "KILN_FAST_LAUNCH=0"
    meta = artifact.metadata
    if artifact.binary_ext != "cubin":
        return f"the binary is a {artifact.binary_ext}, not a CUDA cubin"
    if int(meta.get("num_ctas", 1) or 1) != 1:
        return f"it uses thread-block clusters (num_ctas={meta['num_ctas']})"
    if meta.get("launch_cooperative_grid"):
        return "it needs a cooperative grid launch"
    if meta.get("launch_pdl"):
        return "it uses programmatic dependent launch"
    if meta.get("tensordesc_meta"):
        return "it takes TMA tensor descriptors"
    reason = spec.unsupported_reason()
    if reason is not None:
        return reason
    if triton_compat.triton_launch_hooks_set():
        return "Triton's launch hooks are set (knobs.runtime.launch_enter_hook); only its launcher calls them"
    return None


_stream_getter: Callable[[], int] | None = None


def stream_functions() -> tuple[Callable[[int], int], Callable[[], int]]:
    """torch's ``(get_raw_stream(device), get_device())``, for kiln's C dispatcher to call."""
    get_stream, get_device = triton_compat.torch_stream_functions()
    return get_stream, get_device


def stream_getter() -> Callable[[], int]:
    """A function returning the caller's current CUDA stream (torch's, on its current device)."""
    global _stream_getter
    if _stream_getter is None:
        get_stream, get_device = stream_functions()

        def _getter() -> int:
            return get_stream(get_device())

        _stream_getter = _getter
    return _stream_getter


def current_stream() -> int:
    """The caller's current CUDA stream (torch's, on torch's current device), as an int."""
    return stream_getter()()


class KernelLauncher:
    """Launches one binary: ``launcher.launch(grid, args)`` with every argument, in order."""

    def __init__(
        self,
        artifact: CompiledArtifact,
        spec: LaunchSpec,
        *,
        triton: Any = None,
        files_dir: Path | None = None,
        fast_launch: bool | None = None,
    ) -> None:
        """``triton``: Triton's ``CompiledKernel`` for the fallback, when the caller has one.

        ``fast_launch``: the caller's ``Settings.fast_launch``; kiln's own callers pass theirs,
        and only a launcher made directly by a user (``None``) reads the settings in force.
        """
        self.artifact = artifact
        self.spec = spec
        self.name = artifact.name
        self._files_dir = files_dir
        self.native: Any = None
        self.fallback_reason = fast_path_blocker(artifact, spec, fast_launch)
        if self.fallback_reason is None:
            try:
                self.native = _native_launcher(artifact, spec)
            except _Unsupported as exc:
                self.fallback_reason = str(exc)
        self._triton: Any = triton
        if self.native is not None:
            self._stream = stream_getter()
            self.launch = self._launch_native
        else:
            log.info("kiln: %s launches through Triton's launcher: %s", artifact.name, self.fallback_reason)
            self.launch = self._launch_triton

    @property
    def is_fast(self) -> bool:
        return self.native is not None

    def _launch_native(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        self.native.launch(grid, self._stream(), args)

    def triton_kernel(self) -> Any:
        """Triton's ``CompiledKernel`` of this binary (the one given, or made once, no compile)."""
        if self._triton is None:
            self._triton = triton_kernel(self.artifact, self.spec, self._files_dir)
        return self._triton

    def _launch_triton(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        self.triton_kernel()[grid + (1,) * (3 - len(grid))](*args)

    def __repr__(self) -> str:
        how = "kiln" if self.is_fast else f"triton ({self.fallback_reason})"
        return f"KernelLauncher({self.name}, launcher={how})"


class _Unsupported(Exception):
    pass


def _native_launcher(artifact: CompiledArtifact, spec: LaunchSpec) -> Any:
    from triton_kiln.launch.native import NativeBuildError, native

    try:
        module = native()
    except NativeBuildError as exc:
        raise _Unsupported(f"kiln's launcher is unavailable: {exc}") from None
    kinds = spec.kinds()
    block_x = 32 * int(artifact.launch_field("num_warps"))
    shared = int(artifact.launch_field("shared"))
    needs = ScratchNeeds.from_metadata(artifact.metadata)
    scratch: dict[str, Any] = {}
    if needs.any:  # the allocators the caller set, looked up at each launch as Triton does
        scratch = {"scratch": needs.pairs(), "allocators": triton_compat.scratch_allocator_sources()}
    try:
        launcher = module.Launcher(
            artifact.binary, artifact.name, kinds, block_x, shared, _TRITON_EXTRA_PARAMS, **scratch
        )
    except RuntimeError as exc:  # no driver, or the driver refused the binary
        raise _Unsupported(f"kiln's launcher could not load the binary: {exc}") from None
    reported, expected = launcher.n_params, launcher.n_expected
    if reported >= 0 and reported != expected:
        extra = reported - (expected - _TRITON_EXTRA_PARAMS)
        if not 0 <= extra <= 8 or (needs.any and extra < _TRITON_EXTRA_PARAMS):
            raise _Unsupported(
                f"the driver reports {reported} parameters for {artifact.name}, kiln expected {expected}"
            )
        launcher = module.Launcher(artifact.binary, artifact.name, kinds, block_x, shared, extra, **scratch)
    return launcher


def triton_kernel(artifact: CompiledArtifact, spec: LaunchSpec, files_dir: Path | None = None) -> Any:
    """Triton's ``CompiledKernel`` for this binary, built without the kernel's source or a compile."""
    from triton_kiln.artifacts.triton_files import triton_dir, triton_kernel_from_source

    # without a folder of the caller's: the process's one temporary root, removed at its exit
    files = files_dir / artifact.key[:32] if files_dir is not None else triton_dir(None, artifact)
    src = SimpleNamespace(
        fn=SimpleNamespace(arg_names=list(spec.names)),
        signature={a.name: a.type for a in spec.args},
        constants={(i,): a.value for i, a in enumerate(spec.args) if a.type == "constexpr"},
    )
    return triton_kernel_from_source(artifact, src, files)

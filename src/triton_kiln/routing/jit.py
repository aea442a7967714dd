"""Plain ``@triton.jit`` kernels' compiles in kiln's pool, under :func:`triton_kiln.install`
(``KILN_ROUTE_JIT=0`` turns it off; docs/JIT_ROUTING.md).

Where it hooks: ``JITFunction._do_compile`` (:mod:`triton_kiln.triton_compat.jit_hook`), which Triton
calls on a miss of the function's in-memory cache. The replacement::

    kernel[grid](...)  -> JITFunction.run: in-memory cache miss -> _do_compile (kiln's)
      the compile _do_compile would make (its ASTSource, target, options)
      Triton's cache holds its hash?       yes -> Triton's own _do_compile (a cache hit)
      a CompileRequest (kernel by name/source, as triton_kiln.autotune's)   cannot: Triton's own compile
      kiln's pool compiles it (the zygote's fork; kiln's caches first)          (debug log)
        died (signal, timeout, memory) -> JitCompileCrashedError naming the kernel and why
      the binary written into Triton's cache under the hash Triton's own functions give the
      compile here (Triton's get_cache_key, environment, stage-hook key: compile_hash)
      Triton's own _do_compile: a cache hit (its CompiledKernel, hooks, in-memory cache);
      checked: the kernel it returns was looked up under that hash (else a WARNING: Triton
      compiled it here itself; never a binary under a hash it was not asked for)

The binary's identity is kiln's request key, as for ``triton_kiln.autotune``: the kernel's source and
every ``@jit`` function and global it reads, signature, constexprs, attrs, options, target,
Triton's version and key and environment (a kernel kiln cannot ship, e.g. a ``__main__`` kernel
without source, raises building the request, and Triton compiles it itself, logged at DEBUG).

A compile error of the kernel itself (Triton's ``CompilationError``) is raised as itself, as
``triton.compile`` raises it. Any other failure on kiln's side (the worker cannot import or
rebuild the kernel, an error that could not be sent back) is logged at DEBUG and Triton's own
compile runs here: the caller gets what it would have had without kiln. kiln's own
processes (zygote, workers, sandboxes) never route, nor does a compile already inside a routed
one (a thread-local guard); Triton's async compile mode is left to Triton.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from triton_kiln import program, triton_compat
from triton_kiln.artifacts.triton_seed import TritonSlot, seed_triton_cache, triton_slot
from triton_kiln.compile.parse import again_after_ast_race
from triton_kiln.errors import JobFailure, KilnError, RemoteCompileError
from triton_kiln.procs import in_kiln_child
from triton_kiln.triton_compat import jit_hook as compat

log = logging.getLogger("kiln.install")

LAUNCHER_WAIT_S = 5.0
"""Longest wait, once the binary is in, for Triton's launcher built in the background (one gcc
run, ~0.26 s); past it the launch builds the launcher itself, as Triton always does."""


class JitCompileCrashedError(KilnError, RuntimeError):
    """A plain ``@triton.jit`` kernel's compile died in kiln's pool (the compiler crashed on a
    signal, hung past ``KILN_JOB_TIMEOUT_S`` or passed the memory limit). ``__cause__`` is kiln's
    :class:`~triton_kiln.errors.JobFailure` (signal, seconds, the compiler's last stderr lines)."""

    def __init__(self, kernel: str, source_file: str, failure: JobFailure) -> None:
        self.kernel = kernel
        self.source_file = source_file
        self.failure = failure
        super().__init__(
            f"Triton kernel {kernel} ({source_file}) could not be compiled: {failure.headline()}. "
            f"Its compile ran in kiln's pool, so this process survived; compile the kernel alone "
            f"with triton.compile to reproduce it, and report it to Triton with the kernel's source."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel, self.source_file, self.failure))


class _Unroutable(Exception):
    """This compile cannot go through kiln's pool; Triton compiles it (logged at DEBUG)."""


_lock = threading.Lock()
_saved: list[Any] = []  # Triton's _do_compile, while installed
_local = threading.local()


def install() -> None:
    """Replace ``JITFunction._do_compile`` (idempotent)."""
    with _lock:
        if _saved:
            return
        original = compat.do_compile_current()
        _saved.append(original)
        compat.set_do_compile(_routed(original))
    log.info("kiln: installed: plain @triton.jit kernels compile in kiln's pool (KILN_ROUTE_JIT=0: not)")


def uninstall() -> None:
    """Give Triton its own ``_do_compile`` back (the very object ``install()`` replaced)."""
    with _lock:
        if not _saved:
            return
        compat.set_do_compile(_saved.pop())
    log.info("kiln: uninstalled: plain @triton.jit kernels compile in Triton's way again")


def installed() -> bool:
    return bool(_saved)


def _routed(original: Any) -> Any:
    @functools.wraps(original)
    def _do_compile(
        self: Any,
        key: Any,
        signature: Any,
        device: Any,
        constexprs: Any,
        options: Any,
        attrs: Any,
        warmup: Any,
    ) -> Any:
        slot = None
        if _may_route():
            _local.busy = True
            try:
                slot = _compile_in_pool(self, device, signature, constexprs, options, attrs)
            finally:
                _local.busy = False
        kernel = original(self, key, signature, device, constexprs, options, attrs, warmup)
        if slot is not None and compat.compiled_kernel_hash(kernel) not in (None, slot.hash):
            log.warning(
                "kiln: %s: Triton looked its compile up under another hash than kiln wrote it under "
                "(%s); Triton compiled it in this process",
                compat.jit_kernel_name(self),
                slot.hash,
            )
        return kernel

    _do_compile.__kiln_routed__ = True  # type: ignore[attr-defined]
    return _do_compile


def _may_route() -> bool:
    if getattr(_local, "busy", False):
        return False  # a compile inside a routed one (kiln's pool running in this process)
    if in_kiln_child():
        return False  # kiln's zygote, workers, sandboxes and sidecar compile themselves
    return not compat.async_compile_active()


def _compile_in_pool(
    fn: Any, device: Any, signature: Any, constexprs: Any, options: Any, attrs: Any
) -> TritonSlot | None:
    """Compile in kiln's pool and seed Triton's cache; the slot written, or ``None`` when Triton
    compiles it itself (already cached, or not routable: logged). Raises
    :class:`JitCompileCrashedError` when the compile died, the compile's own error otherwise."""
    name = compat.jit_kernel_name(fn)

    def dispatch() -> tuple[compat.JitCompile, Any, TritonSlot, Any, Any] | None:
        if compat.caller_stages_hooked():
            raise _Unroutable("this process rewrites Triton's compile pipeline (a stage hook)")
        inputs = compat.jit_compile_inputs(fn, device, signature, constexprs, options, attrs)
        if inputs.target.backend not in ("cuda", "hip"):
            raise _Unroutable(f"target {inputs.target.backend} is not one kiln compiles for")
        pool = _pool()
        # the caller's Triton gets kiln's key (once per process; the same seeding prewarm does)
        triton_compat.seed_caller_triton_key(pool.settings.triton_key_dir)
        slot = triton_slot(inputs.src, inputs.backend, inputs.options)
        if slot.cached():
            return None  # Triton's cache has it: its own _do_compile loads it, nothing to dispatch
        request = _request(inputs, pool)
        # raises, in this thread, for a kernel the pool cannot ship (KernelSpecError)
        return inputs, pool, slot, request, pool.submit(request)

    try:
        # (describing the compile parses the kernel's source: CPython's AST race is retried)
        dispatched = again_after_ast_race(dispatch)
    except Exception as exc:
        log.debug("kiln: %s is compiled by Triton in this process, not in kiln's pool: %s", name, exc)
        return None
    if dispatched is None:
        return None
    inputs, pool, slot, request, future = dispatched
    launcher = None
    if pool.settings.prebuild_launchers:  # Triton 3.5/3.6's launcher: gcc beside the compile
        from triton_kiln.launch import prebuild

        launcher = prebuild.PREBUILDER.begin(inputs.src, inputs.target)
    try:
        artifact = future.result(timeout=_wait_s(pool))
    except JobFailure as exc:
        if not isinstance(exc, RemoteCompileError):
            raise JitCompileCrashedError(name, compat.jit_kernel_file(fn), exc) from exc
        log.debug("kiln: %s: kiln's pool could not compile it (%s); Triton compiles it", name, exc)
        return None
    except TimeoutError:
        raise  # the pool outlived its own job timeout: never compile here after a hang
    except Exception as exc:
        if compat.is_compile_error(exc):
            raise  # Triton's own error about the kernel's code, as triton.compile raises it
        # kiln's side failed (the worker could not import or rebuild the kernel...): Triton's
        # own compile is what the caller would have had without kiln.
        log.debug("kiln: %s: kiln's pool could not compile it (%r); Triton compiles it", name, exc)
        return None
    try:
        seed_triton_cache(slot, artifact)
    except OSError as exc:  # Triton's cache directory cannot take it: Triton compiles it here
        log.debug("kiln: %s: Triton's cache could not be written (%s); Triton compiles it", name, exc)
        return None
    program.note([request], "jit")  # the next run of this program starts it before it is asked for
    if launcher is not None:
        # the launch follows at once: the rest of a build in flight is shorter than a second one
        prebuild.PREBUILDER.wait_for(launcher, LAUNCHER_WAIT_S)
    return slot


def _request(inputs: compat.JitCompile, pool: Any) -> Any:
    from triton_kiln.compile.request import CompileRequest

    name = compat.jit_kernel_name(inputs.fn)
    arg_names = triton_compat.jit_arg_names(inputs.fn)
    hint = "by kiln's pool"
    allowed = triton_compat.backend_option_names(inputs.target)
    # Only what differs from the backend's defaults: the worker's parse_options gives the rest.
    options = {
        k: v
        for k, v in inputs.options.items()
        if k in allowed and inputs.default_options.get(k, object()) != v
    }
    return CompileRequest(
        inputs.fn,
        inputs.signature,
        triton_compat.by_argument(name, arg_names, inputs.constants, hint),
        options=options,
        target=inputs.target,
        attrs=triton_compat.by_argument(name, arg_names, inputs.attrs, hint),
        triton_key_dir=pool.settings.triton_key_dir,
    )


def _pool() -> Any:
    from triton_kiln.pool import get_pool

    return get_pool()


def _wait_s(pool: Any) -> float:
    """The pool fails a job past its timeout; the caller waits that, plus a zygote's start."""
    settings = pool.settings
    return float(settings.job_timeout_s + settings.zygote_start_timeout_s)

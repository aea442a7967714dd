"""Benchmarking one compiled config: a :class:`Bencher` per tuning run, and :func:`classify`.

Two benchers exist, chosen by :func:`make_bencher`:

* :class:`SandboxBencher`: the config runs in the GPU sandbox (:mod:`triton_kiln.sandbox`), a separate
  process, on copies of the inputs; a crash, hang or illegal memory access ends that config
  only. Outputs are checked there.
* :class:`InProcessBencher`: the config runs in the caller's process, as ``triton.autotune``
  does; chosen with ``sandbox=False`` or when user code must run in the loop
  (:func:`runs_user_code`: a custom ``do_bench``, ``pre_hook``/``post_hook``, a config's
  ``pre_hook``).

Every failure's status is decided by :func:`classify` (compile failures and in-process
benchmark failures) or by the sandbox (whose reply already names it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from triton_kiln.artifacts import triton_files as layout
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner import compare_kernels
from triton_kiln.autotuner.gpu import require_gpu
from triton_kiln.autotuner.plan import Bencher, Phase, Services, Timing, TuningPlan
from triton_kiln.errors import (
    CompileTimeoutError,
    KilnError,
    WorkerCrashedError,
    WorkerMemoryError,
    is_out_of_resources,
)
from triton_kiln.sandbox import BenchOutcome, BenchSpec, Sandbox

if TYPE_CHECKING:
    from triton_kiln.autotuner.compile_requests import Candidate

log = logging.getLogger("kiln.autotune")
COMPARE_KERNEL_WAIT_S = 30.0  # past this the output check runs on the host (its kernel not compiled)


def classify(exc: BaseException, stage: Literal["compile", "bench"]) -> str:
    """A failed config's status, from what it raised while compiling or being benchmarked."""
    if is_out_of_resources(exc):
        return "out_of_resources"
    if stage == "bench":
        return "bench_error"
    if isinstance(exc, CompileTimeoutError):
        return "timeout"
    if isinstance(exc, (WorkerCrashedError, WorkerMemoryError)):
        return "crashed"
    return "compile_error"


def reason(exc: BaseException) -> str:
    """One line saying why a compile failed: kiln's headline, or the error's own last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, KilnError):
        text = lines[0] if lines else type(exc).__name__
    else:  # Triton's CompilationError: source excerpt first, the message last
        text = f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
    return text[:500]


def runs_user_code(plan: TuningPlan, configs: Sequence[Any], *, lengths_in_caller: bool = True) -> bool:
    """Whether the user's callables run in the benchmark loop (they need the caller's process):
    a custom ``do_bench``, ``pre_hook``/``post_hook``, a config's ``pre_hook``; Triton's
    deprecated ``warmup``/``rep`` count as its ``do_bench`` unless ``lengths_in_caller`` is off
    (a library's own search: kiln's bencher times with exactly those lengths)."""
    return bool(
        plan.user_hooks
        or user_times(plan, lengths_in_caller=lengths_in_caller)
        or any(c.pre_hook for c in configs)
    )


def user_times(plan: TuningPlan, *, lengths_in_caller: bool = True) -> bool:
    """Whether the user decided how a config is timed (a custom ``do_bench``, ``use_cuda_graph``,
    Triton's deprecated ``warmup``/``rep`` unless ``lengths_in_caller`` is off): then every
    config is timed that way, once, as ``triton.autotune`` times it. Hooks alone do not decide
    it: they run around each launch of kiln's own timing loop, short screening and final round
    included."""
    return plan.user_timing or (lengths_in_caller and plan.timing.lengths_given)


def make_bencher(
    plan: TuningPlan,
    services: Services,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    library_search: bool = False,
) -> Bencher:
    """The bencher for one tuning run (a test's stand-in, ``services.stand_in``, if one is set);
    ``library_search``: a library's own search (``Autotuner._bench``), where no output is checked
    (no reference is computed, no inputs are snapshotted for it) and every timing takes the
    tuner's ``warmup``/``rep``, so those alone do not keep it in the caller's process."""
    stand_in = services.stand_in()
    if stand_in is not None:
        return stand_in(services.kernel, args, kwargs)
    require_gpu(plan.name, services.target())  # NoGPUError, not torch's AssertionError, on a CPU machine
    user_code = runs_user_code(plan, services.kernel.configs, lengths_in_caller=not library_search)
    checks = not library_search
    if plan.sandbox and not user_code:
        return SandboxBencher(plan, services, args, kwargs, checks=checks)
    if plan.sandbox:
        log.info(
            "kiln: %s benchmarks in-process: it has user hooks or a custom do_bench, which run in "
            "the caller's process",
            plan.name,
        )
    return InProcessBencher(
        plan,
        services,
        args,
        kwargs,
        user_code,
        owns_timing=not user_times(plan, lengths_in_caller=not library_search),
        checks=checks,
    )


def user_reference(
    reference: Callable[[dict[str, Any]], Any], args: Sequence[Any], names: list[str]
) -> dict[str, Any]:
    """Run the user's reference on clones of the arguments; its outputs are the tensors after."""
    import torch

    named = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in zip(names, args, strict=False)}
    reference(named)
    return {k: v.detach().cpu() for k, v in named.items() if isinstance(v, torch.Tensor)}


def shared_sandbox(device: int) -> Sandbox:
    """The process's sandbox for ``device`` (one per GPU, shared by every autotuner, started
    early by :func:`triton_kiln.sandbox.prestart`): kiln's torch-free sandbox unless
    ``KILN_NATIVE_SANDBOX=0`` (see :mod:`triton_kiln.sandbox.registry`)."""
    from triton_kiln.sandbox.registry import shared

    sandbox: Sandbox = shared(device)
    return sandbox


class SandboxBencher:
    """Benchmarks in the GPU sandbox; its timeout is the tuner's ``Settings.bench_timeout_s``."""

    owns_timing = True

    def __init__(
        self,
        plan: TuningPlan,
        services: Services,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        checks: bool = True,
    ) -> None:
        import torch

        from triton_kiln.sandbox import registry

        self.plan = plan
        self.services = services
        self.device = torch.cuda.current_device()
        registry.hold(self.device)  # this run keeps it: no idle release while it runs
        self.held = True
        self.peak_bytes: int | None = None  # the sandbox's device memory at most, for the run
        try:
            self.sandbox = shared_sandbox(self.device)
            self.sandbox.start()  # warms up (torch, CUDA context) while the configs compile
        except BaseException:  # no bencher for the run to end: give the hold back here
            self.held = False
            registry.release_later(self.device, plan.settings.idle_s)
            raise
        self.timeout_s = plan.settings.bench_timeout_s
        self.inputs_set = False
        self.kwargs = kwargs
        self.args = args
        self.want_outputs = plan.checks.outputs and checks
        self.compare_kernels = self._compile_compare_kernels(torch)

    def _compile_compare_kernels(self, torch: Any) -> dict[str, Any]:
        """The output check's kernel for the inputs' dtypes, queued ahead of every config
        (the native sandbox compares outputs on the GPU with it: autotuner/compare_kernels.py)."""
        if not self.want_outputs or self.plan.checks.reference is not None:
            return {}  # no check, or against the user's reference: on the host
        if not hasattr(self.sandbox, "set_compare_kernels"):
            return {}  # the torch sandbox compares with torch, on the GPU already
        dtypes = {str(v.dtype) for v in [*self.args, *self.kwargs.values()] if isinstance(v, torch.Tensor)}
        try:
            return compare_kernels.submit(self.services.pool(), self.services.target(), dtypes)
        except Exception as exc:  # the host check stands in
            log.info(
                "kiln: the output check's kernel could not be queued (%s): outputs checked on the host", exc
            )
            return {}

    def user_reference(self) -> dict[str, Any] | None:
        reference = self.plan.checks.reference
        if reference is None or not self.want_outputs:
            return None
        return user_reference(reference, self.args, list(self.plan.arg_names))

    def bench(
        self, candidate: Candidate, artifact: CompiledArtifact, grid: tuple[int, ...], phase: Phase
    ) -> Any:
        pool = self.services.pool()
        if not self.inputs_set:
            if self.compare_kernels:  # compiled first of all: at most one compile's wait, once per machine
                specs = compare_kernels.specs(pool, self.compare_kernels, COMPARE_KERNEL_WAIT_S)
                self.sandbox.set_compare_kernels(specs)  # type: ignore[attr-defined]
            kernel = self.services.kernel
            self.sandbox.set_inputs(dict(candidate.bound.args), kernel.reset_to_zero, kernel.restore_value)
            expected = self.user_reference()
            if expected is not None:
                self.sandbox.set_reference(expected, self.plan.checks.tolerances)
            self.inputs_set = True
        spec = BenchSpec(
            key=artifact.key,
            group=layout.triton_files(pool.store, artifact),
            hash=str(artifact.metadata.get("hash", artifact.key)),
            arg_names=list(candidate.bound.args),
            signature=dict(candidate.request.signature),
            constexprs=dict(candidate.request.constexprs),
            grid=grid,
            warmup=phase.warmup_ms,
            rep=phase.rep_ms,
            want_outputs=self.want_outputs and phase.check,
            want_samples=phase.samples,
        )
        return self.sandbox.bench(spec, self.timeout_s)

    def finish(self) -> None:
        self.release()

    def release(self) -> None:
        """The run is over (or failed): the sandbox goes once idle for ``KILN_IDLE_S``, its GPU
        memory with it (once per bencher)."""
        from triton_kiln.sandbox import registry

        if self.held:
            self.held = False
            try:  # its input copies and scratch now; the process itself after KILN_IDLE_S
                memory = self.sandbox.release_inputs() if self.inputs_set else None
            except Exception as exc:  # a sandbox that cannot answer is stopped by it; the run stands
                log.debug("kiln: the sandbox did not report its memory: %s", exc)
                memory = None
            if memory is not None:
                self.peak_bytes = int(memory["peak_bytes"])
            registry.release_later(self.device, self.plan.settings.idle_s)


def ended(bencher: Bencher) -> int | None:
    """The run is over, however it ended: a sandbox bencher gives its sandbox back (idempotent);
    the most GPU memory that sandbox held for the run, in bytes (``None``: not measured)."""
    if not isinstance(bencher, SandboxBencher):
        return None
    bencher.release()
    return bencher.peak_bytes


class InProcessBencher:
    """Benchmarks in the caller's process, as ``triton.autotune`` does (hooks included).

    Output checks need kiln to own every run of the kernel, so they are off when the kernel has
    user hooks or a custom ``do_bench``. Where the user decides how a config is timed
    (``owns_timing`` off: :func:`user_times`), each config is timed once with the tuner's own
    ``do_bench``; otherwise, hooks or not, with kiln's lengths (a short screening, then the final
    round), each launch wrapped in the hooks as Triton wraps it.
    """

    def __init__(
        self,
        plan: TuningPlan,
        services: Services,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        user_code: bool,
        *,
        owns_timing: bool,
        checks: bool = True,
    ) -> None:
        import torch

        self.plan = plan
        self.services = services
        self.kernel = services.kernel
        self.arg_names = list(plan.arg_names)
        self.args = args
        self.kwargs = dict(kwargs)
        self.snapshot: dict[str, Any] | None = None
        self.user_code = user_code
        self.owns_timing = owns_timing
        if plan.checks.outputs and checks and not user_code:
            named = dict(zip(self.arg_names, args, strict=False))
            self.snapshot = {k: v.clone() for k, v in named.items() if isinstance(v, torch.Tensor)}

    def user_reference(self) -> dict[str, Any] | None:
        checks = self.plan.checks
        if self.snapshot is None or checks.reference is None or not checks.outputs:
            return None
        return user_reference(checks.reference, self.args, self.arg_names)

    def _restore(self) -> None:
        if self.snapshot is None:
            return
        named = dict(zip(self.arg_names, self.args, strict=False))
        for name, clone in self.snapshot.items():
            named[name].copy_(clone)

    def bench(
        self, candidate: Candidate, artifact: CompiledArtifact, grid: tuple[int, ...], phase: Phase
    ) -> Any:
        import torch

        tuner = self.kernel
        config = candidate.config
        started = time.monotonic()
        kernel = layout.load_kernel(self.services.pool().store, candidate.request, artifact)
        ordered = list(candidate.bound.args.values())
        full_nargs = {**(tuner.nargs or {}), **self.kwargs, **config.all_kwargs()}

        def kernel_call() -> None:
            if config.pre_hook:
                config.pre_hook(full_nargs)
            tuner.pre_hook(full_nargs)
            try:
                kernel[grid](*ordered)  # loads the binary on first use: OutOfResources shows here
            except Exception as exc:
                try:
                    tuner.post_hook(full_nargs, exception=exc)
                finally:
                    raise
            tuner.post_hook(full_nargs, exception=None)

        outputs = None
        try:
            if self.snapshot is not None and phase.check:
                self._restore()
                kernel_call()
                torch.cuda.synchronize()
                outputs = {k: v.clone() for k, v in full_nargs.items() if isinstance(v, torch.Tensor)}
                self._restore()
            if not self.owns_timing:
                timings = tuner.do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
            else:
                import triton.testing

                timings = triton.testing.do_bench(
                    kernel_call, warmup=phase.warmup_ms, rep=phase.rep_ms, quantiles=(0.5, 0.2, 0.8)
                )
            torch.cuda.synchronize()
        except Exception as exc:
            status = classify(exc, "bench")
            if status == "bench_error" and self.user_code:
                raise  # as triton.autotune does: the user's benchmark or hook failed, not the config
            text = str(exc) if status == "out_of_resources" else f"{type(exc).__name__}: {exc}"
            return BenchOutcome(status, reason=text, seconds=time.monotonic() - started)
        finally:
            self._restore()
        values = [float(timings)] * 3 if isinstance(timings, (int, float)) else [float(t) for t in timings]
        return BenchOutcome(
            "ok", timings=values, outputs=outputs, raw=timings, seconds=time.monotonic() - started
        )

    def finish(self) -> None:
        self._restore()


def screen_phase(timing: Timing, bencher: Bencher) -> Phase:
    """The first pass over the configs: kiln's short screening when it owns the timing (a final
    round follows), else one full pass with the tuner's lengths, as ``triton.autotune``."""
    if bencher.owns_timing:
        return Phase(*timing.screen_ms, check=True)
    return Phase(timing.warmup_ms, timing.rep_ms, True)

"""``triton_kiln.autotune`` and ``triton_kiln.precompile``: the decorator that makes an :class:`Autotuner`,
and starting a tuned kernel's compiles ahead of its first call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner import arguments
from triton_kiln.autotuner.autotuner import Autotuner, _TritonAutotuner
from triton_kiln.pool import CompilePool


def autotune(
    configs: list[Any] | None,
    key: list[str] | str,
    prune_configs_by: dict[str, Any] | None = None,
    reset_to_zero: list[str] | None = None,
    restore_value: list[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: float | None = None,
    rep: float | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool = False,
    *,
    sandbox: bool | None = None,
    check_outputs: bool = True,
    reference: Callable[[dict[str, Any]], Any] | None = None,
    tolerances: tuple[float, float] | None = None,
    pool: CompilePool | None = None,
    database: Any = None,
    target: Any = None,
    precompile: Sequence[Sequence[Any]] | None = None,
) -> Callable[[Any], Any]:
    """``triton.autotune`` with parallel compiles, a crash-proof GPU sandbox and a tuning database.

    Same arguments and attributes as ``triton.autotune``, checked at decoration
    (:mod:`.arguments`; a bare string ``key="n"`` is ``["n"]``; over another autotuner:
    ``NotImplementedError``); kiln's own (keyword-only):

    * ``sandbox``: benchmark in a separate GPU process (default ``KILN_SANDBOX``, on);
    * ``check_outputs``: compare each config's outputs with the reference (default on);
    * ``reference``: ``f(args: dict) -> None`` writing the expected outputs into (clones of)
      the arguments; default: the first config that ran cleanly;
    * ``tolerances``: ``(rtol, atol)`` for the output check (default: by dtype);
    * ``pool``: the :class:`~triton_kiln.CompilePool` to compile in (default: :func:`triton_kiln.get_pool`);
    * ``database``: a ``triton_kiln.tuning.TuningDatabase``, or ``False`` for none (default: the one
      at ``KILN_TUNING_DB``);
    * ``target``: the ``GPUTarget`` to compile for (default: the local GPU's);
    * ``precompile``: example argument tuples (dtypes stand for tensors, e.g.
      ``[(torch.float16, torch.float16, 4096)]``) whose configs start compiling in the pool at
      definition time, in the background; the first real call with matching arguments waits
      only for what is still compiling. Without it, the kernel tunes on its first call with
      real inputs, or loads a result from a loaded bundle or the tuning database (logged at INFO).

    ``KILN_*`` settings are read when the decorator is applied.
    """

    kiln_given = {  # which of kiln's own arguments were given (none: maybe routed by install())
        "sandbox": sandbox is not None,
        "check_outputs": check_outputs is not True,
        "reference": reference is not None,
        "tolerances": tolerances is not None,
        "pool": pool is not None,
        "database": database is not None,
        "target": target is not None,
        "precompile": precompile is not None,
    }

    def decorator(fn: Any) -> Any:
        routed = arguments.is_routed(autotune, kiln_given)
        inner = arguments.stacked_over(fn)
        if inner is not None:
            if not routed:
                raise arguments.StackedAutotunerError(arguments.stacked_message(fn, inner))
            # Triton's own autotuner over the inner one, as the library wrote it: kiln's would fail
            arguments.warn(fn, [arguments.stacked_message(fn, inner) + "; the outer one is Triton's"])
            return _TritonAutotuner(
                fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results,
            )  # fmt: skip
        arguments.check_kernel(fn)
        checked = arguments.check(
            fn, routed, configs=configs, key=key, reset_to_zero=reset_to_zero,
            restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, do_bench=do_bench,
            warmup=warmup, rep=rep, prune_configs_by=prune_configs_by, sandbox=sandbox,
            check_outputs=check_outputs, reference=reference, tolerances=tolerances, pool=pool,
            database=database, target=target,
        )  # fmt: skip
        if checked.problems:
            arguments.warn(fn, checked.problems)
        tuner = Autotuner(
            fn,
            fn.arg_names,
            checked.configs,
            checked.key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=checked.warmup,
            rep=checked.rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
            sandbox=sandbox,
            check_outputs=check_outputs,
            reference=reference,
            tolerances=tolerances,
            pool=pool,
            database=checked.database,
            target=checked.target,
        )
        for example in precompile or ():
            tuner.precompile(*example)
        return tuner

    return decorator


def precompile(kernel: Any, *args: Any, **kwargs: Any) -> list[Future[CompiledArtifact]]:
    """Start compiling a ``triton_kiln.autotune``'d kernel's configs for calls like ``kernel(*args)``.

    Returns the list of futures at once; the first real call waits only for what is missing.
    Arguments may be dtypes standing for tensors (``torch.float16``), as in Triton's warmup.
    """
    if not isinstance(kernel, Autotuner):
        raise TypeError(
            f"kiln.precompile takes a kernel decorated with kiln.autotune, got {type(kernel).__name__}; "
            f"for a plain @triton.jit kernel, submit CompileRequests to a CompilePool."
        )
    return kernel.precompile(*args, **kwargs)

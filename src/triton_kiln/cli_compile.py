"""``kiln compile MODULE:KERNEL``: compile a kernel's configs for several targets, here or on Ray.

::

    kiln compile mylib.kernels:matmul --signature 'a_ptr=*fp16,b_ptr=*fp16,c_ptr=*fp16,M=i32,...' \\
        --value M=4096,N=4096,K=4096 --target cuda:90 --target cuda:100 \\
        [--config 'BLOCK_M=64,num_warps=4' ...] [--ray HOST:PORT]

The configs are the kernel's own (a ``triton.autotune`` / ``kiln.autotune`` kernel's list),
or those given with ``--config`` (which replace them); ``--constexpr NAME=VALUE`` adds values
common to every config. ``--signature`` (Triton's notation: ``*fp16``, ``*fp16:1``, ``i32:16``,
``i32:1``) and ``--value`` describe the calls tuning will make; their requests are built as a
real call's (:mod:`kiln.cli_signature`), so tuning finds these binaries in the cache. One request
per config, target and call goes to the local :class:`~kiln.pool.CompilePool`, or with ``--ray``
to a :class:`~kiln.farm.RayCompilePool`; either stores every artifact in the kiln cache (and, with
a remote cache configured, in it too). A progress bar runs on a terminal; the end is a summary
of failures by cause. The exit status is 0 unless ``--strict`` is given and a config failed.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click

from triton_kiln.errors import KilnError

summary_json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the summary as JSON here.",
)
"""``--json PATH``: the command's summary also written as JSON (``kiln compile``, ``kiln tune``)."""


def parse_target(text: str) -> Any:
    """``cuda:90`` -> ``GPUTarget("cuda", 90, 32)``; ``hip:gfx942`` -> ``GPUTarget("hip", "gfx942", 64)``."""
    from triton_kiln.triton_compat import GPUTarget

    backend, _, arch = text.partition(":")
    if backend == "cuda" and arch.isdigit():
        return GPUTarget("cuda", int(arch), 32)
    if backend == "hip" and arch.startswith("gfx"):
        return GPUTarget("hip", arch, 64)
    raise click.BadParameter(
        f"{text!r} is not a target; write cuda:90, cuda:100 or hip:gfx942", param_hint="--target"
    )


def _value(text: str) -> Any:
    """A value as written: a Python literal (``64``, ``1.5``, ``True``), else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _pairs(text: str, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint=what)
        pairs[name.strip()] = value.strip()
    return pairs


def resolve(spec: str) -> Any:
    """The object ``MODULE:NAME`` (or ``path/to/file.py:NAME``) names; the current directory is importable."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not MODULE:NAME", param_hint="MODULE:KERNEL")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        sys.path.insert(0, str(path.parent))
        module_name = path.stem
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.ClickException(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.ClickException(f"{module_name!r} has no {attr!r}") from None
    return obj


def kernel_and_configs(obj: Any) -> tuple[Any, list[Any]]:
    """The ``@triton.jit`` function under ``obj`` and its autotuner's configs (``triton.Config``s)."""
    from triton_kiln.triton_compat import is_jit_function

    configs: list[Any] = []
    inner = obj
    while not is_jit_function(inner):
        if hasattr(inner, "configs") and not configs:
            configs = list(inner.configs)
        if not hasattr(inner, "fn"):
            raise click.ClickException(f"{obj!r} is not a @triton.jit kernel nor an autotuned one")
        inner = inner.fn
    return inner, configs


def failure_cause(exc: BaseException) -> str:
    """A failure's cause for the summary: the signal, the limit, or the exception's type."""
    from triton_kiln.errors import (
        CompileTimeoutError,
        WorkerCrashedError,
        WorkerMemoryError,
        describe_exit,
        is_out_of_resources,
    )

    if isinstance(exc, CompileTimeoutError):
        return "timed out"
    if isinstance(exc, WorkerMemoryError):
        return "memory limit"
    if isinstance(exc, WorkerCrashedError):
        return f"crashed: {exc.signal_name or describe_exit(exc.returncode)}"
    if is_out_of_resources(exc):
        return "out of resources"
    return type(exc).__name__


@click.command("compile")
@click.argument("kernel_spec", metavar="MODULE:KERNEL")
@click.option(
    "--signature",
    default=None,
    help="Argument types in Triton's notation, or MODULE:DICT naming a dict: 'x_ptr=*fp32,n=i32:16'. "
    "*fp32 is a 16-byte aligned pointer (torch's; = *fp32:16), *fp32:1 one not aligned; i32 an "
    "unspecialized integer, i32:16 a multiple of 16, i32:1 equal to 1.",
)
@click.option(
    "--value",
    "values",
    multiple=True,
    help="One call's integers, 'M=4096,N=4096,K=4096' (repeat for more calls): each value "
    "specializes as in a real call (a multiple of 16, 1, or neither).",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    help="A config: 'BLOCK=64,num_warps=4,num_stages=3' (repeat; replaces the kernel's own).",
)
@click.option("--constexpr", "constexprs", multiple=True, help="NAME=VALUE given to every config (repeat).")
@click.option(
    "--target", "targets", multiple=True, help="cuda:90, cuda:100, hip:gfx942 (repeat) [default: cuda:90]."
)
@click.option(
    "--ray", "ray_address", default=None, help="Compile on this Ray cluster (host:port, or 'auto')."
)
@click.option(
    "--standing",
    is_flag=True,
    help="With --ray: use the nodes' standing compilers (`kiln farm up`), left running after "
    "[default: KILN_FARM_STANDING].",
)
@click.option("--workers", type=int, default=None, help="Local compile workers [default: KILN_WORKERS].")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    help="Seconds before a compile counts as hung [default: KILN_JOB_TIMEOUT_S].",
)
@click.option("--preload", multiple=True, help="Modules every compile worker imports first (repeat).")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="kiln cache to fill [default: KILN_CACHE_DIR].",
)
@click.option(
    "--bundle",
    "bundle_path",
    default=None,
    help="Refused: a bundle needs tuning on a GPU (`kiln tune MODULE:FUNCTION --bundle PATH`).",
)
@summary_json_option
@click.option("--strict", is_flag=True, help="Exit with status 1 when any config failed.")
def compile_command(
    kernel_spec: str,
    signature: str | None,
    values: tuple[str, ...],
    configs: tuple[str, ...],
    constexprs: tuple[str, ...],
    targets: tuple[str, ...],
    ray_address: str | None,
    standing: bool,
    workers: int | None,
    timeout_s: float | None,
    preload: tuple[str, ...],
    cache_dir: str | None,
    bundle_path: str | None,
    json_path: str | None,
    strict: bool,
) -> None:
    """Compile a kernel's configs for each --target into the kiln cache, here or on a Ray cluster.

    The binaries are those a real call with these argument types (and --value integers) looks
    up: 'kiln tune' and kiln.autotune then find them compiled."""
    if bundle_path is not None:
        raise click.ClickException(
            "--bundle: a bundle holds one tuned config per tuning key, chosen by timing on a GPU, and "
            "compiling alone chooses none. Compile into the cache here (or on --ray, with "
            "KILN_REMOTE_CACHE shared), then on a GPU of each target kind run `kiln tune "
            "MODULE:FUNCTION --bundle PATH` (FUNCTION: your workload calling the kernels) with the same "
            "cache; or tune with kiln.autotune there and write it with `kiln bundle save`."
        )
    requests = build_requests(kernel_spec, signature, configs, constexprs, targets or ("cuda:90",), values)
    pool = _make_pool(ray_address, workers, timeout_s, preload, cache_dir, standing=standing or None)
    started = time.perf_counter()
    try:
        failures = _run(pool, requests)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    wall_s = time.perf_counter() - started
    causes = Counter(failure_cause(exc) for _, exc in failures)
    where = f"Ray cluster {ray_address}" if ray_address else "the local pool"
    click.echo(f"{len(requests) - len(failures)} of {len(requests)} compiled on {where} in {wall_s:.1f} s")
    for cause, count in causes.most_common():
        click.echo(f"  {count:4d} failed: {cause}")
    for label, exc in failures:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        click.echo(f"  {label}: {first}", err=True)
    if json_path:
        summary = {
            "kernel": kernel_spec,
            "requests": len(requests),
            "compiled": len(requests) - len(failures),
            "wall_s": round(wall_s, 3),
            "failed": dict(causes),
            "failures": [
                {"config": label, "cause": failure_cause(e), "error": str(e)} for label, e in failures
            ],
        }
        Path(json_path).write_text(json.dumps(summary, indent=1) + "\n")
    if strict and failures:
        sys.exit(1)


def build_requests(
    kernel_spec: str,
    signature: str | None,
    configs: tuple[str, ...],
    constexprs: tuple[str, ...],
    targets: tuple[str, ...],
    values: tuple[str, ...] = (),
) -> list[Any]:
    """One request per config, target and ``--value`` call, as the autotuner builds a real call's
    (module :mod:`kiln.cli_signature`); requests that come out the same are listed once."""
    import triton

    from triton_kiln.cli_signature import call_requests, distinct, parse_types, parse_values
    from triton_kiln.tuning.configs import COMPILE_OPTIONS

    kernel, chosen = kernel_and_configs(resolve(kernel_spec))
    if signature is None:
        raise click.UsageError(
            "--signature is required: the type of each non-constexpr argument, 'x_ptr=*fp32,n=i32'"
        )
    if ":" in signature and "=" not in signature:
        types = resolve(signature)
        if not isinstance(types, dict):
            raise click.BadParameter(
                f"{signature!r} names a {type(types).__name__}, not a dict", param_hint="--signature"
            )
    else:
        types = _pairs(signature, "--signature")
    common = {k: _value(v) for item in constexprs for k, v in _pairs(item, "--constexpr").items()}
    if configs:
        chosen = []
        for text in configs:
            values_ = {k: _value(v) for k, v in _pairs(text, "--config").items()}
            kwargs = {k: v for k, v in values_.items() if k not in COMPILE_OPTIONS}
            options = {k: v for k, v in values_.items() if k in COMPILE_OPTIONS}
            chosen.append(triton.Config(kwargs, **options))
    if not chosen:
        chosen = [triton.Config({})]  # a plain @triton.jit kernel: one compile with --constexpr values
    arg_types = parse_types(kernel, {str(k): str(v) for k, v in types.items()})
    calls = parse_values(values, _pairs)
    try:
        return distinct(
            [
                request
                for target in targets
                for call in calls
                for request in call_requests(kernel, arg_types, call, chosen, common, parse_target(target))
            ]
        )
    except KilnError as exc:
        raise click.ClickException(str(exc)) from None


def _make_pool(
    ray_address: str | None,
    workers: int | None,
    timeout_s: float | None,
    preload: tuple[str, ...],
    cache_dir: str | None,
    *,
    standing: bool | None = None,
) -> Any:
    if ray_address is not None:
        from triton_kiln.farm import RayCompilePool

        return RayCompilePool(
            ray_address, job_timeout_s=timeout_s, cache_dir=cache_dir, preload=preload, standing=standing
        )
    from triton_kiln.pool import CompilePool

    return CompilePool(workers=workers, job_timeout_s=timeout_s, cache_dir=cache_dir, preload=preload)


def _run(pool: Any, requests: list[Any]) -> list[tuple[str, BaseException]]:
    from triton_kiln.progress import progress_bar

    failures: list[tuple[str, BaseException]] = []
    with progress_bar(total=len(requests), description="compiling", enabled=None) as bar:
        for request, future in pool.as_completed(requests):
            exc = future.exception()
            if exc is not None:
                failures.append((f"{request.label()} {request.target.backend}:{request.target.arch}", exc))
            bar.advance(failed=exc is not None)
    return failures

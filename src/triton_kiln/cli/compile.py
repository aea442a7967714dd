"""``kiln compile MODULE:KERNEL``: compile a kernel's configs for several targets, here or on Ray.

::

    kiln compile mylib.kernels:matmul --signature 'a_ptr=*fp16,b_ptr=*fp16,c_ptr=*fp16,M=i32,...' \\
        --value M=4096,N=4096,K=4096 --target cuda:90 --target cuda:100 \\
        [--config 'BLOCK_M=64,num_warps=4' ...] [--ray HOST:PORT]

The configs are the kernel's own (a ``triton.autotune`` / ``triton_kiln.autotune`` kernel's list),
or those given with ``--config`` (which replace them); ``--constexpr NAME=VALUE`` adds values
common to every config. ``--signature`` (Triton's notation: ``*fp16``, ``*fp16:1``, ``i32:16``,
``i32:1``) and ``--value`` describe the calls tuning will make; their requests are built as a
real call's (:mod:`triton_kiln.cli.signature`), so tuning finds these binaries in the cache. One request
per config, target and call goes to the local :class:`~triton_kiln.pool.CompilePool`, or with ``--ray``
to a :class:`~triton_kiln.farm.RayCompilePool`; either stores every artifact in the kiln cache (and, with
a remote cache configured, in it too). A progress bar runs on a terminal; the end is a summary
of failures by cause (a result found in the cache, compiled before, is counted as such, not as
a compile), and a line per failed config with the reason (for Triton's
``CompilationError``, its location and the reason, which its message puts last). The exit status is
1 when not one request compiled (every one failed, or the pool could not start), and with
``--strict`` when any failed; else 0.

Arguments are checked before anything is compiled, each a one-line ``Error:``: the module,
``--preload``, ``--workers``, ``--timeout`` and ``--json`` (whose folder is made then) in
:mod:`triton_kiln.cli.args`; ``--signature``, ``--value``, ``--config`` and ``--constexpr`` in
:mod:`triton_kiln.cli.signature`.
"""

from __future__ import annotations

import ast
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click

from triton_kiln.cli.args import a_kind, check_json_path, check_preloads, check_timeout, check_workers
from triton_kiln.cli.args import resolve as resolve  # noqa: PLC0414 - kiln tune imports it from here
from triton_kiln.cli.compile_failures import failure_cause, failure_line
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
    from triton_kiln.compile.request import target_from_text

    target = target_from_text(text)
    if target is not None:
        return target
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


def kernel_and_configs(obj: Any, spec: str) -> tuple[Any, list[Any]]:
    """The ``@triton.jit`` function under ``obj`` (what ``spec`` names) and its autotuner's configs
    (``triton.Config``s)."""
    from triton_kiln.triton_compat import is_jit_function

    configs: list[Any] = []
    inner = obj
    while not is_jit_function(inner):
        if hasattr(inner, "configs") and not configs:
            configs = list(inner.configs)
        if not hasattr(inner, "fn"):
            raise click.ClickException(
                f"{spec} is {a_kind(obj)}, not a @triton.jit kernel nor an autotuned one"
            )
        inner = inner.fn
    return inner, configs


@click.command("compile", short_help="Compile a kernel's configs into the cache, here or on Ray.")
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
@click.option(
    "--workers",
    type=int,
    default=None,
    callback=check_workers,
    help="Local compile workers [default: KILN_WORKERS].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    callback=check_timeout,
    help="Seconds before a compile counts as hung [default: KILN_JOB_TIMEOUT_S].",
)
@click.option(
    "--preload",
    multiple=True,
    help="Modules every compile worker imports first (repeat); each is imported here first.",
)
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
@click.option(
    "--strict",
    is_flag=True,
    help="Exit with status 1 when any config failed (without it: when none compiled).",
)
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
    up: 'kiln tune' and triton_kiln.autotune then find them compiled. The exit status is 1 when none
    compiled (with --strict: when any failed)."""
    if bundle_path is not None:
        raise click.ClickException(
            "--bundle: a bundle holds one tuned config per tuning key, chosen by timing on a GPU, and "
            "compiling alone chooses none. Compile into the cache here (or on --ray, with "
            "KILN_REMOTE_CACHE shared), then on a GPU of each target kind run `kiln tune "
            "MODULE:FUNCTION --bundle PATH` (FUNCTION: your workload calling the kernels) with the same "
            "cache; or tune with kiln.autotune there and write it with `kiln bundle save`."
        )
    requests = build_requests(kernel_spec, signature, configs, constexprs, targets or ("cuda:90",), values)
    if ray_address is None:  # on a cluster the nodes import them, maybe from what is not here
        check_preloads(preload)
    if json_path:
        check_json_path(json_path)  # its folder made now, the arguments being good; written at the end
    pool = _make_pool(ray_address, workers, timeout_s, preload, cache_dir, standing=standing or None)
    started = time.perf_counter()
    try:
        failures = _run(pool, requests)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    wall_s = time.perf_counter() - started
    causes = Counter(failure_cause(exc) for _, exc in failures)
    where = f"Ray cluster {ray_address}" if ray_address else "the local pool"
    ready = len(requests) - len(failures)
    hits = pool.stats.memory_hits + pool.stats.disk_hits  # a fresh pool: this command's lookups
    if hits:
        click.echo(
            f"{ready} of {len(requests)} ready on {where} in {wall_s:.1f} s: {ready - hits} compiled, "
            f"{hits} found in the cache (compiled before, not compiled again)"
        )
    else:
        click.echo(f"{ready} of {len(requests)} compiled on {where} in {wall_s:.1f} s")
    for cause, count in causes.most_common():
        click.echo(f"  {count:4d} failed: {cause}")
    for label, exc in failures:
        click.echo(f"  {label}: {failure_line(exc)}", err=True)
    if json_path:
        summary = {
            "kernel": kernel_spec,
            "requests": len(requests),
            "compiled": ready - hits,
            "from_cache": hits,
            "wall_s": round(wall_s, 3),
            "failed": dict(causes),
            "failures": [
                {"config": label, "cause": failure_cause(e), "reason": failure_line(e), "error": str(e)}
                for label, e in failures
            ],
        }
        from triton_kiln.files import atomic_write

        atomic_write(Path(json_path), (json.dumps(summary, indent=1) + "\n").encode())
    if failures and (strict or len(failures) == len(requests)):
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
    (module :mod:`triton_kiln.cli.signature`); requests that come out the same are listed once."""
    from triton_kiln.cli.signature import (
        call_requests,
        check_common,
        check_constexpr_values,
        distinct,
        parse_config,
        parse_types,
        parse_values,
    )
    from triton_kiln.tuning.configs import config_label

    kernel, chosen = kernel_and_configs(resolve(kernel_spec), kernel_spec)
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
    check_common(kernel, common)
    if configs:
        wheres = [f" in --config {text!r}" for text in configs]
        chosen = [
            parse_config(kernel, {k: _value(v) for k, v in _pairs(text, "--config").items()}, text)
            for text in configs
        ]
    elif chosen:
        wheres = [f" in its autotune config {config_label(c)}" for c in chosen]
    else:
        import triton

        chosen, wheres = [triton.Config({})], [""]  # a plain @triton.jit kernel: one compile
    check_constexpr_values(kernel, list(zip(chosen, wheres, strict=True)), common)
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
    from triton_kiln.progress_bar import progress_bar

    failures: list[tuple[str, BaseException]] = []
    with progress_bar(total=len(requests), description="compiling", enabled=None) as bar:
        for request, future in pool.as_completed(requests):
            exc = future.exception()
            if exc is not None:
                failures.append((f"{request.label()} {request.target.backend}:{request.target.arch}", exc))
            bar.advance(failed=exc is not None)
    return failures

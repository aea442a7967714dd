"""``kiln tune MODULE:FUNCTION``: run a workload on this GPU, report what it tuned, bundle it.

::

    kiln tune mylib.bench:warm_up [--bundle mylib-sm90.tgz] [--kernel matmul ...] [--cache-dir DIR]
        [--json summary.json] [--strict] [--no-install]

FUNCTION is the user's workload: a callable taking no arguments that calls the library's kernels
on representative inputs. The command:

1. refuses at once without a usable GPU (``torch.cuda.is_available()``): tuning times every config
   on the GPU it runs on; ``kiln compile`` fills the cache without one;
2. ``triton_kiln.install()`` (unless ``--no-install``), so every ``triton.autotune`` kernel the workload's
   modules define from then on is a ``triton_kiln.autotune`` one, then imports and calls FUNCTION;
3. reads back from the tuning database the runs begun since the command started
   (:func:`triton_kiln.tuning.recent.runs_since`): per kernel and key, the chosen config, configs tried
   and failed by cause, wall time;
4. with ``--bundle PATH``, writes the variants recorded in the kiln cache (``kiln bundle save``'s
   path: :func:`triton_kiln.bundle.collect_recorded` + :func:`triton_kiln.bundle.write_bundle`) of the kernels
   tuned here, or of ``--kernel`` NAMEs.

``--bundle`` and ``--json`` are checked before step 2 (:func:`check_output`): a path kiln could not
write is refused before any tuning, not after it. If the bundle cannot be written anyway, the error
says where the results are (the tuning database, the kiln cache), and ``--json`` is still written.

If FUNCTION raises, its last traceback line is an ``Error:``, and what was tuned before is still
reported and bundled (every finished run is already in the database); the exit status is then 1.
Otherwise it is 0, or with ``--strict`` 1 when a run found no working config or did not finish.
With ``KILN_REMOTE_CACHE`` set, the autotuner also writes each finished run to the remote cache
(:mod:`triton_kiln.remote.tuning`), and the output says so.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from triton_kiln.cli.args import a_kind
from triton_kiln.cli.compile import resolve, summary_json_option

if TYPE_CHECKING:
    from triton_kiln.tuning.recent import RunOutcome

NO_GPU = (
    "kiln tune needs a GPU: it times every config on the GPU it runs on, and {why}. "
    "`kiln compile MODULE:KERNEL --target cuda:90` fills the kiln cache without one; then run "
    "`kiln tune` on a machine with a GPU of the target kind (a cuda:100 bundle is tuned on a cuda:100 GPU)."
)


def gpu_problem() -> str | None:
    """Why this process cannot tune (no torch, no usable GPU), or ``None``."""
    try:
        import torch
    except ImportError as exc:
        return NO_GPU.format(why=f"torch cannot be imported here ({exc})")
    if not torch.cuda.is_available():
        return NO_GPU.format(why="torch.cuda.is_available() is False on this machine")
    return None


def check_workload_spec(spec: str) -> None:
    """Refuse a FUNCTION that is not written MODULE:NAME, before anything is imported or started."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not MODULE:FUNCTION (e.g. mylib.bench:warm_up)", param_hint="MODULE:FUNCTION"
        )


def workload(spec: str) -> Callable[[], Any]:
    """The zero-argument callable ``spec`` names (imported now: after ``triton_kiln.install()``)."""
    obj = resolve(spec)
    if not callable(obj):
        raise click.ClickException(
            f"{spec} is {a_kind(obj)}, not a function; FUNCTION is a function taking no "
            f"arguments that calls your kernels on representative inputs."
        )
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return cast("Callable[[], Any]", obj)  # a builtin or C callable: called as it is
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if required:
        raise click.ClickException(
            f"{spec} takes arguments ({', '.join(required)}); FUNCTION is called with none: wrap the "
            f"call with representative inputs in a function without parameters."
        )
    return cast("Callable[[], Any]", obj)


def raised_line(spec: str, exc: BaseException) -> str:
    """``mylib.bench:warm_up raised RuntimeError: boom (at bench.py:12 in warm_up)``."""
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    frames = traceback.extract_tb(exc.__traceback__)
    where = (
        f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    )
    return f"{spec} raised {last}{where}"


@dataclasses.dataclass(frozen=True)
class CompileCounts:
    """What the process's compile pool did (:class:`~triton_kiln.pool.PoolStats`), and its difference."""

    requested: int
    compiled: int
    cached: int
    """Served from the kiln cache: in memory, on disk, or from the remote cache through it."""

    @classmethod
    def of(cls, stats: Any) -> CompileCounts:
        return cls(stats.submitted, stats.compiled, stats.memory_hits + stats.disk_hits)

    def __sub__(self, other: CompileCounts) -> CompileCounts:
        return CompileCounts(
            self.requested - other.requested, self.compiled - other.compiled, self.cached - other.cached
        )

    def line(self) -> str:
        return (
            f"compiles: {self.requested} requested, {self.compiled} compiled here, {self.cached} from "
            f"the kiln cache"
        )


@contextmanager
def _cache_scope(cache_dir: str | None) -> Iterator[Any]:
    from triton_kiln import settings

    if cache_dir is None:
        yield settings.current()
    else:
        with settings.scope(cache_dir=Path(cache_dir).expanduser()) as scoped:
            yield scoped


@click.command("tune", short_help="Tune a workload's autotuned kernels on this GPU.")
@click.argument("function_spec", metavar="MODULE:FUNCTION")
@click.option(
    "--bundle",
    "bundle_path",
    default=None,
    help="Write a bundle of what was tuned here (a directory, or .tar/.tar.gz/.tgz).",
)
@click.option(
    "--kernel",
    "kernels",
    multiple=True,
    help="Bundle this kernel (by name; repeat) instead of those tuned in this run.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="kiln cache to tune with and bundle from [default: KILN_CACHE_DIR].",
)
@summary_json_option
@click.option("--strict", is_flag=True, help="Exit with status 1 when a run found no working config.")
@click.option(
    "--no-install",
    is_flag=True,
    help="Do not call kiln.install() (FUNCTION's kernels are kiln.autotune'd already).",
)
def tune_command(
    function_spec: str,
    bundle_path: str | None,
    kernels: tuple[str, ...],
    cache_dir: str | None,
    json_path: str | None,
    strict: bool,
    no_install: bool,
) -> None:
    """Call a workload's FUNCTION on this GPU (its autotuned kernels tuned by kiln); report what was tuned."""
    from triton_kiln.bundle.format import check_bundle_path
    from triton_kiln.pool import get_pool
    from triton_kiln.redis_url import redacted_url

    check_workload_spec(function_spec)
    if kernels and bundle_path is None:
        raise click.UsageError("--kernel chooses what goes into the bundle: give --bundle PATH too")
    if bundle_path is not None:  # before minutes of tuning: the bundle is written after them
        check_bundle_path(Path(bundle_path))
        check_output(Path(bundle_path), f"--bundle {bundle_path}")
    if json_path:
        check_output(Path(json_path), f"--json {json_path}")
    problem = gpu_problem()
    if problem is not None:
        raise click.ClickException(problem)
    with _cache_scope(cache_dir) as current:
        if not current.use_tuning_db:
            raise click.ClickException(
                "kiln tune reads what was tuned from the tuning database, and KILN_USE_TUNING_DB=0 "
                "turns it off; unset it (or set it to 1)."
            )
        started = time.time()
        clock = time.perf_counter()
        if not no_install:
            import triton_kiln as kiln

            kiln.install()
        function = workload(function_spec)
        pool = get_pool()  # the process's pool, which triton_kiln.autotune'd kernels compile in
        before = CompileCounts.of(pool.stats)
        error: BaseException | None = None
        try:
            function()
        except (Exception, KeyboardInterrupt) as exc:  # reported below; nothing tuned is lost
            error = exc
        wall_s = time.perf_counter() - clock
        compiles = CompileCounts.of(pool.stats) - before
        if error is not None:
            click.echo(f"Error: {raised_line(function_spec, error)}", err=True)
        outcomes = _report(current, started, wall_s)
        click.echo(compiles.line())
        written = None
        if bundle_path is not None:
            names = list(kernels) or sorted({o.kernel for o in outcomes if o.best_label is not None})
            written = _bundle(Path(bundle_path), current, names)
        if current.remote_cache is not None and any(o.finished for o in outcomes):
            where = redacted_url(current.remote_cache)
            click.echo(f"tuning results also in the remote cache {where} (runs taken from it are listed too)")
    if json_path:
        summary = {
            "function": function_spec,
            "wall_s": round(wall_s, 3),
            "error": None if error is None else raised_line(function_spec, error),
            "runs": [o.to_json() for o in outcomes],
            "compiles": dataclasses.asdict(compiles),
            "bundle": None if written is None else str(written),
            "remote_cache": None if current.remote_cache is None else redacted_url(current.remote_cache),
        }
        try:
            Path(json_path).write_text(json.dumps(summary, indent=1) + "\n")
        except OSError as exc:
            from triton_kiln.files import write_error

            raise write_error(f"--json {json_path}", Path(json_path), exc) from None
    if isinstance(error, KeyboardInterrupt):
        sys.exit(130)
    unbundled = bundle_path is not None and written is None
    if error is not None or unbundled or (strict and not all(o.succeeded for o in outcomes)):
        sys.exit(1)


def _report(current: Any, started: float, wall_s: float) -> list[RunOutcome]:
    """Print the runs begun since ``started`` in the tuning database ``current`` names; return them."""
    from triton_kiln.tuning import TuningDatabase, default_database_path
    from triton_kiln.tuning.recent import RunOutcome, runs_since

    path = default_database_path(current)
    if not path.exists():
        runs = []
    else:
        with TuningDatabase(path) as database:
            runs = runs_since(database, started)
    outcomes = [RunOutcome.of(run) for run in runs]
    click.echo(format_report(outcomes, wall_s, path))
    return outcomes


def format_report(outcomes: list[RunOutcome], wall_s: float, path: Path) -> str:
    """The report: a header line, then each run (:meth:`RunOutcome.lines`)."""
    if not outcomes:
        return (
            f"nothing was tuned in {wall_s:.1f} s: FUNCTION launched no autotuned kernel for a key "
            f"the tuning database {path} did not already hold (finished runs there are reused, not "
            f"tuned again; point KILN_TUNING_DB at a new file to tune again)"
        )
    kernels = len({o.kernel for o in outcomes})
    devices = sorted({f"{o.device_name} (capability {o.capability})" for o in outcomes})
    failed = sum(1 for o in outcomes if not o.succeeded)
    head = (
        f"tuned {len(outcomes)} key(s) of {kernels} kernel(s) in {wall_s:.1f} s on {', '.join(devices)}"
        + (f"; {failed} without a working config" if failed else "")
    )
    return "\n".join([head, *(line for o in outcomes for line in o.lines())])


def check_output(path: Path, what: str) -> None:
    """Refuse an output ``path`` (``what``: the option and path as given) kiln could not write,
    before the workload runs: :func:`triton_kiln.files.check_writable` (under a file, a directory without
    write permission), then a file made and removed where ``path`` will go, which finds what
    permission bits do not tell (root in ``/proc``)."""
    from triton_kiln.files import OutputPathError, check_writable

    check_writable(path, what)
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the missing directories are made when it is written
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".kiln-tune-check-")
    except OSError as exc:
        raise OutputPathError(
            f"cannot write {what}: the directory {folder} takes no new file ({exc.strerror or exc})"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _bundle(path: Path, current: Any, names: list[str]) -> Path | None:
    """The variants of ``names`` recorded in the kiln cache of the settings ``current``, written to
    ``path`` (as `kiln bundle save`); ``None`` (said why) if none was written."""
    from triton_kiln.bundle import BundleError, collect_recorded, write_bundle
    from triton_kiln.files import write_error
    from triton_kiln.tuning import default_database_path

    if not names:
        click.echo(
            f"Error: no bundle written to {path}: nothing was tuned in this run; pass --kernel NAME to "
            f"bundle variants tuned earlier (or use `kiln bundle save`).",
            err=True,
        )
        return None
    cache_dir = current.cache_dir
    records: list[Any] = []
    binaries: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for name in names:
                found, artifacts = collect_recorded(cache_dir, name)
                records.extend(found)
                binaries.update(artifacts)
            written = write_bundle(path, records, binaries)
        except BundleError as exc:
            click.echo(f"Error: no bundle written to {path}: {exc}", err=True)
            return None
        except OSError as exc:  # the path was writable when checked, before the tuning
            click.echo(
                f"Error: {write_error(f'--bundle {path}', path, exc)}; no bundle was written; the tuning "
                f"results are in the tuning database {default_database_path(current)} and the "
                f"binaries in the kiln cache {cache_dir}: write the bundle from them with "
                f"`kiln bundle save PATH --cache-dir {cache_dir}`",
                err=True,
            )
            return None
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    for record in records:
        click.echo(f"bundle: {record.name}: {len(record.entries)} variant(s)")
    click.echo(f"written: {written}")
    return written

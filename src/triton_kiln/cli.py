"""kiln's command line (``kiln --help``).

Every kiln error (and every file-system error) a command meets ends as one ``Error: ...`` line
on stderr and exit status 1, never a traceback (:class:`_KilnGroup`); ``kiln --debug`` or
``KILN_DEBUG=1`` prints the traceback behind the line first; output into a pipe whose
reader left (``kiln report | head``) stops quietly, status 1. Settings are read by the
commands that need them, so a malformed ``KILN_*`` variable is that one line there, and
``kiln --help``, ``kiln bundle show`` and ``kiln settings`` (which shows it) still work; ``kiln
cache`` reads only the settings it uses (:mod:`triton_kiln.cli_cache`). ``kiln report`` only reads the
tuning database; it and ``kiln bundle save`` check where they will write before the work
(:func:`triton_kiln.files.check_writable`), and say so naming the path as given.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import click

from triton_kiln.errors import KilnError


class _KilnGroup(click.Group):
    """A click group that turns :class:`~triton_kiln.errors.KilnError` and ``OSError`` into
    ``Error: <message on one line>`` and exit status 1 (a closed output pipe: status 1, quietly),
    and whose help follows the terminal's width (:func:`triton_kiln.terminal.width`)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        from triton_kiln.terminal import width

        extra.setdefault("max_content_width", width())  # click's own default is 80, whatever the terminal
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            except BrokenPipeError:  # `kiln report | head`: the reader has what it wanted
                _quiet_stdout()
                sys.exit(1)
            except (KilnError, OSError) as exc:
                text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
                raise click.ClickException(text or type(exc).__name__) from exc
        except click.ClickException as exc:
            if ctx.params.get("debug") or _debug_from_env():
                _print_traceback(exc)
            raise


def _debug_from_env() -> bool:
    """``KILN_DEBUG`` alone (a malformed other setting does not hide the traceback; a malformed
    ``KILN_DEBUG`` is off, and said by the commands that read the settings)."""
    from triton_kiln import settings
    from triton_kiln.errors import SettingsError

    try:
        return bool(settings.parse_variable("debug"))
    except SettingsError:
        return False


def _print_traceback(exc: BaseException) -> None:
    """The traceback behind a one-line error, on stderr: the exception the line was made from
    too, which the command hid from the line (``raise ... from None``)."""
    import traceback

    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if link.__cause__ is None and link.__context__ is not None:
            link.__suppress_context__ = False
        link = link.__cause__ or link.__context__
    click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the closed pipe's unflushed output is dropped at exit instead of
    failing there again ("Exception ignored ... BrokenPipeError")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@click.group(cls=_KilnGroup)
@click.version_option(package_name="triton-kiln")
@click.option("--debug", is_flag=True, help="Print the traceback behind an error line [default: KILN_DEBUG].")
def main(debug: bool) -> None:
    """kiln: crash-proof, fast compiling and autotuning of Triton kernels.

    Triton's compiles run in parallel in kiln's worker processes, so a compiler crash or hang
    costs one config, never your program; binaries and tuning results are kept in a cache on
    disk. `kiln demo` shows it in half a minute, without a GPU."""


@main.command(short_help="Compile real kernels; one aborts, one hangs, the rest go on.")
@click.option(
    "--arch",
    type=int,
    default=90,
    show_default=True,
    help="CUDA compute capability to compile for (no GPU needed), e.g. 80 or 90.",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Compile worker processes [default: KILN_WORKERS, else at most 8].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    help="Seconds before a compile counts as hung [default: KILN_JOB_TIMEOUT_S, else 5].",
)
def demo(arch: int, workers: int | None, timeout_s: float | None) -> None:
    """Compile real kernels through the pool; one aborts, one hangs. Exits 0 when all end as expected."""
    from triton_kiln.demo.run import run_demo
    from triton_kiln.triton_compat import GPUTarget

    ok = run_demo(target=GPUTarget("cuda", arch, 32), workers=workers, timeout_s=timeout_s, echo=click.echo)
    sys.exit(0 if ok else 1)


_SQLITE_HEADER = b"SQLite format 3\x00"
_DB_HINT = "pass --db the path of one (default: KILN_TUNING_DB, else <cache dir>/tuning.sqlite3)"
MAX_REPORT_RUNS = 1_000_000


def _check_tuning_database(path: Path) -> None:
    """Refuse a file that is not a kiln tuning database, or one of a newer kiln, in words for the
    command line; the file is only read (never written, even in a directory the user can write)."""
    from triton_kiln.tuning.schema import DEFAULT_BUSY_TIMEOUT_S, SCHEMA_VERSION, connect_read_only

    with open(path, "rb") as handle:
        header = handle.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        raise click.ClickException(f"{path} is not a kiln tuning database (not an SQLite file); {_DB_HINT}.")
    try:
        conn = connect_read_only(path, DEFAULT_BUSY_TIMEOUT_S)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        row, reason = None, f" ({exc})"
    else:
        reason = ""
    if row is None:
        raise click.ClickException(
            f"{path} is an SQLite file but not a readable kiln tuning database{reason}; {_DB_HINT}."
        )
    version = str(row[0])
    if version.isdigit() and int(version) > SCHEMA_VERSION:
        raise click.ClickException(
            f"{path} was written by a newer kiln (schema version {version}; this kiln reads up to "
            f"{SCHEMA_VERSION}): upgrade kiln (pip install -U triton-kiln) to read it, or pass --db "
            f"another database."
        )


@main.command(short_help="Print the latest tuning runs as tables, or write a page.")
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Tuning database (default: KILN_TUNING_DB, else <cache dir>/tuning.sqlite3).",
)
@click.option("--kernel", default=None, help="Only runs of this kernel (by name).")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_REPORT_RUNS),
    default=5,
    show_default=True,
    help=f"How many runs, newest first (1 to {MAX_REPORT_RUNS:,}).",
)
@click.option(
    "--json",
    "json_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write each run as JSON into this directory.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a self-contained HTML page instead of the tables: these runs with plots, and a "
    "table of every run in the database.",
)
def report(
    db_path: str | None, kernel: str | None, limit: int, json_dir: str | None, html_path: str | None
) -> None:
    """Print the latest tuning runs from the tuning database as tables (or write them as a page).

    The database is only read (a directory the user cannot write is fine); where the page or the
    JSON files cannot be written is said before it is read.
    """
    from triton_kiln.files import check_writable, safe_name, write_error
    from triton_kiln.tuning import TuningDatabase, default_database_path, format_table, write_json

    if html_path:
        check_writable(Path(html_path), f"--html {html_path}")
    if json_dir:
        check_writable(Path(json_dir), f"--json {json_dir}", directory=True)
    path = Path(db_path) if db_path else default_database_path()
    if not path.exists():  # a machine that has tuned nothing yet: not an error
        click.echo(
            f"no tuning runs yet (no tuning database at {path}): a kernel tuned with "
            f"triton_kiln.autotune, or by `kiln tune`, records its run there"
        )
        return
    _check_tuning_database(path)
    with TuningDatabase(path, read_only=True) as database:
        runs = database.runs(kernel=kernel, limit=limit)
        every_run = database.runs(limit=-1) if html_path else []
    if html_path:
        from triton_kiln.tuning.html_report import write_html

        try:
            written = write_html(html_path, runs, every_run, source=str(path))
        except OSError as exc:
            raise write_error(f"--html {html_path}", Path(html_path), exc) from None
        click.echo(f"written: {written} ({len(runs)} runs shown, {len(every_run)} in the database)")
    elif not runs:
        click.echo(f"no tuning runs{f' of {kernel!r}' if kernel else ''} in {path}")
        return
    for index, run in enumerate(runs):
        if not html_path:
            click.echo(format_table(run) + "\n")
        if json_dir:
            target = Path(json_dir) / f"{safe_name(run.kernel, fallback='kernel')}-{index}.json"
            try:
                write_json(run, target)
            except OSError as exc:
                raise write_error(f"--json {json_dir}", Path(json_dir), exc, directory=True) from None
            click.echo(f"written: {target}")


@main.group(short_help="Write and inspect bundles of tuned kernels.")
def bundle() -> None:
    """Write and inspect bundles of tuned kernels (binaries + launch metadata + tuning records)."""


@bundle.command("save", short_help="Write the tuned variants in the cache to a bundle.")
@click.argument("path", type=click.Path(dir_okay=True, file_okay=True))
@click.option("--kernel", default=None, help="Only this kernel (by name).")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="kiln cache holding the tuned variants (default: KILN_CACHE_DIR, else ~/.cache/kiln).",
)
def bundle_save(path: str, kernel: str | None, cache_dir: str | None) -> None:
    """Write every tuned variant recorded in the kiln cache to PATH (a directory, or .tar/.tar.gz/.tgz)."""
    import warnings

    from triton_kiln import settings
    from triton_kiln.bundle import BundleError, collect_recorded, write_bundle
    from triton_kiln.bundle.format import check_bundle_path
    from triton_kiln.files import check_writable, write_error

    check_bundle_path(Path(path))  # before anything is read or made
    check_writable(Path(path), f"the bundle {path}")
    root = Path(cache_dir) if cache_dir else settings.current().cache_dir
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            kernels, binaries = collect_recorded(root, kernel)
        except BundleError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            written = write_bundle(Path(path), kernels, binaries)
        except BundleError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise write_error(f"the bundle {path}", Path(path), exc) from None
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    for record in kernels:
        click.echo(f"{record.name}: {len(record.entries)} variant(s)")
    click.echo(f"written: {written}")


@bundle.command("show", short_help="List a bundle's kernels and variants.")
@click.argument("path", type=click.Path(exists=True))
def bundle_show(path: str) -> None:
    """List a bundle's kernels and variants (no GPU needed)."""
    from triton_kiln.bundle import BundleReader

    reader = BundleReader(path)  # a BundleError becomes one "Error:" line (_KilnGroup)
    manifest = reader.manifest
    click.echo(f"{path}: kiln {manifest.kiln_version}, Triton {manifest.triton_version}, {manifest.created}")
    for record in manifest.kernels:
        click.echo(f"{record.name} ({record.kernel_hash[:12]})")
        for entry in record.entries:
            kwargs = entry.config.get("kwargs", {})
            click.echo(
                f"  key {entry.key_values}  config {kwargs} warps={entry.config.get('num_warps')} "
                f"stages={entry.config.get('num_stages')}  sm_{entry.metadata['target']['arch']}  "
                f"{entry.source}"
            )


from triton_kiln.cli_cache import cache  # noqa: E402 - the group above must exist first
from triton_kiln.cli_compile import compile_command  # noqa: E402
from triton_kiln.cli_farm import farm  # noqa: E402
from triton_kiln.cli_settings import settings_command  # noqa: E402
from triton_kiln.cli_tune import tune_command  # noqa: E402

main.add_command(cache)
main.add_command(compile_command)
main.add_command(farm)
main.add_command(settings_command)
main.add_command(tune_command)

if __name__ == "__main__":  # pragma: no cover
    main()

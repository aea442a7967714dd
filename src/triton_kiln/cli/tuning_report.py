"""``kiln report``: the latest tuning runs of the tuning database as tables, JSON files or one page.

The database is only read, and refused in words when it is not a kiln tuning database or one of
a newer kiln (:func:`check_tuning_database`); where the page or the JSON files go is checked
before it is read (:func:`triton_kiln.files.check_writable`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import click

_SQLITE_HEADER = b"SQLite format 3\x00"
_DB_HINT = "pass --db the path of one (default: KILN_TUNING_DB, else <cache dir>/tuning.sqlite3)"
MAX_REPORT_RUNS = 1_000_000


def check_tuning_database(path: Path) -> None:
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


@click.command("report", short_help="Print the latest tuning runs as tables, or write a page.")
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
def report_command(
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
    check_tuning_database(path)
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

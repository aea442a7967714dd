"""``kiln cache info | clear | prune``: the cache directory, seen and cleaned (docs/CACHE.md).

None of these creates the cache directory; each reads ``KILN_CACHE_DIR`` (or ``--cache-dir``)
and, for ``info``, ``KILN_TUNING_DB`` and ``KILN_CACHE_MAX_MB``. The work is :mod:`kiln.cache`'s.
"""

from __future__ import annotations

from pathlib import Path

import click

_CACHE_DIR_OPTION = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="The kiln cache (default: KILN_CACHE_DIR, else ~/.cache/kiln).",
)


def _root(cache_dir: str | None) -> Path:
    from triton_kiln import settings

    return Path(cache_dir) if cache_dir else settings.current().cache_dir


@click.group()
def cache() -> None:
    """Show and clean the kiln cache (compiled kernels; the tuning database is kept)."""


@cache.command("info")
@_CACHE_DIR_OPTION
def cache_info(cache_dir: str | None) -> None:
    """Where the cache is, how many compiled kernels it holds, their size and the cap."""
    from triton_kiln import settings
    from triton_kiln.cache import STORE_DIR, human, info
    from triton_kiln.tuning.db import default_database_path

    current = settings.current()
    root = Path(cache_dir) if cache_dir else current.cache_dir
    found = info(
        root, default_database_path(current if cache_dir is None else current.replace(cache_dir=root))
    )
    click.echo(f"cache:           {root}{'' if found.exists else ' (does not exist: nothing compiled yet)'}")
    cap = "none" if current.cache_max_mb is None else human(current.cache_max_mb << 20)
    click.echo(
        f"compiled:        {found.entries} entries, {human(found.size)} in {STORE_DIR}/ "
        f"(cap {cap}, KILN_CACHE_MAX_MB)"
    )
    if found.temporary:
        click.echo(
            f"being written:   {human(found.temporary)} (or left by killed writers; cleared after 1 h)"
        )
    if found.old_formats:
        click.echo(
            f"older formats:   {human(found.old_formats)} (never read; `kiln cache clear` removes them)"
        )
    click.echo(f"bundle records:  {found.records} files, {human(found.records_size)}")
    db = "none yet" if found.tuning_db_size is None else human(found.tuning_db_size)
    click.echo(f"tuning database: {found.tuning_db}: {db} (not in the cap; kept by `kiln cache clear`)")
    click.echo(f"other:           {human(found.other)} (kiln's launcher build, Triton's key)")


@cache.command("clear")
@_CACHE_DIR_OPTION
@click.option("--yes", "-y", is_flag=True, help="Do not ask (for scripts and CI, which have no stdin).")
def cache_clear(cache_dir: str | None, yes: bool) -> None:
    """Remove every compiled kernel and bundle record (the tuning database is kept)."""
    from triton_kiln.cache import clear, human, info

    root = _root(cache_dir)
    if not root.is_dir():
        click.echo(f"no kiln cache at {root}: nothing to clear")
        return
    found = info(root, root / "tuning.sqlite3")
    if not yes:
        click.confirm(
            f"Remove {found.entries} compiled kernels ({human(found.size + found.old_formats)}) and "
            f"{found.records} bundle records from {root}?",
            abort=True,
        )
    cleared = clear(root)
    click.echo(
        f"removed {cleared.entries} compiled kernels and {cleared.records} bundle records "
        f"({human(cleared.freed)}) from {root}"
    )


@cache.command("prune")
@_CACHE_DIR_OPTION
@click.option(
    "--max-size",
    required=True,
    help="Evict least recently used kernels until the cache holds at most this: bytes, or 500M, 2G.",
)
def cache_prune(cache_dir: str | None, max_size: str) -> None:
    """Evict least recently used compiled kernels down to --max-size."""
    from triton_kiln.cache import human, parse_size, prune

    limit = parse_size(max_size)  # a bad size is one Error: line, before anything is read
    root = _root(cache_dir)
    if not root.is_dir():
        click.echo(f"no kiln cache at {root}: nothing to prune")
        return
    result = prune(root, limit)
    click.echo(
        f"removed {result.removed} compiled kernels ({human(result.freed)}); "
        f"{human(result.left)} left in {root}"
    )

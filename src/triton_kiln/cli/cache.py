"""``kiln cache info | clear | prune``: the cache directory, seen and cleaned (docs/CACHE.md).

None of these creates the cache directory. Each reads only the settings it uses, so a malformed
variable it does not use (``KILN_WORKERS=abc``) does not stop it: ``KILN_CACHE_DIR`` (unless
``--cache-dir`` is given) and, for ``info``, ``KILN_TUNING_DB`` and ``KILN_CACHE_MAX_MB``.
A directory that holds files but none that kiln writes at the top of its cache (:data:`MARKERS`)
is refused before it is walked: ``--cache-dir /usr`` would take seconds to measure and could
only be a mistake. The work is :mod:`triton_kiln.cli.cache_dir`'s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import click

_CACHE_DIR_OPTION = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="The kiln cache (default: KILN_CACHE_DIR, else ~/.cache/kiln).",
)

MARKERS = re.compile(r"artifacts-v\d+|bundle-records|tuning\.sqlite3|triton-key-v\d+\.json")
"""Names kiln writes at the top of its cache directory (:mod:`triton_kiln.cli.cache_dir`'s layout): the
artifact stores, the bundle records, the tuning database and Triton's key. (``native/`` and
``node/`` are too common a name to tell a kiln cache by.)"""

_BARE_NUMBER = re.compile(r"\s*\d+(?:\.\d+)?\s*")
_SIZE_LIKE = re.compile(r"\d+(?:\.\d+)?\s*[kmgtb].*", re.IGNORECASE)


def _settings(*names: str) -> dict[str, Any]:
    """The settings ``names`` in force (environment and scopes); a malformed one among them is a
    SettingsError naming its variable, one not among them is not read."""
    from triton_kiln import settings
    from triton_kiln.errors import SettingsError

    settings.warn_unknown_variables()
    rows = {row.name: row for row in settings.describe() if row.name in names}
    for name in names:
        if rows[name].error:
            raise SettingsError(rows[name].error)
    return {name: rows[name].value for name in names}


def _root(cache_dir: str | None) -> Path:
    return Path(cache_dir) if cache_dir else Path(_settings("cache_dir")["cache_dir"])


def _check_is_cache(root: Path) -> None:
    """Refuse a directory with entries but none of :data:`MARKERS` (an empty one is an empty cache)."""
    from triton_kiln.artifacts.artifact import STORE_DIR
    from triton_kiln.bundle.index import RECORDS_DIR
    from triton_kiln.triton_compat.core import KEY_FILE
    from triton_kiln.tuning.db import DATABASE_FILENAME

    with os.scandir(root) as entries:
        names = [entry.name for entry in entries]
    if names and not any(MARKERS.fullmatch(name) for name in names):
        shown = f"{STORE_DIR}/, {RECORDS_DIR}/, {DATABASE_FILENAME}, {KEY_FILE}"
        raise click.ClickException(
            f"{root} is not a kiln cache (it holds none of {shown}); nothing was read or "
            f"removed. Pass --cache-dir the kiln cache (default: KILN_CACHE_DIR, else ~/.cache/kiln)."
        )


def _max_size(ctx: click.Context, param: click.Parameter, text: str) -> int:
    """Bytes in ``--max-size``, read before anything else (a bad size is one ``click.BadParameter``
    and nothing is read or removed). A number without a unit is refused (KILN_CACHE_MAX_MB counts
    MiB, so a bare ``10240`` meant for 10 GiB would empty the cache), and so is one that is not
    whole bytes (``0.4B`` would round to 0 and empty it) or more than a disk holds."""
    from triton_kiln.cli.cache_dir import CacheSizeError, parse_size

    units = "K, M, G and T count powers of 1024, B bytes: 0B empties the store"
    if _BARE_NUMBER.fullmatch(text):
        raise click.BadParameter(
            f"{text.strip()} has no unit; give a unit: 10240M, 10G, or 500K ({units}); nothing was removed"
        )
    try:
        return parse_size(text)
    except CacheSizeError as exc:
        if _SIZE_LIKE.fullmatch(text.strip()):  # a size, but not one to prune to
            raise click.BadParameter(f"{exc}; nothing was removed") from None
        raise click.BadParameter(
            f"{text!r} is not a size: give a number with a unit, as in 500K, 10240M, 10G or 1.5GiB "
            f"({units}); nothing was removed"
        ) from None


@click.group("cache", short_help="Show and clean the cache of compiled kernels.")
def cache_group() -> None:
    """Show and clean the kiln cache (compiled kernels; the tuning database is kept)."""


@cache_group.command("info", short_help="Where the cache is, what it holds, how big it is.")
@_CACHE_DIR_OPTION
def cache_info(cache_dir: str | None) -> None:
    """Where the cache is, how many compiled kernels it holds, their size and the cap."""
    from triton_kiln.artifacts.artifact import STORE_DIR
    from triton_kiln.bundle.index import RECORDS_DIR
    from triton_kiln.cli.cache_dir import human, info
    from triton_kiln.tuning.db import DATABASE_FILENAME

    used = _settings("cache_dir", "tuning_db", "cache_max_mb")
    root = Path(cache_dir) if cache_dir else Path(used["cache_dir"])
    if root.is_dir():
        _check_is_cache(root)
    found = info(root, Path(used["tuning_db"]) if used["tuning_db"] else root / DATABASE_FILENAME)
    click.echo(f"cache:           {root}{'' if found.exists else ' (does not exist: nothing compiled yet)'}")
    cap = "none" if used["cache_max_mb"] is None else human(used["cache_max_mb"] << 20)
    click.echo(
        f"compiled:        {found.entries} kernels, {human(found.size)} in {STORE_DIR}/ "
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
    click.echo(
        f"tuned variants:  {found.records} recorded, {human(found.records_size)} in {RECORDS_DIR}/ "
        f"(what `kiln bundle save` writes)"
    )
    db = "none yet" if found.tuning_db_size is None else human(found.tuning_db_size)
    click.echo(f"tuning database: {found.tuning_db}: {db} (not in the cap; kept by `kiln cache clear`)")
    click.echo(f"other:           {human(found.other)} (kiln's launcher build, Triton's key)")


@cache_group.command("clear", short_help="Remove the compiled kernels and bundle records (not tunings).")
@_CACHE_DIR_OPTION
@click.option("--yes", "-y", is_flag=True, help="Do not ask (for scripts and CI, which have no stdin).")
def cache_clear(cache_dir: str | None, yes: bool) -> None:
    """Remove every compiled kernel and bundle record (the tuning database is kept)."""
    from triton_kiln.cli.cache_dir import clear, human, info

    root = _root(cache_dir)
    if not root.is_dir():
        click.echo(f"no kiln cache at {root}: nothing to clear")
        return
    _check_is_cache(root)
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


@cache_group.command("prune", short_help="Evict least recently used kernels down to a size.")
@_CACHE_DIR_OPTION
@click.option(
    "--max-size",
    required=True,
    callback=_max_size,
    help="Evict least recently used kernels until the cache holds at most this much: a number with "
    "a unit, K, M, G, T (powers of 1024) or B for bytes: 500M, 10G, 0B (empties it).",
)
def cache_prune(cache_dir: str | None, max_size: int) -> None:
    """Evict least recently used compiled kernels down to --max-size."""
    from triton_kiln.cli.cache_dir import human, prune

    root = _root(cache_dir)
    if not root.is_dir():
        click.echo(f"no kiln cache at {root}: nothing to prune")
        return
    _check_is_cache(root)
    result = prune(root, max_size)
    click.echo(
        f"removed {result.removed} compiled kernels ({human(result.freed)}); "
        f"{human(result.left)} left in {root}"
    )

"""kiln's command line (``kiln --help``): the ``kiln`` group here, one module per command.

Modules: :mod:`.compile` (``kiln compile``; its arguments checked by :mod:`.args`, its
``--signature``/``--value`` made requests by :mod:`.signature`, its failures said by
:mod:`.compile_failures`), :mod:`.tune` (``kiln tune``), :mod:`.tuning_report` (``kiln report``),
:mod:`.bundle` (``kiln bundle save | show``), :mod:`.cache` (``kiln cache``; the cache
directory surveyed and cleaned by :mod:`.cache_dir`), :mod:`.settings_table` (``kiln
settings``), :mod:`.farm` (``kiln farm up | down``), :mod:`.demo` (``kiln demo``).

Imports: the command line stands on top; it may import any of kiln's packages and modules,
and none of them imports it (``python -m triton_kiln`` and the ``kiln`` script enter here).
Each command imports what it needs when it runs, so ``kiln --help`` loads neither Triton nor
torch.

Every kiln error (and every file-system error) a command meets ends as one ``Error: ...`` line
on stderr and exit status 1, never a traceback (:class:`_KilnGroup`); ``kiln --debug`` or
``KILN_DEBUG=1`` prints the traceback behind the line first; output into a pipe whose
reader left (``kiln report | head``) stops quietly, status 1. Settings are read by the
commands that need them, so a malformed ``KILN_*`` variable is that one line there, and
``kiln --help``, ``kiln bundle show`` and ``kiln settings`` (which shows it) still work; ``kiln
cache`` reads only the settings it uses (:mod:`triton_kiln.cli.cache`). ``kiln report`` only reads the
tuning database; it and ``kiln bundle save`` check where they will write before the work
(:func:`triton_kiln.files.check_writable`), and say so naming the path as given.
"""

from __future__ import annotations

import sys
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


# The commands, each in its module (imported once the group exists; names never shadow the modules).
from triton_kiln.cli.bundle import bundle_group  # noqa: E402
from triton_kiln.cli.cache import cache_group  # noqa: E402
from triton_kiln.cli.compile import compile_command  # noqa: E402
from triton_kiln.cli.demo import demo_command  # noqa: E402
from triton_kiln.cli.farm import farm_group  # noqa: E402
from triton_kiln.cli.settings_table import settings_command  # noqa: E402
from triton_kiln.cli.tune import tune_command  # noqa: E402
from triton_kiln.cli.tuning_report import report_command  # noqa: E402

for _command in (
    bundle_group,
    cache_group,
    compile_command,
    demo_command,
    farm_group,
    report_command,
    settings_command,
    tune_command,
):
    main.add_command(_command)

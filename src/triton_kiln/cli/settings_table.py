"""``kiln settings``: every setting's value, where it came from and what it means.

One row per setting, in the order of their declarations in :mod:`triton_kiln.settings`: its
variable, its value, its source (default, environment, scope) and its meaning, the first sentence
of the setting's declared doc (docs/SETTINGS.md shows all of it). The table fits the terminal
(:func:`triton_kiln.terminal.width`): where the meaning has no room as a column (an 80-column
terminal), it goes under its row, indented. A value too long for its column wraps in it, but a
path is never broken (a line holding one may be wider).
"""

from __future__ import annotations

import functools
import re
import textwrap
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from triton_kiln.settings import SettingSource

_GAP = "  "
_MIN_MEANING = 30  # narrower than this, the meaning goes under its row
_VALUE_W = 36  # the value column beside a meaning column (a longer value wraps, a path overflows)
_LONG = 80  # a meaning longer than this stops at its first top-level ": " or "; "
_ROLE = re.compile(r":\w+:`~?([^`]+)`")  # :func:`usable_cores` -> usable_cores


@click.command("settings", short_help="Print each setting's value, source and meaning.")
def settings_command() -> None:
    """Print the effective settings, where each came from (default, environment, scope) and what
    each means."""
    from triton_kiln import settings
    from triton_kiln.terminal import width
    from triton_kiln.unknown_names import unknown_message

    rows = settings.describe()
    cells = [(row.variable, _shown(row), _source(row)) for row in rows]
    meanings = meaning_of_each()
    click.echo("\n".join(_table(cells, [meanings.get(row.name, "") for row in rows], width(limit=None))))
    for var, closest in settings.unknown_variables().items():
        click.echo(unknown_message(var, closest))
    problems = [row.error for row in rows if row.error]
    if problems:
        raise click.ClickException(" ".join(problems))


def _shown(row: SettingSource) -> str:
    from triton_kiln import settings

    declared = settings.declarations()[row.name]
    if row.error:
        return repr(declared.shown(row.raw or ""))  # never a password
    if isinstance(row.value, bool):
        return "1" if row.value else "0"
    if row.value is None:
        return plain_text(declared.none)
    return declared.shown(str(row.value))


def _source(row: SettingSource) -> str:
    return f"not valid ({row.source})" if row.error else row.source


def _table(cells: list[tuple[str, str, str]], meanings: list[str], width: int) -> list[str]:
    """The rows as lines within ``width`` columns (see the module docstring)."""
    var_w = max(len("VARIABLE"), *(len(c[0]) for c in cells))
    source_w = max(len("SOURCE"), *(len(c[2]) for c in cells))
    room = width - var_w - source_w - 2 * len(_GAP)  # for the value (and the meaning beside it)
    longest = max(len(c[1]) for c in cells)
    value_w = min(longest, _VALUE_W)
    beside = room - value_w - len(_GAP) >= _MIN_MEANING
    if not beside:
        value_w = max(12, min(longest, room))
    meaning_w = room - value_w - len(_GAP)
    head = ["VARIABLE".ljust(var_w), "VALUE".ljust(value_w), "SOURCE".ljust(source_w)]
    lines = [_GAP.join([*head, "MEANING"] if beside else head).rstrip()]
    for (var, value, source), meaning in zip(cells, meanings, strict=True):
        values = _wrap(value, value_w) if " " in value else [value]  # a path stays whole
        means = _wrap(meaning, meaning_w) if beside else []
        for n in range(max(len(values), len(means))):
            parts = [
                (var if n == 0 else "").ljust(var_w),
                (values[n] if n < len(values) else "").ljust(value_w),
                (source if n == 0 else "").ljust(source_w),
            ]
            if beside:
                parts.append(means[n] if n < len(means) else "")
            lines.append(_GAP.join(parts).rstrip())
        if not beside and meaning:
            lines += _wrap(meaning, width - 4, indent="    ")
    return lines


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(
        text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    ) or [""]


def plain_text(text: str) -> str:
    """reST of a declaration as the terminal shows it: ``:func:`f``` as ``f()``, no markup."""
    text = re.sub(r":func:`~?([^`]+)`", r"\1()", text)
    return _ROLE.sub(r"\1", text).replace("``", "")


@functools.cache
def meaning_of_each() -> dict[str, str]:
    """``{setting name: the first sentence of its declared doc}``, shortened to its first clause
    where that sentence is long."""
    from triton_kiln import settings

    found: dict[str, str] = {}
    for name, declared in settings.declarations().items():
        text = plain_text(declared.doc)
        first = re.split(r"(?<=[a-z0-9)])\.\s+(?=[A-Z(`])", text, maxsplit=1)[0].rstrip(".")
        found[name] = _first_clause(first) if len(first) > _LONG else first
    return found


def _first_clause(text: str) -> str:
    """``text`` up to its first ``: `` or ``; `` outside parentheses (all of it if none)."""
    depth = 0
    for n, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if depth == 0 and char in ":;" and text[n + 1 : n + 2] == " ":
            return text[:n]
    return text

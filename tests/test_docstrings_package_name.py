"""Docstrings and comments name the importable package, ``triton_kiln``: ``kiln.x`` cannot be
imported (the name ``kiln`` on the package index is another project's), and the API reference
resolves the names it finds there."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "triton_kiln"
BARE = re.compile(r"(?<![\w.])kiln\.([A-Za-z_]\w*)")
LOGGER_CALL = re.compile(r"getLogger\([\"']kiln\.(\w+)[\"']\)")


def logger_names(root: Path) -> set[str]:
    """The ``X`` of every ``logging.getLogger("kiln.X")`` under ``root``: kiln's loggers are named
    ``kiln.*`` on purpose, and text that names one (on a line that speaks of logging) is right."""
    return {name for path in root.rglob("*.py") for name in LOGGER_CALL.findall(path.read_text())}


def _texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and triple-quoted string (docstrings) in one file."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and re.match(r"^[rRbBuU]*(\"\"\"|''')", token.string)
        ):
            found.append((token.start[0], token.string))
    return found


def _names_a_logger(text_line: str, name: str, loggers: set[str]) -> bool:
    return name in loggers and ("getLogger" in text_line or "log" in text_line.lower())


def bare_package_names(root: Path) -> list[str]:
    loggers = logger_names(root)
    problems = []
    for path in sorted(root.rglob("*.py")):
        for first_line, text in _texts(path):
            for offset, text_line in enumerate(text.split("\n")):
                for match in BARE.finditer(text_line):
                    if not _names_a_logger(text_line, match.group(1), loggers):
                        snippet = text_line[match.start() : match.start() + 40]
                        problems.append(f"{path.relative_to(root.parent)}:{first_line + offset}: {snippet}")
    return problems


def test_docstrings_and_comments_name_triton_kiln() -> None:
    problems = bare_package_names(SRC)
    assert not problems, "write triton_kiln.<name>, not kiln.<name>:\n" + "\n".join(problems[:40])


def test_the_check_finds_a_bare_name(tmp_path: Path) -> None:
    package = tmp_path / "triton_kiln"
    package.mkdir()
    (package / "m.py").write_text(
        '"""See :func:`kiln.autotune`.\n\nLogged on ``kiln.pool``.\nSee ``kiln.pool`` for the pool."""\n'
        'import logging\nlog = logging.getLogger("kiln.pool")\n'
    )
    assert bare_package_names(package) == [
        "triton_kiln/m.py:1: kiln.autotune`.",
        'triton_kiln/m.py:4: kiln.pool`` for the pool."""',
    ]

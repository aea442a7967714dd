"""Docstrings and comments name the importable package, ``triton_kiln``: ``kiln.x`` cannot be
imported (the name ``kiln`` on the package index is another project's), and the API reference
resolves the names it finds there."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "triton_kiln"
BARE = re.compile(r"(?<![\w.])kiln\.(?=[A-Za-z_])")
LOGGER = re.compile(r"getLogger\(([\"'])kiln\.")  # logger names are "kiln.*" on purpose


def _texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and triple-quoted string (docstrings) in one file."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and re.match(r"^[rRbBuU]*(\"\"\"|''')", token.string)
        ):
            found.append((token.start[0], token.string))
    return found


def bare_package_names(root: Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        for line, text in _texts(path):
            for match in BARE.finditer(LOGGER.sub("", text)):
                snippet = text[match.start() : match.start() + 40].split("\n")[0]
                problems.append(f"{path.relative_to(root.parent)}:{line}: {snippet}")
    return problems


def test_docstrings_and_comments_name_triton_kiln() -> None:
    problems = bare_package_names(SRC)
    assert not problems, "write triton_kiln.<name>, not kiln.<name>:\n" + "\n".join(problems[:40])


def test_the_check_finds_a_bare_name(tmp_path: Path) -> None:
    package = tmp_path / "triton_kiln"
    package.mkdir()
    (package / "m.py").write_text(
        '"""See :func:`kiln.autotune`."""\nimport logging\nlog = logging.getLogger("kiln.pool")\n'
    )
    assert bare_package_names(package) == ['triton_kiln/m.py:1: kiln.autotune`."""']

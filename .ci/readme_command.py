"""Print the README's set-up-and-demo command: in the first ```bash block with a command line
that says ``kiln demo``, the command lines up to and including that one, joined with ``&&``
(comments and blank lines left out; a trailing backslash joins the next line). .ci/run runs it
in a fresh venv, so CI checks what the README's first screen says: a dependency kiln imports
but does not declare fails there.

Usage: python .ci/readme_command.py [README.md]; exits 1, saying why, when there is none.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FENCE = re.compile(r"^```bash[ \t]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
MARK = "kiln demo"


def commands(block: str) -> list[str]:
    """The block's command lines: comments and blank lines left out, continuations joined."""
    found: list[str] = []
    pending = ""
    for raw in block.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        found.append(pending + line)
        pending = ""
    if pending:
        found.append(pending.strip())
    return found


def demo_command(readme: str) -> str:
    for match in FENCE.finditer(readme):
        lines = commands(match.group(1))
        for index, command in enumerate(lines):
            if MARK in command:
                return " && ".join(lines[: index + 1])
    raise LookupError(f"no ```bash block of the README has a command line with {MARK!r}")


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    try:
        print(demo_command(path.read_text()))
    except LookupError as exc:
        print(f"readme_command: {path}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

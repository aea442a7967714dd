"""The README and docs/ describe kiln as it is, for its users: no account of the project's own
work (work sessions, issue numbers, dated work logs, a notes folder), and a README short enough
to read in five minutes. History belongs in CHANGELOG.md (not checked here) and in git."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
README_MAX_WORDS = 1500

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")

_RULES = {
    "a work session": re.compile(r"\bsessions?\b", re.IGNORECASE),
    "an issue number": re.compile(r"(?<![\w/&(\[-])#\d+\b|\bissues?\s+#?\d+\b", re.IGNORECASE),
    "a dated heading (a work log)": re.compile(r"^#{1,6} .*\b20\d\d-\d\d-\d\d\b", re.MULTILINE),
    "a work round": re.compile(r"\b(?:this|next|last|previous) (?:round|GPU round)\b", re.IGNORECASE),
}


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (each replaced by as many blank lines)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def problems(text: str) -> list[str]:
    """Each line of ``text`` (outside code) that speaks of the project's own work, with why."""
    found = []
    for number, line in enumerate(prose(text).splitlines(), 1):
        bare = _INLINE_CODE.sub("``", line)
        for why, rule in _RULES.items():
            if rule.search(bare):
                found.append(f"line {number} ({why}): {line.strip()[:120]}")
    return found


def words(text: str) -> int:
    """Words of ``text`` outside fenced code blocks."""
    return len(prose(text).split())


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_page_tells_no_story_of_the_projects_work(page: Path) -> None:
    found = problems(page.read_text())
    assert not found, f"{page.relative_to(ROOT)} speaks of the project's own work:\n" + "\n".join(found)


def test_there_is_no_notes_folder_in_docs() -> None:
    assert not (ROOT / "docs" / "notes").exists(), "docs/notes holds plans: history lives in git"


def test_the_readme_is_short() -> None:
    count = words((ROOT / "README.md").read_text())
    assert count <= README_MAX_WORDS, (
        f"README.md has {count} words outside code blocks (at most {README_MAX_WORDS})"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("## 2026-11-28, sixteenth session (one H200)\n", 2),
        ("As #21 asked, the MoE is 8x faster.\n", 1),
        ("This was fixed in issue 40.\n", 1),
        ("Measured on an H200, 2026-11-28: 8.5x.\n", 0),
        ("See [the limits](#known-limits) and `x#1`.\n", 0),
        ("```\nsession 3 #40\n```\n", 0),
        ("Run the tests in this round.\n", 1),
    ],
)
def test_the_rules_catch_work_logs_and_leave_figures(text: str, expected: int) -> None:
    assert len(problems(text)) == expected, problems(text)


def test_words_leave_out_code_blocks() -> None:
    assert words("one two\n```bash\nthree four five\n```\nsix\n") == 3

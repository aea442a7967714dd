"""Render a raw terminal recording (``script(1)``'s file) as the screen it left, in plain text.

Used by ``bench/record_tuning.sh`` when tmux is missing. Understands what tqdm and a shell
write: printable text, ``\\r``, ``\\n``, backspace, cursor up/down/forward/back (``ESC[nA`` ...),
erase in line (``ESC[K``); other escape sequences are dropped. ``--at-middle-of TEXT`` renders
the stream only up to the middle one of TEXT's occurrences (a screen mid-run)::

    python bench/render_tty.py RAW [--width 100] [--height 30] [--at-middle-of "\\rtuning "]
"""

from __future__ import annotations

import argparse
import re
import sys

_ESCAPE = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b[=>78]")


def render(stream: str, width: int = 100, height: int = 30) -> str:
    """The last ``height`` lines of the screen ``stream`` leaves on a ``width``-column terminal."""
    rows: list[list[str]] = [[]]
    row = col = 0

    def put(char: str) -> None:
        nonlocal row, col
        if col >= width:  # wrap
            row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
        line = rows[row]
        line.extend(" " * (col - len(line) + 1))
        line[col] = char
        col += 1

    pos = 0
    while pos < len(stream):
        match = _ESCAPE.match(stream, pos)
        if match:
            pos = match.end()
            digits = re.sub(r"[^0-9;]", "", match.group(1) or "").split(";")[0]
            n = int(digits) if digits else 1
            code = match.group(2)
            if code == "A":
                row = max(0, row - n)
            elif code == "B":
                row += n
            elif code == "C":
                col = min(width - 1, col + n)
            elif code == "D":
                col = max(0, col - n)
            elif code == "K":
                del rows[row][col:]
            while len(rows) <= row:
                rows.append([])
            continue
        char = stream[pos]
        pos += 1
        if char == "\r":
            col = 0
        elif char == "\n":  # a pty turns every \n into \r\n; script's own header has bare ones
            row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
        elif char == "\b":
            col = max(0, col - 1)
        elif char == "\t":
            col = min(width - 1, (col // 8 + 1) * 8)
        elif char == "\x1b" or ord(char) < 32:
            continue
        else:
            put(char)
    lines = ["".join(line).rstrip() for line in rows]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines[-height:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw")
    parser.add_argument("--width", type=int, default=100)
    parser.add_argument("--height", type=int, default=30)
    parser.add_argument("--at-middle-of", default=None)
    args = parser.parse_args()
    with open(args.raw, encoding="utf-8", errors="replace", newline="") as handle:
        stream = handle.read()
    if stream.startswith("Script started"):  # script(1)'s header and trailer lines
        stream = stream.split("\n", 1)[-1]
        stream = re.sub(r"\n*Script done [^\n]*\n?$", "", stream)
    if args.at_middle_of is not None:
        marker = args.at_middle_of.encode().decode("unicode_escape")
        starts = [m.start() for m in re.finditer(re.escape(marker), stream)]
        if not starts:
            return 1
        cut = starts[len(starts) // 2]
        end = stream.find(marker, cut + 1)  # the whole redraw that begins there
        stream = stream[: end if end != -1 else len(stream)]
    print(render(stream, args.width, args.height))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How wide kiln's command-line output is (``kiln demo``, ``kiln settings``, ``kiln --help``).

The terminal's width: ``COLUMNS`` when set, else the terminal's own size, else 80 columns (output
into a pipe or a file). Prose wraps at that width, but at most :data:`PROSE_WIDTH` columns, since
longer lines are hard to read; tables may use the whole width.
"""

from __future__ import annotations

import shutil

PROSE_WIDTH = 100
MIN_WIDTH = 40
"""Narrower terminals get this many columns (and wrap them): nothing fits in fewer."""


def width(limit: int | None = PROSE_WIDTH) -> int:
    """The columns output may use: the terminal's, at least :data:`MIN_WIDTH`, at most ``limit``."""
    columns = max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)
    return columns if limit is None else min(columns, limit)

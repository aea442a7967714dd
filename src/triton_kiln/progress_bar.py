"""Progress bars for long batches: tqdm on a terminal, silence elsewhere."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class _Bar:
    def __init__(self, bar: Any) -> None:
        self._bar = bar
        self.failed = 0

    def advance(self, *, failed: bool = False) -> None:
        if failed:
            self.failed += 1
        if self._bar is not None:
            if failed:
                self._bar.set_postfix(failed=self.failed, refresh=False)
            self._bar.update(1)


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or not-a-file stream is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress_bar(total: int, description: str, enabled: bool | None) -> Iterator[_Bar]:
    """A progress bar on stderr. ``enabled=None`` shows it only when stderr is a terminal."""
    show = is_terminal(sys.stderr) if enabled is None else enabled
    if not show:
        yield _Bar(None)
        return
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread
    with tqdm(total=total, desc=description, unit="kernel", file=sys.stderr, leave=False) as bar:
        yield _Bar(bar)

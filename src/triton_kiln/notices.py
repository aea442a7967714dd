"""Warnings a user must see even when the application set up no logging.

kiln logs on ``kiln.*`` loggers and adds only a ``NullHandler`` (the logging HOWTO's rule for a
library), so with no logging configured its WARNING lines would vanish, where Python's own
``logging.lastResort`` would print them. A few warnings are about the user's own setup (a
malformed ``KILN_AUTOTUNE``, a misspelt ``KILN_*`` name) and are worthless unseen: :func:`warn`
logs them as usual when some handler other than a ``NullHandler`` would receive them, and
otherwise writes the one line to stderr, as ``lastResort`` would have.
"""

from __future__ import annotations

import logging
import sys


def _handled(logger: logging.Logger) -> bool:
    """Whether a record at WARNING on ``logger`` reaches a handler that is not a ``NullHandler``."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def warn(logger: logging.Logger, message: str) -> None:
    """``logger.warning(message)``, or ``message`` on stderr when no handler would show it."""
    if not logger.isEnabledFor(logging.WARNING):
        return
    if _handled(logger):
        logger.warning("%s", message)
    else:
        print(message, file=sys.stderr)

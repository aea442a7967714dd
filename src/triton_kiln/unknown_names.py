"""``KILN_*`` names in the environment that are not settings (a typo: ``KILN_JOBS``): found, matched
to the closest setting's variable and logged once per process on the ``kiln.settings`` logger.

The caller passes the settings' variables (:func:`triton_kiln.settings.variables`), so this module
needs nothing from the settings. The names kiln sets in its own child processes
(:mod:`triton_kiln.child_env`) and those with a prefix of :data:`INTERNAL_PREFIXES` are not
settings and are never reported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping

from triton_kiln import notices
from triton_kiln.child_env import INTERNAL_VARIABLES

log = logging.getLogger("kiln.settings")

INTERNAL_PREFIXES = ("KILN_TEST_", "KILN_CI_")
"""Prefixes of variables read by kiln's tests and CI scripts, not by kiln."""

_warned: set[str] = set()
_warned_lock = threading.Lock()


def unknown_variables(known: Collection[str], environ: Mapping[str, str]) -> dict[str, str | None]:
    """``{KILN_* name of environ that is not in known: the closest of known, or None}``."""
    import difflib  # only once a KILN_* name is set

    unknown: dict[str, str | None] = {}
    for var in sorted(environ):
        if not var.startswith("KILN_") or var in known or var in INTERNAL_VARIABLES:
            continue
        if var.startswith(INTERNAL_PREFIXES):
            continue
        close = difflib.get_close_matches(var, list(known), n=1, cutoff=0.6)
        unknown[var] = close[0] if close else None
    return unknown


def unknown_message(var: str, closest: str | None) -> str:
    hint = f"did you mean {closest}?" if closest else "`kiln settings` lists the settings"
    return f"{var} is not a kiln setting; {hint} (it is ignored)"


def warn_unknown_variables(known: Collection[str], environ: Mapping[str, str]) -> None:
    """Log each ``KILN_*`` name of ``environ`` not in ``known``, once per process; not in kiln's
    own child processes (the zygote, the sandboxes), whose parent has said it."""
    with _warned_lock:
        fresh = {var: environ[var] for var in environ if var.startswith("KILN_") and var not in _warned}
    if not fresh or any(var in environ for var in INTERNAL_VARIABLES):
        return  # the common case: one pass over the names (settings.current() calls this every time)
    for var, closest in unknown_variables(known, fresh).items():
        with _warned_lock:
            if var in _warned:
                continue
            _warned.add(var)
        notices.warn(log, f"kiln: {unknown_message(var, closest)}")

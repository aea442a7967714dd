"""The kinds of value a setting holds, each declared with its setting in :mod:`triton_kiln.settings`.

A :class:`Kind` says three things about a setting:

* how its ``KILN_*`` variable's text becomes a value (:attr:`Kind.parse`, which raises
  ``ValueError`` on a malformed text);
* what the variable accepts, in the words of the error a malformed text raises
  (:attr:`Kind.accepted`: "0 or 1", "a positive integer (MiB)"), also the "accepted" column of
  docs/SETTINGS.md;
* the range every value must be in, however it was given: the environment, ``scope()``, a
  ``CompilePool`` argument (:attr:`Kind.check`, which says what is wrong or returns ``None``).

Nothing here reads the environment or imports more than the standard library.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from triton_kiln.redis_url import EXPECTED, parse_redis_url, redacted_url, url_problem

T_co = TypeVar("T_co", covariant=True)

Check = Callable[[Any], str | None]
"""Why a value is out of range ("expected ..."), or ``None`` when it is in range."""


def _as_is(text: str) -> str:
    return text


@dataclass(frozen=True)
class Kind(Generic[T_co]):
    """How one setting's variable is parsed, what it accepts and the range of its values."""

    parse: Callable[[str], T_co]
    """The value of the variable's text (stripped, never empty); ``ValueError`` if it is malformed."""
    accepted: str
    """What the variable accepts, as the error for a malformed text says it."""
    check: Check | None = None
    """The range every value must be in (``None``: any value of the type)."""
    nullable: bool = False
    """``None`` is one of its values, whatever the default (``KILN_CACHE_MAX_MB=unlimited``)."""
    path: bool = False
    """A ``str`` given for it is kept as a :class:`~pathlib.Path` (``~`` expanded)."""
    shown: Callable[[str], str] = _as_is
    """How a value or a variable's text is shown in a message (a URL without its password)."""


# --- parsers: a variable's text to a value, ValueError if malformed -----------------------------


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise ValueError(value)
    return number


def nonnegative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def positive_float(value: str) -> float:
    number = float(value)
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(value)
    return number


def nonnegative_float(value: str) -> float:
    number = float(value)
    if not (number >= 0 and math.isfinite(number)):
        raise ValueError(value)
    return number


def _cap_mb(value: str) -> int | None:
    if value.strip().lower() in ("0", "unlimited", "none"):
        return None
    return positive_int(value)


def _optional_days(value: str) -> float | None:
    if value.strip().lower() in ("0", "none", "never"):
        return None
    return positive_float(value)


def _path(value: str) -> Path:
    return Path(value).expanduser()


# --- ranges: what every value must be, however it was given ------------------------------------


def int_range(low: int, high: int, what: str) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"expected {what} from {low} to {high:,}"
        return None

    return check


def _seconds_range(low: float, high: float | None) -> Check:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < low or (high is not None and value > high):
            bound = f"from {low:g} to {high:g}" if high is not None else f"of at least {low:g}"
            return f"expected a finite number of seconds {bound}"
        return None

    return check


def _days_range(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 < value <= 3650:
        return "expected a number of days above 0, at most 3650 (or None: no expiry)"
    return None


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _directory_usable(value: Any) -> str | None:
    path = Path(value)
    existing = _nearest_existing(path)
    if existing == path and not path.is_dir():
        return "expected a directory, and this is a file (or a device); point it at a directory"
    if not existing.is_dir():
        return f"expected a directory that can be created, but {existing} is not a directory"
    if existing != path and not os.access(existing, os.W_OK | os.X_OK):
        return f"expected a directory that can be created, but {existing} is not writable"
    return None


def _file_usable(value: Any) -> str | None:
    if value is None:
        return None
    path = Path(value)
    if path.is_dir():
        return "expected a database file, and this is a directory; name a file in it"
    existing = _nearest_existing(path.parent)
    if not existing.is_dir():
        return f"expected a file whose directory can be created, but {existing} is not a directory"
    if existing != path.parent and not os.access(existing, os.W_OK | os.X_OK):
        return f"expected a file whose directory can be created, but {existing} is not writable"
    return None


MIN_KEY_BYTES = 32
"""The shortest key ``KILN_REMOTE_KEY_FILE`` may hold: as long as an HMAC-SHA256 digest."""


def _key_file_problem(value: Any) -> str | None:
    path = Path(value)
    try:
        st = path.stat()
    except OSError as exc:
        return f"expected a readable key file ({exc.strerror})"
    if not path.is_file():
        return "expected a key file, and this is not a regular file"
    if st.st_mode & 0o077:
        return f"expected a key file only its owner can read (mode {st.st_mode & 0o777:o}; run chmod 600)"
    if st.st_size < MIN_KEY_BYTES:
        return f"expected a key of at least {MIN_KEY_BYTES} bytes (e.g. head -c 32 /dev/urandom > FILE)"
    return None


# --- the kinds ---------------------------------------------------------------------------------

FLAG: Kind[bool] = Kind(parse_bool, "0 or 1")
"""A boolean: ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``."""


def _auto_flag(value: str) -> bool | None:
    return None if value.strip().lower() == "auto" else parse_bool(value)


AUTO_FLAG: Kind[bool | None] = Kind(_auto_flag, "0, 1 or auto", nullable=True)
"""A switch kiln decides unless told: ``1``/``0`` as :data:`FLAG`, or ``auto`` (``None``)."""


def seconds(at_least: float, at_most: float | None = None) -> Kind[float]:
    """A finite number of seconds from ``at_least`` (0: zero allowed) to ``at_most`` (``None``: no bound)."""
    check = _seconds_range(at_least, at_most)
    if at_least > 0:
        return Kind(positive_float, "a positive, finite number of seconds", check)
    return Kind(nonnegative_float, "a finite number of seconds, 0 or more", check)


def count(high: int, what: str) -> Kind[int]:
    """A whole number from 1 to ``high`` of ``what`` (the words of the range error)."""
    return Kind(positive_int, "a positive integer", int_range(1, high, what))


def mib(high: int, what: str = "MiB") -> Kind[int]:
    """A size in MiB from 1 to ``high``."""
    return Kind(positive_int, "a positive integer (MiB)", int_range(1, high, what))


def integer(low: int, high: int, what: str) -> Kind[int]:
    """A whole number from ``low`` (0 or more) to ``high`` of ``what``."""
    parse = positive_int if low > 0 else nonnegative_int
    return Kind(parse, f"an integer from {low} to {high}", int_range(low, high, what))


MIB_CAP: Kind[int | None] = Kind(
    _cap_mb, "a positive integer (MiB), or 0 / unlimited", int_range(1, 1 << 30, "MiB"), nullable=True
)
"""A size cap in MiB; ``0``, ``unlimited`` or ``none`` is no cap (``None``)."""

DAYS: Kind[float | None] = Kind(
    _optional_days, "a positive number of days, or 0 / none", _days_range, nullable=True
)
"""A lifetime in days; ``0``, ``none`` or ``never`` is no expiry (``None``)."""

DIRECTORY: Kind[Path] = Kind(_path, "a directory path", _directory_usable, path=True)
"""A directory that exists or can be created."""

DATABASE_FILE: Kind[Path] = Kind(_path, "a file path", _file_usable, path=True)
"""A file that exists or whose directory can be created; never a directory."""

KEY_FILE: Kind[Path] = Kind(_path, "a file path", _key_file_problem, path=True)
"""A secret key's file: a regular file only its owner can read, of at least :data:`MIN_KEY_BYTES`."""

REDIS_URL: Kind[str] = Kind(parse_redis_url, EXPECTED, url_problem, shown=redacted_url)
"""A Redis URL (:mod:`triton_kiln.redis_url`), never shown with its password."""

NAME: Kind[str] = Kind(_as_is, "a name (any text)")
"""A name the user gives (a program's, in the program record): any text, kept as it is."""

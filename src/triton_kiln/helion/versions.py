"""The Helion releases kiln's adapter is written against: :mod:`.compat` checks the installed one
at import, and the package exports them without importing Helion."""

from __future__ import annotations

SUPPORTED_HELION = ("1.5.0", "1.5.1")

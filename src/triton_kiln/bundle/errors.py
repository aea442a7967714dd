"""The errors a bundle raises. Every refusal of a bundle is a :class:`BundleError`.

Bundles come from other machines, so they are untrusted input: a refusal names the bundle,
the field or member at fault and what to do, and never says anything about a file outside the
bundle (such a file is never opened).
"""

from __future__ import annotations

from typing import Any

from triton_kiln.errors import KilnError, MissingMetadataError


class BundleError(KilnError):
    """A bundle cannot be written, read, or used on this machine; the message says which and why."""


class BundleSchemaError(BundleError, ValueError):
    """A manifest field is missing or has the wrong type or value (the message gives its path)."""


class BundleMetadataError(BundleSchemaError, MissingMetadataError):
    """An entry's launch metadata lacks a field a launch needs (also a :class:`MissingMetadataError`)."""

    def __init__(self, field_name: str, kernel: str) -> None:
        MissingMetadataError.__init__(self, field_name, kernel)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field_name, self.kernel))


class BundleMemberError(BundleError):
    """A file of the bundle is missing, or is not a plain file inside it (a symlink, a hard link,
    an absolute path or one with ``..``, a device): kiln reads only regular files of the bundle."""


class BundleTooLargeError(BundleError):
    """A member (or the whole archive, uncompressed) exceeds kiln's size limit for it."""


class BundleChecksumError(BundleError):
    """A binary's sha256 differs from the one in the manifest: the bundle is damaged or was edited."""

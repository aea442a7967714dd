"""Bundles: tuned kernels that a fresh process (or a C/C++ host) runs without compiling.

* :func:`save_bundle` writes the variants ``triton_kiln.autotune``'d kernels have launched in this
  process; ``kiln bundle save PATH`` writes those recorded in the kiln cache by any process.
* :func:`load_bundle` reads one back (:mod:`.runtime`); the format is in :mod:`.format` and
  ``docs/BUNDLES.md``.

Importing this package does not import Triton, nor the autotuner: :func:`save_bundle` takes any
:class:`BundleSource` (``triton_kiln.autotune``'d kernels are).

Imports: artifacts, the launcher (:mod:`triton_kiln.launch`), tuning records, and the top-level
errors, files, settings and version; the autotuner and the command line import this package,
never the reverse. :mod:`.schema` is this package's schema as :mod:`triton_kiln.tuning.schema`
is the tuning database's: each checks the format its package stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from triton_kiln.bundle.format import BUNDLE_FORMAT, BundleError, BundleReader, KernelRecord, write_bundle
from triton_kiln.bundle.index import collect_recorded, record_path
from triton_kiln.bundle.runtime import Bundle, BundledKernel, BundleMissError, load_bundle

__all__ = [
    "BUNDLE_FORMAT",
    "Bundle",
    "BundleError",
    "BundleMissError",
    "BundleReader",
    "BundleSource",
    "BundledKernel",
    "KernelRecord",
    "collect_recorded",
    "load_bundle",
    "record_path",
    "save_bundle",
    "write_bundle",
]


@runtime_checkable
class BundleSource(Protocol):
    """A kernel whose launched variants can be saved (``triton_kiln.autotune``'d kernels)."""

    def bundle_record(self) -> tuple[KernelRecord, dict[str, Any]]:
        """Its variants launched in this process: a KernelRecord and the binaries by key."""
        ...


def save_bundle(path: str | Path, *kernels: Any) -> Path:
    """Write the tuned variants of ``kernels`` (``triton_kiln.autotune``'d) that this process launched.

    Each variant carries its binary, launch metadata, argument specialization and tuning
    record. ``path`` is a directory, or an archive if it ends in ``.tar``, ``.tar.gz`` or
    ``.tgz``. Raises :class:`BundleError` if a kernel has not run yet (nothing to save).
    """
    records: list[KernelRecord] = []
    binaries: dict[str, Any] = {}
    for kernel in kernels:
        if not isinstance(kernel, BundleSource):
            raise TypeError(
                f"save_bundle takes kernels decorated with kiln.autotune, got {type(kernel).__name__}"
            )
        record, artifacts = kernel.bundle_record()
        if not record.entries:
            raise BundleError(
                f"{record.name} has not been called in this process, so there is nothing of it to save; "
                f"call it with real inputs first (or use `kiln bundle save`, which reads the kiln cache)."
            )
        records.append(record)
        binaries.update(artifacts)
    return write_bundle(Path(path), records, binaries)

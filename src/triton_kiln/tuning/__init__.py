"""Autotuning results: what each config measured (:mod:`.results`), where it is kept
(:mod:`.db`, one SQLite file safe for many processes; its file in :mod:`.schema`, the SQL of
writing a run in :mod:`.writes`), how it is shown (:mod:`.report`, :mod:`.html_report` with
:mod:`.html_charts` and :mod:`.svg`; :mod:`.recent` for ``kiln tune``), and how a
``triton.Config`` is named and written down (:mod:`.configs`).

Imports: only the top-level errors, files and settings; the autotuner, bundles, the remote
cache and the command line build on it. :mod:`.schema` shares its name with
:mod:`triton_kiln.bundle.schema`: each holds the schema of what its package stores.

::

    from triton_kiln.tuning import ConfigResult, TuningDatabase, format_table

    with TuningDatabase() as db:                      # Settings.cache_dir / "tuning.sqlite3"
        run = db.lookup(kernel_key, key_repr, device_name, capability, triton_version)
        if run is not None:
            print(format_table(run))
"""

from triton_kiln.tuning.db import (
    SCHEMA_VERSION,
    TuningDatabase,
    TuningDatabaseError,
    default_database_path,
)
from triton_kiln.tuning.report import format_table, read_json, speedup, speedups, to_json, write_json
from triton_kiln.tuning.results import STATUSES, ConfigResult, TuningRun

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "ConfigResult",
    "TuningDatabase",
    "TuningDatabaseError",
    "TuningRun",
    "default_database_path",
    "format_table",
    "read_json",
    "speedup",
    "speedups",
    "to_json",
    "write_json",
]

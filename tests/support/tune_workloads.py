"""Workloads for ``kiln tune``'s CPU tests: what FUNCTION may be; runs written as the autotuner writes them.

No GPU here: :func:`write_runs` writes to the tuning database (the one the settings in force name,
so ``--cache-dir`` reaches it) the runs a GPU tuning would have written, through the database's API.
"""

from __future__ import annotations

import os
from pathlib import Path

from triton_kiln.tuning import ConfigResult, TuningDatabase, default_database_path

NOT_CALLABLE = 42
DEVICE = "NVIDIA H100 80GB HBM3"


def needs_arguments(n: int) -> None:
    raise AssertionError("never called: it takes an argument")


def touch() -> None:
    """Marks that it ran (the file named by TUNE_MARKER)."""
    Path(os.environ["TUNE_MARKER"]).write_text("called")


def _config(block: int) -> dict[str, object]:
    return {"kwargs": {"BLOCK": block}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}


def write_runs() -> None:
    """One run with a winner (and a crash, a wrong output, a pruned config), one where nothing worked."""
    with TuningDatabase(default_database_path()) as db:
        run = db.begin_run("scale_kernel", "a" * 64, '{"n": 4096}', DEVICE, "9.0", "3.6.0", "BLOCK=64")
        db.record(run, ConfigResult("BLOCK=64", _config(64), "ok", compile_s=0.4, runtime_ms=0.02))
        db.record(run, ConfigResult("BLOCK=128", _config(128), "ok", compile_s=0.4, runtime_ms=0.0125))
        crash = "compile of scale_kernel[BLOCK=256] was killed by SIGABRT"
        db.record(run, ConfigResult("BLOCK=256", _config(256), "crashed", reason=crash))
        db.record(run, ConfigResult("BLOCK=512", _config(512), "wrong_output", runtime_ms=0.01))
        db.record(run, ConfigResult("BLOCK=1024", _config(1024), "pruned", reason="by prune_configs_by"))
        db.finish_run(run, "BLOCK=128", 2.5, 0.6)
        none = db.begin_run("norm_kernel", "b" * 64, '{"n": 8}', DEVICE, "9.0", "3.6.0", "BLOCK=64")
        db.record(none, ConfigResult("BLOCK=64", _config(64), "out_of_resources", reason="shared memory"))
        db.finish_run(none, None, 1.0, 0.5)


def write_then_fail() -> None:
    """Tunes one kernel, then the workload fails."""
    with TuningDatabase(default_database_path()) as db:
        run = db.begin_run("scale_kernel", "a" * 64, '{"n": 64}', DEVICE, "9.0", "3.6.0", "BLOCK=64")
        db.record(run, ConfigResult("BLOCK=64", _config(64), "ok", compile_s=0.4, runtime_ms=0.02))
        db.finish_run(run, "BLOCK=64", 0.5, 0.4)
    raise RuntimeError("the workload's third shape ran out of memory")


def tune_then_block_the_bundle() -> None:
    """Tunes ``add_kernel`` for real as far as a bundle needs (one variant compiled into the kiln
    cache and recorded there, its run in the tuning database), then puts a regular file where the
    bundle's directory is to be made (the path in TUNE_BLOCK): writing the bundle then fails."""
    from support.bundle_maker import compile_parts
    from triton_kiln import settings
    from triton_kiln.bundle.index import write_record

    cache = settings.current().cache_dir
    record, _ = compile_parts(cache)
    write_record(cache, record, record.entries[0])
    with TuningDatabase(default_database_path()) as db:
        run = db.begin_run("add_kernel", "e" * 64, '{"n": 4096}', DEVICE, "9.0", "3.6.0", "BLOCK=1024")
        db.record(run, ConfigResult("BLOCK=1024", _config(1024), "ok", compile_s=0.4, runtime_ms=0.01))
        db.finish_run(run, "BLOCK=1024", 0.5, 0.4)
    Path(os.environ["TUNE_BLOCK"]).write_text("in the way of the bundle's directory")

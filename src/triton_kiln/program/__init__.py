"""The program record: compiles a program needed, started again before its next run asks for them.

``record_file.py`` (the file: one per program in the cache directory, validated, bounded),
``recorder.py`` (this process's record: what it asks the pool for, noted in order, written by a thread;
``start`` / ``stop`` from :func:`triton_kiln.install` / ``uninstall``), ``replay.py`` (the last
run's compiles that no cache holds, submitted as the program imports their kernels' modules).
docs/TIMING.md, "The program record".
"""

from triton_kiln.program.recorder import current_replay, flush, note, start, stop, wait_for_replay

__all__ = ["current_replay", "flush", "note", "start", "stop", "wait_for_replay"]

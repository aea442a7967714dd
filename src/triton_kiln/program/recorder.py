"""This process's program record: what it asks kiln's pool for is noted, in order, and written.

::

    triton_kiln.install() -> start(settings)    (KILN_PROGRAM_RECORD=1, a disk cache, a program name)
        the record of this program read (record_file.py): one file, or none
        -> Recorder (this run = the record's runs + 1) and, when the record lists compiles,
           replay.Replay: those no cache holds start in the pool (replay.py)
    a routed plain @triton.jit compile done (routing/jit.py), a tuning's configs queued or a
    tuned config compiled for its launch (autotuner/) -> note(requests, source)
        new to this run: an Entry (kernel by module and qualname, identity, key, canonical parts)
        -> the writer thread wakes, waits WRITE_DELAY_S for more, and rewrites the record
           atomically: this run's entries first, in order, then earlier runs' (record.merged),
           at most KILN_PROGRAM_RECORD_MAX
    triton_kiln.uninstall() -> stop(), and interpreter exit -> flush(): what is noted and not yet
        written is written; after stop() nothing more is noted and a replay in progress stops

The caller's thread only adds to a dict: a routed kernel's first launch must not wait on a file
write and its fsync, and a run that compiles many kernels in a burst writes the record a few
times, not once per kernel.

A compile Triton's own cache serves never reaches the pool, so it is not noted: nothing would be
started for it. A kernel defined in ``__main__`` or in a function body cannot be found by name in
the next process, so it is not recorded. Processes sharing a cache directory and a program (the
ranks of one job) write one file: the last write wins, and each is a whole record.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from triton_kiln.compile.values import canonical
from triton_kiln.program import record_file as record_mod
from triton_kiln.program.record_file import Entry, ProgramRecord

if TYPE_CHECKING:
    from triton_kiln.compile.request import CompileRequest
    from triton_kiln.program.replay import Replay
    from triton_kiln.remote.programs import RemotePrograms
    from triton_kiln.settings import Settings

log = logging.getLogger("kiln.program")

Source = Literal["jit", "tuning"]
_UNFINDABLE_MODULES = ("__main__", "__mp_main__")
WRITE_DELAY_S = 0.5
"""How long the writer waits after a new entry for more before it writes: a burst of compiles
(a tuning's configs, a model's first step) becomes one write."""


def program_name(settings: Settings) -> str | None:
    """The name the record is kept under: ``KILN_PROGRAM``, else the entry script's real path
    (``python -m pkg.mod`` gives the module's file); ``None`` for ``python -c`` and an
    interactive session, which are no one program."""
    if settings.program:
        return settings.program
    script = sys.argv[0] if sys.argv else ""
    if script in ("", "-c"):
        return None
    path = Path(script)
    return str(path.resolve()) if path.exists() else script


def entry_of(request: CompileRequest, source: Source, run: int, runs: int) -> Entry | None:
    """``request`` as a record entry; ``None`` when the next process could not rebuild it (its
    kernel is not findable by name, or a value has no canonical form)."""
    spec = request.spec
    if spec.module in _UNFINDABLE_MODULES or "<locals>" in spec.qualname or request.target is None:
        return None
    try:
        return Entry(
            kernel=spec.name,
            module=spec.module,
            qualname=spec.qualname,
            identity=spec.identity,
            key=request.key,
            source=source,
            signature=list(request.signature.items()),
            constexprs=[(k, canonical(v)) for k, v in request.constexprs.items()],
            options=[(k, canonical(v)) for k, v in request.options.items()],
            attrs=[(k, canonical(v)) for k, v in request.attrs.items()],
            target=(request.target.backend, request.target.arch, request.target.warp_size),
            last_run=run,
            runs=runs,
        )
    except (TypeError, ValueError) as exc:  # a value with no canonical form, a name too long
        log.debug("kiln: %s is not recorded in the program record: %s", spec.name, exc)
        return None


class Recorder:
    """What this run asks the pool for, merged with the earlier runs' record and written by a
    background thread (:data:`WRITE_DELAY_S` after the first entry not yet written)."""

    def __init__(
        self,
        path: Path,
        program: str,
        earlier: ProgramRecord | None,
        cap: int,
        delay_s: float = WRITE_DELAY_S,
    ) -> None:
        self.path = path
        self.program = program
        self.cap = cap
        self.delay_s = delay_s
        self.run = (earlier.runs if earlier is not None else 0) + 1
        self.earlier: list[Entry] = list(earlier.entries) if earlier is not None else []
        self.previous_runs = {entry.key: entry.runs for entry in self.earlier}
        self.this_run: dict[str, Entry] = {}
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()  # one write at a time: the writer's and a flush()
        self.dirty = False  # entries noted since the last write
        self.wake = threading.Event()  # the writer's: an entry was noted, or close()
        self.stopped = threading.Event()
        self.closed = False
        self.writer: threading.Thread | None = None
        self.write_failed = False
        self.remote: RemotePrograms | None = None  # where each write is published too (KILN_REMOTE_CACHE)

    def adopt(self, earlier: ProgramRecord) -> None:
        """Take ``earlier`` (another machine's record, fetched once this run began) as the runs
        before this one."""
        with self.lock:
            self.run = earlier.runs + 1
            self.earlier = list(earlier.entries)
            self.previous_runs = {entry.key: entry.runs for entry in self.earlier}
            if self.this_run and not self.closed:  # written without them already: write the merge
                self.dirty = True
                self.wake.set()

    def note(self, requests: Iterable[CompileRequest], source: Source) -> None:
        """Record the requests this run has not noted yet (at most ``cap``); the writer writes
        them soon after. Returns at once: no file is touched on the caller's thread."""
        with self.lock:
            if self.closed:
                return
            added = False
            for request in requests:
                if len(self.this_run) >= self.cap:
                    break
                key = request.key
                if key in self.this_run:
                    continue
                entry = entry_of(request, source, self.run, self.previous_runs.get(key, 0) + 1)
                if entry is not None:
                    self.this_run[key] = entry
                    added = True
            if not added:
                return
            self.dirty = True
            self.wake.set()
            if self.writer is None:
                self.writer = threading.Thread(
                    target=self._write_when_noted, name="kiln-program-record-writer", daemon=True
                )
                self.writer.start()

    def flush(self) -> None:
        """Write what is noted and not yet written, now, on this thread (exit, ``uninstall()``,
        tests)."""
        with self.write_lock:
            with self.lock:
                if not self.dirty:
                    return
                self.dirty = False
            self._write()

    def close(self) -> None:
        """Note nothing more, write what is noted and let the writer thread end."""
        with self.lock:
            self.closed = True
        self.stopped.set()
        self.wake.set()  # a writer waiting for an entry ends
        self.flush()
        writer = self.writer
        if writer is not None and writer is not threading.current_thread():
            writer.join(timeout=5.0)

    def _write_when_noted(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stopped.wait(self.delay_s):  # more entries of the same burst join this write
                return
            self.flush()

    def _write(self) -> None:
        with self.lock:
            entries = record_mod.merged(self.earlier, list(self.this_run.values()), self.cap)
        record = ProgramRecord(
            format=record_mod.FORMAT, program=self.program[:4096], runs=self.run, entries=entries
        )
        try:
            record_mod.write(self.path, record)
        except OSError as exc:
            if not self.write_failed:  # said once: every later write would fail the same way
                self.write_failed = True
                log.info("kiln: the program record %s cannot be written (%s); it is not kept", self.path, exc)
        if self.remote is not None:  # a fault is the breaker's (one warning): never this thread's end
            self.remote.publish(self.program, record_mod.encoded(record))


_lock = threading.Lock()
_recorder: Recorder | None = None
_replay: Replay | None = None
_fetching: threading.Thread | None = None


def start(settings: Settings) -> Replay | None:
    """Begin this process's record (idempotent) and replay the last one; the replay, if any.

    Nothing happens with ``KILN_PROGRAM_RECORD=0``, without a disk cache, without a program name,
    or in kiln's own processes. Reading a missing record is one failed ``open``; a process starts
    only when the record lists a compile no cache holds. With ``KILN_REMOTE_CACHE``, each write
    is published there too, and where this machine holds no record of the program, thread
    "kiln-program-fetch" reads the remote's and replays it (the replay is then ``None`` here:
    :func:`wait_for_replay`).
    """
    global _recorder, _replay, _fetching
    from triton_kiln.procs import in_kiln_child

    if not settings.program_record or not settings.use_disk_cache or in_kiln_child():
        return None
    program = program_name(settings)
    if program is None:
        return None
    with _lock:
        if _recorder is not None:
            return _replay
        path = record_mod.record_path(settings.cache_dir, program)
        earlier = record_mod.read(path)
        _recorder = Recorder(path, program, earlier, settings.program_record_max)
        atexit.register(_recorder.flush)
        _recorder.remote = _remote_programs(settings)
        if earlier is not None and earlier.entries:
            from triton_kiln.program.replay import Replay

            _replay = Replay(program, earlier.entries[: settings.program_record_max], settings)
            _replay.begin()
        elif _recorder.remote is not None:
            _fetching = threading.Thread(
                target=_fetch_and_replay,
                args=(_recorder, _recorder.remote, settings),
                name="kiln-program-fetch",
                daemon=True,
            )
            _fetching.start()
        return _replay


def _remote_programs(settings: Settings) -> RemotePrograms | None:
    if settings.remote_cache is None:
        return None
    try:
        from triton_kiln.remote import remote_programs

        return remote_programs(settings, record_mod.FORMAT)
    except Exception as exc:  # a key file that cannot be read: the remote's own users say so
        log.info("kiln: the program record is not shared through the remote cache: %s", exc)
        return None


def _fetch_and_replay(recorder: Recorder, remote: RemotePrograms, settings: Settings) -> None:
    """Another machine's record of this program, replayed here as this machine's would be."""
    global _replay
    program = recorder.program
    data = remote.fetch(program)
    if data is None:
        return
    record = record_mod.parse(data, f"{program} in the remote cache {remote.where}")
    if record is None or not record.entries:
        return
    from triton_kiln.program.replay import Replay

    with _lock:
        if _recorder is not recorder:  # uninstall() came first
            return
        recorder.adopt(record)
        replay = _replay = Replay(program, record.entries[: settings.program_record_max], settings)
    log.debug("kiln: the program record of %s comes from the remote cache %s", program, remote.where)
    replay.begin()


def stop() -> None:
    """Stop noting (``uninstall()``); a replay in progress submits nothing more."""
    global _recorder, _replay, _fetching
    with _lock:
        recorder, replay, _recorder, _replay, _fetching = _recorder, _replay, None, None, None
    if recorder is not None:
        atexit.unregister(recorder.flush)
        recorder.close()
    if replay is not None:
        replay.stop()


def note(requests: Iterable[CompileRequest], source: Source) -> None:
    """Record ``requests`` in this process's program record (nothing when none is kept)."""
    recorder = _recorder
    if recorder is not None:
        recorder.note(requests, source)


def flush() -> None:
    """Write what this process noted and has not written yet (nothing when no record is kept)."""
    recorder = _recorder
    if recorder is not None:
        recorder.flush()


def current_replay() -> Replay | None:
    """This process's replay (``None``: nothing was replayed), for tests and diagnostics."""
    return _replay


def wait_for_replay(timeout_s: float) -> Replay | None:
    """This process's replay, once the remote cache's record is fetched where one is being
    fetched (at most ``timeout_s``); ``None``: nothing is replayed."""
    fetching = _fetching
    if fetching is not None:
        fetching.join(timeout_s)
    return _replay

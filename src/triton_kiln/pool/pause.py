"""Holding kiln's compile processes still while something is timed on this machine.

A benchmark of a short GPU kernel times the host too: the kernel is launched by Python after an
L2 flush, and where the host is slower than the GPU the gap lands in the measurement. While
kiln's pool compiles beside it (its workers, their ``ptxas``, kiln's Inductor sidecar, and this
process's pool-manager thread taking the GIL for each result), the host is slower, and the
benchmark with it: in max-autotune, Inductor's Triton template choices time slower with kiln's
pool busy than in stock Inductor, its ATen choices less so, so Inductor would pick ATen
convolutions stock never picks and the compiled model would run slower
(``bench/inductor_choice_probe.py`` measures both).

::

    caller thread                                   kiln's processes (this process's children)
      with hold():                                    sidecar ─ zygote ─ workers
        SIGSTOP to each (one /proc scan, ~1 ms)  -->    stopped
        kiln's threads here wait at the gate (the pool managers; Inductor's threads in kiln's
        code, before they load a compiled kernel): the timed thread keeps the GIL
        ... the benchmark runs ...
      (a compile submitted meanwhile: everything resumes at once, so a wait cannot deadlock)
        SIGCONT to each                          -->    running again
        the gate opens

Which processes: every direct child of this process started by kiln as a compile process (its
command line names ``triton_kiln.pool`` or ``triton_kiln.inductor.sidecar_main``), and their
descendants that are kiln's too (the sidecar's zygote, the workers: forks of a zygote). Not the
``ptxas`` a worker runs: a stopped ``ptxas`` whose worker is killed while held (this process
dying mid-hold takes its workers with it) would stay stopped for ever, an orphan; it runs on,
one core at most per worker. Never kiln's GPU sandboxes (they time things themselves),
Inductor's own processes, or anything else the program started. A ``hold()`` lasts as long as
its ``with`` block: a stopped compile's job timeout keeps counting, so the block must be short
(one benchmark). Nested and concurrent holds (several threads) share one stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

COMPILE_PROCESS_MARKS = ("triton_kiln.pool", "triton_kiln.inductor.sidecar_main")
"""What a kiln compile process's command line contains (``procs.spawn_kiln_process`` starts
each as ``python -c "from <module> import main; main()"``; workers are forks of the zygote)."""


LONGEST_WAIT_S = 5.0
"""How long a thread waits out a hold before it goes on anyway: a hold lasts one benchmark, well
under this."""


class _Pause:
    _lock: threading.Lock
    _holding: dict[int, int]  # thread ident -> its holds in effect
    _stopped: list[int]  # what the hold in effect stopped
    _running: threading.Event  # set: no hold in effect

    def __init__(self) -> None:
        self.reset_after_fork()
        self.holds = 0
        """How many holds stopped processes so far (for tests and reports)."""
        self.interrupted = 0
        """How many holds were ended early by a compile submitted during them."""

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Stop kiln's compile processes and this process's pool managers until the block ends."""
        me = threading.get_ident()
        with self._lock:
            if not self._holding:  # the first hold in effect stops them
                self._running.clear()
                self._stopped = _signal_all(compile_process_pids(), signal.SIGSTOP)
                self.holds += 1
            self._holding[me] = self._holding.get(me, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._holding[me] -= 1
                if not self._holding[me]:
                    del self._holding[me]
                if not self._holding:  # the last one resumes them
                    self._resume_locked()

    def interrupt(self) -> None:
        """Resume everything now (a compile was submitted: it must not wait for the hold)."""
        if self._running.is_set():
            return
        with self._lock:
            if not self._running.is_set():
                self.interrupted += 1
                self._resume_locked()

    def wait_running(self, timeout_s: float = LONGEST_WAIT_S) -> bool:
        """Block while a hold is in effect, ``timeout_s`` at most: where kiln's own threads in
        this process (the pool manager; the threads that load compiled kernels for Inductor)
        would take the GIL from the thread being timed. The holding thread never waits here (a
        compile it asks for during its own hold goes on at once)."""
        if self._running.is_set() or threading.get_ident() in self._holding:
            return True
        return self._running.wait(timeout_s)

    @property
    def held(self) -> bool:
        return not self._running.is_set()

    def _resume_locked(self) -> None:
        _signal_all(self._stopped, signal.SIGCONT)
        self._stopped = []
        self._running.set()

    def reset_after_fork(self) -> None:
        """No hold in effect (also a forked child's state: its parent's stops are not its to
        undo)."""
        self._lock = threading.Lock()
        self._holding = {}
        self._stopped = []
        self._running = threading.Event()
        self._running.set()


def compile_process_pids() -> list[int]:
    """kiln's compile processes among this process's descendants (see the module docstring)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: nothing is held (a benchmark there is timed beside kiln's compiles)
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    stack = list(children.get(os.getpid(), []))
    while stack:  # down through kiln's compile processes only (not into ptxas and the like)
        pid = stack.pop()
        if _is_compile_process(pid):
            found.append(pid)
            stack.extend(children.get(pid, []))
    return found


def _is_compile_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read()
    except OSError:  # gone since the scan
        return False
    return any(mark.encode() in command for mark in COMPILE_PROCESS_MARKS)


def _signal_all(pids: list[int], signum: int) -> list[int]:
    sent = []
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:  # gone since the scan
            continue
        sent.append(pid)
    return sent


PAUSE = _Pause()
"""The process's one pause: ``with PAUSE.hold(): ...``."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PAUSE.reset_after_fork)

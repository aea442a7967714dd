"""The last run's compiles started again, before the program asks for them.

::

    install() -> recorder.start -> Replay(entries).begin()        (the caller's thread: stat calls)
        an entry whose key kiln's store holds           -> skipped: cached
        an entry whose top-level package is not found   -> skipped: its module is gone
        none left -> the INFO line now; nothing starts
        else -> the process's compile pool starts (zygote, workers), and thread "kiln-program-record":
            every POLL_S, for each waiting entry, in the record's order:
              its module not yet imported by the program (or still importing) -> wait
              the kernel not found by its qualname (an autotuner's .fn unwrapped) -> skipped: gone
              its KernelSpec identity differs -> skipped: the kernel's source changed
              the request rebuilt from the entry; its key differs (Triton, its environment, the
                  globals' values) or it no longer builds -> skipped: changed
              else pool.submit(request, priority below every asked-for compile, in record order)
                  a cache hit -> skipped: cached (fetched: the remote cache's); else started
            all entries done, WAIT_S passed (a module never imported: skipped, not imported) or
            uninstall() -> the INFO line: how many started, how many skipped and why

kiln imports no module of the program itself: a recorded kernel starts compiling once the program
has imported its module (a library's kernels are defined at its import, long before its first
call), so no import runs in another thread than the program's, and none runs that the program
would not run. The program's own call then finds the compile in flight or done (the pool merges
identical requests), so it waits only for what is left of it.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import time
import types
from collections import Counter
from typing import TYPE_CHECKING, Any

from triton_kiln.program.record_file import Entry

if TYPE_CHECKING:
    from triton_kiln.compile.request import CompileRequest
    from triton_kiln.settings import Settings

log = logging.getLogger("kiln.program")

POLL_S = 0.05
"""How often the waiting entries' modules are looked for in ``sys.modules`` (a dict lookup each)."""
WAIT_S = 300.0
"""How long an entry waits for the program to import its module; then it is skipped."""

CACHED = "already cached"
FETCHED = "fetched from the remote cache"
GONE = "kernel or module gone"
SOURCE_CHANGED = "kernel source changed"
CHANGED = "Triton, its environment or the kernel's globals changed"
NOT_IMPORTED = "module not imported"
FAILED = "could not be submitted"


class Replay:
    """One replay of a program record's ``entries`` (see the module docstring)."""

    def __init__(self, program: str, entries: list[Entry], settings: Settings) -> None:
        self.program = program
        self.entries = entries
        self.settings = settings
        self.futures: list[Any] = []  # of the compiles it started, in order (tests wait on them)
        self.skipped: Counter[str] = Counter()
        self.done = threading.Event()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.pool: Any = None

    @property
    def started(self) -> int:
        """How many compiles it started (a cache hit is a skip, not a start)."""
        return len(self.futures)

    def begin(self) -> None:
        """Skip what is cached or gone; start the pool and the thread for the rest."""
        from triton_kiln.artifacts.store import ArtifactStore

        store = ArtifactStore(self.settings.cache_dir)
        waiting: list[tuple[int, Entry]] = []
        for index, entry in enumerate(self.entries):
            if entry.key in store:
                self.skipped[CACHED] += 1
            elif not _package_found(entry.module):
                self.skipped[GONE] += 1
            else:
                waiting.append((index, entry))
        if not waiting:
            self.finish()
            return
        from triton_kiln.pool import get_pool

        self.pool = get_pool().start()  # the zygote's start overlaps the program's own imports
        self.thread = threading.Thread(
            target=self.run, args=(waiting,), name="kiln-program-record", daemon=True
        )
        self.thread.start()

    def run(self, waiting: list[tuple[int, Entry]]) -> None:
        deadline = time.monotonic() + WAIT_S
        try:
            while waiting and not self.stopping.is_set():
                waiting = [item for item in waiting if not self.try_entry(*item)]
                if not waiting or time.monotonic() > deadline:
                    break
                self.stopping.wait(POLL_S)
            if waiting:
                self.skipped[NOT_IMPORTED] += len(waiting)
        finally:
            self.finish()

    def try_entry(self, index: int, entry: Entry) -> bool:
        """Submit ``entry`` or skip it; ``False`` while its module is not imported yet."""
        module = sys.modules.get(entry.module)
        if module is None or _importing(module):
            return False
        if self.stopping.is_set():
            return True
        reason = self.submit(index, entry, module)
        if reason is not None:
            self.skipped[reason] += 1
        return True

    def submit(self, index: int, entry: Entry, module: types.ModuleType) -> str | None:
        """Why ``entry`` is not started (``None``: it is compiling now)."""
        from triton_kiln.compile.kernel_spec import KernelSpec

        kernel = _find_kernel(module, entry.qualname)
        if kernel is None:
            return GONE
        try:
            if KernelSpec.of(kernel).identity != entry.identity:
                return SOURCE_CHANGED
            request = rebuild(entry, kernel, self.pool.settings.triton_key_dir)
        except Exception as exc:  # the kernel as it is now does not take the recorded request
            log.debug("kiln: program record: %s no longer builds: %s", entry.kernel, exc)
            return CHANGED
        if request.key != entry.key:
            return CHANGED
        try:
            future = self.pool.submit(request, priority=-1.0 - index)  # after any asked-for compile
        except Exception as exc:
            log.debug("kiln: program record: %s could not be submitted: %s", entry.kernel, exc)
            return FAILED
        if future.done():  # not in this machine's store (begin() looked): the remote cache had it
            return FETCHED if self.settings.remote_cache is not None else CACHED
        self.futures.append(future)
        return None

    def finish(self) -> None:
        if self.done.is_set():
            return
        skipped = sum(self.skipped.values())
        reasons = ", ".join(f"{count} {reason}" for reason, count in self.skipped.most_common())
        log.info(
            "kiln: program record of %s: started %d of %d recorded compiles before the program "
            "asked for them; skipped %d%s (KILN_PROGRAM_RECORD=0: none)",
            self.program,
            self.started,
            len(self.entries),
            skipped,
            f" ({reasons})" if reasons else "",
        )
        self.done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every entry was started or skipped within ``timeout`` seconds."""
        return self.done.wait(timeout)

    def stop(self) -> None:
        self.stopping.set()


def rebuild(entry: Entry, kernel: Any, triton_key_dir: Any) -> CompileRequest:
    """The compile request ``entry`` describes, for ``kernel`` as the program has it now."""
    from triton_kiln.compile.request import CompileRequest
    from triton_kiln.compile.values import decanonical
    from triton_kiln.triton_compat import GPUTarget

    backend, arch, warp_size = entry.target
    return CompileRequest(
        kernel,
        dict(entry.signature),
        {k: decanonical(v) for k, v in entry.constexprs},
        options={k: decanonical(v) for k, v in entry.options},
        target=GPUTarget(backend, arch, warp_size),
        attrs={k: decanonical(v) for k, v in entry.attrs},
        triton_key_dir=triton_key_dir,
    )


def _package_found(module: str) -> bool:
    """Whether ``module``'s top-level package is imported or importable (no import runs: a
    top-level name is looked up on ``sys.path`` only)."""
    top = module.partition(".")[0]
    if top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _importing(module: types.ModuleType) -> bool:
    """Whether ``module`` is still executing: importlib marks its spec so while the import runs
    (``_initializing``, read by importlib's own ``_find_and_load``), and a kernel's globals defined
    below it would not be there yet."""
    return bool(getattr(module.__spec__, "_initializing", False))


def _find_kernel(module: types.ModuleType, qualname: str) -> Any:
    """The ``@triton.jit`` function at ``qualname`` in ``module`` (through an autotuner's or
    heuristics' ``fn``), or ``None``."""
    from triton_kiln.triton_compat import is_jit_function

    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    for _ in range(4):
        if is_jit_function(obj):
            return obj
        obj = getattr(obj, "fn", None)
    return None

"""The zygote: a pre-warmed, single-threaded process that compile workers fork from.

Started by the pool's manager thread as a fresh interpreter (``subprocess``; the parent
process never forks itself), the zygote imports Triton, reads Triton's key from kiln's
fingerprint-checked file and installs it in Triton (so that no compile in it or its forks
hashes ``libtriton.so`` again), compiles a warm-up kernel and imports the user modules it is
told to, all without touching CUDA. Then it serves the parent over one ``SOCK_SEQPACKET`` socket::

    parent                                   zygote (this module)              worker
      |  ZygoteInit                         ->  |  Triton key, warm-up, preloads
      |  <- Ready(info)                         |
      |  Fork(wid) + fds[chan, stderr]      ->  |  fork() -------------------->  serve(chan)
      |  <- Forked(wid, pid)                    |                                  |
      |  Kill(pid)                          ->  |  killpg(pid, SIGKILL) ------->   X
      |  <- Exited(pid, returncode)             |  waitpid (SIGCHLD)
      |  Preload([module])                  ->  |  import module
      |  <- Preloaded({module: error})          |
      |  EOF / SIGTERM (parent gone)        ->  |  killpg every worker, reap, exit

(the messages are the records of :mod:`triton_kiln.pool.protocol`.)

Rules it keeps:

* **Fork only when single-threaded.** Before each fork it counts its OS threads; if an
  import started one it refuses (``ForkFailed``) and the parent replaces it. BLAS/OpenMP
  pools are switched off through the environment so that importing numpy or torch starts none.
* **It is the only reaper of its workers**, so it alone kills them: a ``kill`` for a pid it
  has already reaped is ignored, and a late timeout can never hit a recycled pid.
* **It reaps what it kills.** Every worker's process group is killed (so ptxas goes with its
  worker) and the worker reaped, also at shutdown. It is a child subreaper, so a ptxas whose
  worker died first comes to it and is reaped too: no zombie is left for PID 1 (which, in a
  container whose first process is the user's program, never reaps it) or another subreaper.
* **Each worker has a private temp directory** (``TMPDIR``, where Triton writes ptxas's
  ``.ptx``/``.o`` files), removed when the zygote reaps the worker, however it died.
* **Nothing outlives the parent**: the zygote gets SIGTERM when the parent's manager thread
  dies (``PR_SET_PDEATHSIG``) and sees EOF on its socket; either way it kills every worker's
  process group (ptxas included), reaps them, removes their temp directories and exits.
  Workers die with the zygote through their own parent-death signal (SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any

from triton_kiln import child_env, procs
from triton_kiln.pool.protocol import (
    Exited,
    Fork,
    Forked,
    ForkFailed,
    FromZygote,
    Kill,
    Preload,
    Preloaded,
    Ready,
    ZygoteInit,
    pack,
    unpack,
)

ENV_FD = child_env.ZYGOTE_FD
ENV_PARENT = child_env.ZYGOTE_PARENT
MAX_PACKET = 1 << 20


class _Zygote:
    def __init__(self, ctl: socket.socket, tmp_root: str | None, parent: int) -> None:
        self.ctl = ctl
        self.parent = parent
        self.tmp_root = tmp_root
        self.children: set[int] = set()
        self.tmpdirs: dict[int, str] = {}  # worker pid -> its private TMPDIR
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    # -- messages ---------------------------------------------------------------------------

    def send(self, message: FromZygote) -> None:
        self.ctl.send(pack(message))

    def serve(self) -> None:
        procs.become_child_subreaper()  # a killed worker's ptxas comes here to be reaped (reap())
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self.shutdown())  # the parent died
        signal.set_wakeup_fd(self.wake_w)
        poller = select.poll()
        poller.register(self.ctl.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            for fd, _ in events:
                if fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                    self.reap()
                else:
                    self.handle_command()
            self.reap()

    def handle_command(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.ctl, MAX_PACKET, 4)
        except ConnectionResetError:
            data, fds = b"", []
        if not data:
            self.shutdown()
        message = unpack(data)
        if isinstance(message, Fork):
            self.fork_worker(message.worker_id, fds)
        elif isinstance(message, Kill):
            self.kill(message.pid)
        elif isinstance(message, Preload):
            self.send(Preloaded(preload(message.modules)))

    # -- workers ----------------------------------------------------------------------------

    def fork_worker(self, wid: int, fds: list[int]) -> None:
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            self.send(ForkFailed(wid, f"expected 2 file descriptors, got {len(fds)}"))
            return
        chan_fd, err_fd = fds
        threads = procs.thread_names()
        if len(threads) != 1:
            os.close(chan_fd)
            os.close(err_fd)
            self.send(
                ForkFailed(
                    wid,
                    f"the zygote has {len(threads)} threads ({', '.join(threads)}); forking now is unsafe",
                )
            )
            return
        tmpdir = tempfile.mkdtemp(prefix=f"worker-{wid}-", dir=self.tmp_root) if self.tmp_root else None
        sys.stdout.flush()
        sys.stderr.flush()
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 70
            try:
                os.setpgid(0, 0)
                procs.set_parent_death_signal(zygote_pid)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if tmpdir is not None:
                    os.environ["TMPDIR"] = tmpdir
                    tempfile.tempdir = tmpdir  # tempfile caches its directory: Triton's ptxas files
                os.close(self.wake_r)
                os.close(self.wake_w)
                self.ctl.close()
                os.dup2(err_fd, 1)
                os.dup2(err_fd, 2)
                os.close(err_fd)
                from triton_kiln.pool.worker import serve

                serve(chan_fd)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also from this side, so a kill right away hits the group
        self.children.add(pid)
        if tmpdir is not None:
            self.tmpdirs[pid] = tmpdir
        os.close(chan_fd)
        os.close(err_fd)
        self.send(Forked(wid, pid))

    def kill(self, pid: int) -> None:
        if pid not in self.children:
            return  # already reaped: the pid may belong to someone else by now
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid not in self.children:
                continue  # a killed worker's child that came to this subreaper: reaped, no more
            # The group may still hold the worker's children (ptxas): end them too. Safe: no
            # new worker (with a new group) is forked between this reap and this kill.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            self._remove_tmpdir(pid)
            self.children.discard(pid)
            with contextlib.suppress(OSError):
                self.send(Exited(pid, procs.status_from_wait(status)))

    def _remove_tmpdir(self, pid: int) -> None:
        tmpdir = self.tmpdirs.pop(pid, None)
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)

    def shutdown(self) -> None:
        """Kill every worker's process group, reap them, remove their temp directories, exit."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in list(self.children):
            self.kill(pid)
        deadline = time.monotonic() + 5.0
        while self.children and time.monotonic() < deadline:
            for pid in list(self.children):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid
                if done:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
                    self.children.discard(pid)
                    self._remove_tmpdir(pid)
            if self.children:
                time.sleep(0.01)
        for pid in list(self.tmpdirs):
            self._remove_tmpdir(pid)
        self._reap_orphans(deadline=time.monotonic() + 0.5)
        if self.tmp_root is not None and os.getppid() != self.parent:
            with contextlib.suppress(OSError):
                os.rmdir(self.tmp_root)  # the parent is gone and cannot remove it (if empty)
        os._exit(0)

    @staticmethod
    def _reap_orphans(deadline: float) -> None:
        """Reap the killed workers' children that came to this subreaper (their groups were
        killed above), until none is left or ``deadline``; one still running stays for PID 1."""
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                time.sleep(0.01)


def preload(modules: list[str]) -> dict[str, str | None]:
    """Import ``modules``; map each to ``None`` or the reason it failed (error, or new threads)."""
    import importlib

    results: dict[str, str | None] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            results[name] = f"import failed: {type(exc).__name__}: {exc}"
            continue
        threads = procs.thread_names()
        if len(threads) != 1:
            results[name] = f"importing it started threads ({', '.join(threads)})"
            return results  # the zygote is no longer fork-safe; stop here
        results[name] = None
    return results


def _warm_up(target: tuple[str, Any, int]) -> float:
    """Compile a tiny kernel once so forks inherit Triton's imports, backend and ptxas lookups."""
    started = time.perf_counter()
    from triton_kiln import triton_compat
    from triton_kiln.pool.warmup import warmup_kernel

    old = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="kiln-warmup-") as tmp:
        os.environ["TRITON_CACHE_DIR"] = tmp
        try:
            src = triton_compat.ASTSource(
                warmup_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}
            )
            triton_compat.compile_kernel(src, triton_compat.GPUTarget(*target), {"num_warps": 1})
        finally:
            if old is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = old
    return time.perf_counter() - started


def main() -> None:
    """Entry point of the zygote process (``from triton_kiln.pool.zygote import main; main()``)."""
    # SIGTERM, not SIGKILL: serve() handles it by killing, reaping and cleaning up its workers.
    ctl, parent = procs.parent_channel(ENV_FD, ENV_PARENT, signal.SIGTERM)
    data = ctl.recv(MAX_PACKET)
    if not data:
        os._exit(0)
    init = unpack(data)
    if not isinstance(init, ZygoteInit):  # pragma: no cover - protocol error
        raise RuntimeError(f"unexpected first message {init!r}")
    sys.path[:] = init.sys_path
    with contextlib.suppress(OSError):
        os.chdir(init.cwd)
    if init.nice:
        # Below the caller's priority from the start (Triton's import and the warm-up compile
        # overlap the caller's tracing); every fork and its ptxas inherit it.
        with contextlib.suppress(OSError):
            os.nice(init.nice)
    started = time.perf_counter()
    from triton_kiln import triton_compat

    key = triton_compat.triton_key(init.triton_key_dir)
    key_seeded = triton_compat.seed_triton_key(key)
    key_s = time.perf_counter() - started
    # What every job unpickles and returns: forks inherit these imports, warm-up or not.
    import triton_kiln.artifacts.artifact
    import triton_kiln.compile.request  # noqa: F401

    warmup_s = _warm_up(init.warmup_target) if init.warmup_target else 0.0
    preloaded = preload(list(init.preload))
    zygote = _Zygote(ctl, init.tmp_root, parent)
    zygote.send(
        Ready(
            {
                "pid": os.getpid(),
                "triton_key": key,
                "key_s": key_s,
                "key_seeded": key_seeded,
                "warmup_s": warmup_s,
                "preloaded": preloaded,
                "threads": procs.thread_names(),
                "startup_s": time.perf_counter() - started,
            }
        )
    )
    zygote.serve()

"""The caller's side of the benchmark sandbox: starts it, feeds it, and turns replies into outcomes.

::

    tuner thread                     Sandbox (this module)                sandbox process
      set_inputs / set_reference ->  kept, sent lazily on next bench   (triton_kiln.sandbox.torch_worker)
      bench(spec, timeout_s)     ->  start/restart if needed ---------> spawned interpreter
                                     ("inputs", ...) ("reference", ...) ("bench", spec) ---->
                                 <-  ("ok", timings, check) | ("err", kind, message, tb, sticky)
      <- BenchOutcome                 death -> bench_crashed, no reply in time -> kill,
                                      bench_timeout; sticky CUDA error -> replaced

:class:`Sandbox` is synchronous and used by one tuner thread at a time (a lock guards it). It
starts the sandbox process lazily, in the background, so the process's start (torch import,
CUDA context) overlaps with compiling; it restarts it after a crash, a timeout or a sticky CUDA
error, and sends the inputs again. Each :meth:`Sandbox.bench` returns a :class:`BenchOutcome`;
failures are outcomes, never exceptions, so one bad config cannot stop a tuning run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.errors import describe_exit, likely_cause
from triton_kiln.framing import FrameReader, encode
from triton_kiln.procs import spawn_kiln_process
from triton_kiln.sandbox.channel import Died, TimedOut, receive
from triton_kiln.sandbox.torch_worker import ENV_FD, ENV_PARENT, STICKY_EXIT

_START_TIMEOUT_S = 120.0
_STDERR_TAIL = 15


@dataclass(frozen=True)
class BenchSpec:
    """One config to run: where its binary is and how to launch it."""

    key: str
    group: dict[str, str]  # Triton's cache layout: {"<name>.json": path, "<name>.cubin": path}
    hash: str
    arg_names: list[str]
    signature: dict[str, str]
    constexprs: dict[str, Any]
    grid: tuple[int, ...]
    warmup: float = 25.0
    rep: float = 100.0
    want_outputs: bool = False
    want_samples: bool = False  # send back every timed run's ms (the final round pools them)


@dataclass(frozen=True)
class BenchOutcome:
    status: str  # "ok", "out_of_resources", "bench_error", "bench_crashed", "bench_timeout"
    timings: list[float] | None = None  # [p50, p20, p80] in ms
    outputs: dict[str, Any] | None = None  # in-process benchmarks: the tensors after one run
    check: tuple[bool, float, str] | None = None  # sandbox: (outputs ok, max |diff|, detail)
    raw: Any = None  # in-process: exactly what do_bench returned (kept in configs_timings)
    reason: str | None = None
    seconds: float = 0.0
    stderr_tail: tuple[str, ...] = field(default_factory=tuple)
    samples: list[float] | None = None  # every timed run's ms, when the spec asked (want_samples)


class SandboxError(RuntimeError):
    """The sandbox could not be started at all (no GPU, torch missing...)."""


class Sandbox:
    """A long-lived, spawned GPU process that benchmarks compiled configs on copies of the inputs."""

    def __init__(self, device: int = 0, timeout_s: float = 60.0) -> None:
        """``timeout_s``: how long one benchmark may take, unless :meth:`bench` is given its own."""
        self.device = device
        self.timeout_s = timeout_s
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._chan: socket.socket | None = None
        self._reader = FrameReader()
        self._frames: list[bytes] = []
        self._stderr: Any = None
        self._inputs: tuple[Any, ...] | None = None
        self._inputs_sent = False
        self._reference: tuple[Any, ...] | None = None
        self._started_at = 0.0
        self._hello = False
        self.restarts = 0

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the process if it is not running (returns at once; it warms up on its own)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            self._cleanup()
            parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
            self._proc = spawn_kiln_process(
                "triton_kiln.sandbox.torch_worker",
                child_end.fileno(),
                dict(os.environ),
                ENV_FD,
                ENV_PARENT,
                self._stderr,
                self._stderr,
            )
            child_end.close()
            self._chan = parent_end
            self._reader = FrameReader()
            self._frames = []
            self._inputs_sent = False
            self._hello = False
            self._started_at = time.monotonic()
            parent_end.sendall(encode({"sys_path": list(sys.path), "device": self.device}))

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                with contextlib.suppress(OSError):
                    self._chan.close() if self._chan else None
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._cleanup()

    def _cleanup(self) -> None:
        if self._chan is not None:
            with contextlib.suppress(OSError):
                self._chan.close()
        self._chan = None
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()
        self._stderr = None
        self._proc = None

    def release_inputs(self) -> dict[str, Any] | None:
        """The run ended: the next run sends its own inputs (this sandbox frees its copies when
        it is closed, after ``KILN_IDLE_S``). ``None``: it reports no device memory figures."""
        return None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- use ----------------------------------------------------------------------------------

    def set_inputs(self, args: dict[str, Any], reset_to_zero: list[str], restore_value: list[str]) -> None:
        """Inputs for the following benchmarks: tensors are copied to the CPU now and sent."""
        import torch

        host = {
            name: (value.detach().cpu() if isinstance(value, torch.Tensor) else value)
            for name, value in args.items()
        }
        with self._lock:
            self._inputs = (host, list(reset_to_zero), list(restore_value))
            self._inputs_sent = False
            self._reference = None

    def set_reference(self, outputs: dict[str, Any], tolerances: tuple[float, float] | None) -> None:
        """Expected outputs (CPU tensors) to check every config against; sent after the inputs."""
        with self._lock:
            self._reference = (outputs, tolerances)

    def bench(self, spec: BenchSpec, timeout_s: float | None = None) -> BenchOutcome:
        """Run one config; past ``timeout_s`` (default: the sandbox's) it is killed and restarted."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            started = time.monotonic()
            try:
                self._ensure_ready()
                assert self._chan is not None
                self._chan.sendall(encode(("bench", spec.__dict__)))
                reply = self._receive(timeout)
            except Died as died:
                return self._death_outcome(died, started)
            except TimedOut:
                self._kill()
                return BenchOutcome(
                    "bench_timeout",
                    reason=f"benchmark did not finish within {timeout:g} s (the sandbox was killed)",
                    seconds=time.monotonic() - started,
                )
            seconds = time.monotonic() - started
            if reply[0] == "ok":
                samples = reply[3] if len(reply) > 3 else None
                return BenchOutcome("ok", timings=reply[1], check=reply[2], seconds=seconds, samples=samples)
            _, what, message, _tb, sticky = reply
            if sticky:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=10) if self._proc else None
                self.restarts += 1
                self._cleanup()
                return BenchOutcome(
                    "bench_crashed",
                    reason=f"{message} (a sticky CUDA error: the sandbox was replaced)",
                    seconds=seconds,
                )
            status = "out_of_resources" if what == "out_of_resources" else "bench_error"
            return BenchOutcome(status, reason=message, seconds=seconds)

    # -- internals ----------------------------------------------------------------------------

    def _ensure_ready(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self.restarts += 1
            self.start()
        if not self._hello:
            reply = self._receive(_START_TIMEOUT_S, starting=True)
            if reply[0] != "hello":
                raise Died(f"unexpected first message {reply[0]!r}")
            self._hello = True
        if not self._inputs_sent:
            if self._inputs is None:
                raise SandboxError("set_inputs() must be called before bench()")
            assert self._chan is not None
            self._chan.sendall(encode(("inputs", *self._inputs)))
            reply = self._receive(_START_TIMEOUT_S)
            if reply[0] != "ok_inputs":
                raise Died(f"could not take the inputs: {reply}")
            if self._reference is not None:
                self._chan.sendall(encode(("reference", *self._reference)))
                if self._receive(_START_TIMEOUT_S)[0] != "ok_reference":
                    raise Died("could not take the reference outputs")
            self._inputs_sent = True

    def _receive(self, timeout: float, starting: bool = False) -> Any:
        assert self._chan is not None
        proc = self._proc
        try:
            return receive(
                self._chan, self._reader, self._frames, timeout, lambda: proc is None or proc.poll() is None
            )
        except TimedOut:
            if not starting:
                raise
            self._kill()
            raise Died(f"the sandbox did not start within {timeout:g} s") from None

    def _kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
        self.restarts += 1
        self._cleanup()

    def _stderr_tail(self) -> tuple[str, ...]:
        if self._stderr is None:
            return ()
        try:
            self._stderr.seek(0)
            lines = self._stderr.read().decode(errors="replace").splitlines()
        except OSError:
            return ()
        return tuple(line for line in lines if line.strip())[-_STDERR_TAIL:]

    def _death_outcome(self, died: Died, started: float) -> BenchOutcome:
        returncode = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = self._proc.wait(timeout=10)
        tail = self._stderr_tail()
        self.restarts += 1
        self._cleanup()
        how = describe_exit(returncode)
        cause = likely_cause(returncode)
        reason = died.args[0] if died.args and died.args[0] else f"the sandbox died with {how}"
        if cause:
            reason += f" ({cause})"
        if returncode == STICKY_EXIT:
            reason = "the sandbox hit a sticky CUDA error"
        if tail:
            reason += "; it printed: " + " | ".join(tail[-3:])
        return BenchOutcome(
            "bench_crashed", reason=reason, seconds=time.monotonic() - started, stderr_tail=tail
        )

"""The caller's side of the native (torch-free) benchmark sandbox; a drop-in for :class:`Sandbox`.

::

    NativeSandbox.bench(spec)
      native sandbox (triton_kiln.sandbox.native_worker: ready in well under a second)
        first use: wait for its hello, send the inputs (CUDA IPC handles; host copies where IPC
        is impossible -- or, if the sandbox cannot open them, all again as host copies)
        "ok"          -> NativeBenchOutcome, with the sandbox's own timings in .sandbox
        "unsupported" -> the torch sandbox (triton_kiln.sandbox.torch_client.Sandbox), started on first
                         need, gets the inputs (and the reference the native one settled on)
        "err" sticky  -> the sandbox exits; the next bench starts a fresh one (inputs again)
      could not start at all ("fatal": no driver, no C compiler) -> every config goes to the
        torch sandbox, which reports its own failure if the GPU is unusable

Like :class:`~triton_kiln.sandbox.torch_client.Sandbox` it is synchronous, guarded by a lock, and turns
every failure into a :class:`BenchOutcome` (never an exception). :meth:`start` returns at once;
the process warms up on its own (see :mod:`triton_kiln.sandbox.registry`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from triton_kiln.launch.native import loaded_path
from triton_kiln.sandbox.channel import Died, TimedOut, WorkerProcess
from triton_kiln.sandbox.device_check import FINGERPRINT
from triton_kiln.sandbox.ipc import TensorDesc, describe_inputs, host_only, log_host_copies, reference_descs
from triton_kiln.sandbox.native_worker import ENV_FD, ENV_PARENT, STICKY_EXIT
from triton_kiln.sandbox.torch_client import BenchOutcome, BenchSpec, Sandbox, SandboxError

log = logging.getLogger("kiln.sandbox")

_START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class NativeBenchOutcome(BenchOutcome):
    """A :class:`BenchOutcome` with where the time went, for the tuning report.

    ``sandbox`` keys (seconds unless named otherwise): ``wait_s`` (this call waited for the
    sandbox to be ready), ``inputs_s`` (sending the inputs, this call), ``load_s``, ``check_s``,
    ``bench_s`` (the sandbox's own: loading the binary, the checked run, the timing loop),
    ``estimate_ms``, ``n_repeat``, ``ready_s`` (spawn to ready), ``via`` ("native" or "torch").
    """

    sandbox: dict[str, Any] = field(default_factory=dict)


class _Fatal(Exception):
    pass


class NativeSandbox:
    """A long-lived, torch-free GPU process that benchmarks compiled configs on copies of the inputs."""

    def __init__(self, device: int = 0, timeout_s: float = 60.0, use_ipc: bool = True) -> None:
        self.device = device
        self.timeout_s = timeout_s
        self.use_ipc = use_ipc
        self._lock = threading.RLock()
        self._proc: WorkerProcess | None = None
        self._hello: dict[str, Any] | None = None
        self._args: dict[str, Any] = {}
        self._inputs: tuple[dict[str, Any], list[str], list[str]] | None = None
        self._inputs_sent = False
        self._reference: tuple[dict[str, TensorDesc], tuple[float, float] | None] | None = None
        self._user_reference: tuple[dict[str, Any], tuple[float, float] | None] | None = None
        self._compare_kernels: dict[str, dict[str, Any]] = {}  # dtype -> the check kernel's spec
        self._torch: Sandbox | None = None
        self._torch_inputs_sent = False
        self.native_unavailable: str | None = None  # why every config goes to the torch sandbox
        self.restarts = 0
        self.ready_s: float | None = None  # spawn -> ready, of the current process

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the process if it is not running (returns at once; it warms up on its own)."""
        with self._lock:
            if self.native_unavailable is not None or (self._proc is not None and self._proc.alive()):
                return
            if self._proc is not None:
                self._proc.close()
            self._proc = WorkerProcess(
                "triton_kiln.sandbox.native_worker",
                ENV_FD,
                ENV_PARENT,
                {"sys_path": _sys_path(), "device": self.device, "c_module": loaded_path()},
            )
            self._hello = None
            self._inputs_sent = False
            self.ready_s = None

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.close(wait_s=5.0)
                self._proc = None
            if self._torch is not None:
                self._torch.close()
                self._torch = None

    def release_inputs(self) -> dict[str, Any] | None:
        """The run ended: the sandbox frees its copies of the inputs and its scratch (the process
        stays, for ``KILN_IDLE_S``). Returns ``{"peak_bytes", "held_bytes"}``: the most device
        memory it allocated for the run and what it holds now (its CUDA context aside), or
        ``None`` when it held no inputs (or could not answer: then it is stopped)."""
        with self._lock:
            self._args = {}  # the caller's tensors: not kept alive past the run
            self._inputs = None
            self._reference = None
            self._user_reference = None
            self._torch_inputs_sent = False
            proc = self._proc
            if proc is None or not self._inputs_sent or not proc.alive():
                return None
            self._inputs_sent = False
            try:
                proc.send(("release",))
                reply = proc.receive(30.0)
            except (Died, TimedOut):
                self._kill()
                return None
            if reply[0] != "ok_release":
                self._kill()
                return None
            return dict(reply[1])

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def torch_sandbox(self) -> Sandbox | None:
        """The torch sandbox, once a config needed it."""
        return self._torch

    # -- use ----------------------------------------------------------------------------------

    def set_inputs(self, args: dict[str, Any], reset_to_zero: list[str], restore_value: list[str]) -> None:
        """Inputs for the following benchmarks: IPC handles (or host copies) are made now."""
        import torch

        if any(isinstance(v, torch.Tensor) and v.is_cuda for v in args.values()):
            torch.cuda.synchronize(self.device)  # the sandbox reads them on its own stream
        described, reasons = describe_inputs(args, self.device, self.use_ipc)
        log_host_copies(reasons)
        with self._lock:
            self._args = dict(args)
            self._inputs = (described, list(reset_to_zero), list(restore_value))
            self._inputs_sent = False
            self._torch_inputs_sent = False
            self._reference = None
            self._user_reference = None

    def set_compare_kernels(self, specs: dict[str, dict[str, Any]]) -> None:
        """The output check's kernel for each dtype (``{dtype: spec}``, compiled for this device):
        outputs are then compared on the GPU (:mod:`triton_kiln.sandbox.device_check`); sent with the
        inputs, to every sandbox process."""
        with self._lock:
            self._compare_kernels = dict(specs)
            self._inputs_sent = False

    def set_reference(self, outputs: dict[str, Any], tolerances: tuple[float, float] | None) -> None:
        """Expected outputs (torch tensors) to check every config against; sent after the inputs."""
        with self._lock:
            self._reference = (reference_descs(outputs), tolerances)
            self._user_reference = (dict(outputs), tolerances)

    def bench(self, spec: BenchSpec, timeout_s: float | None = None) -> BenchOutcome:
        """Run one config; past ``timeout_s`` (default: the sandbox's) it is killed and restarted."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            started = time.monotonic()
            if self.native_unavailable is not None:
                return self._via_torch(spec, started, self.native_unavailable, timeout)
            timing: dict[str, Any] = {}
            try:
                self._ensure_ready(timing)
                assert self._proc is not None
                self._proc.send(("bench", spec.__dict__))
                reply = self._proc.receive(timeout)
            except _Fatal as fatal:
                self.native_unavailable = f"the native sandbox could not start: {fatal}"
                log.info("kiln: %s; configs are benchmarked in the torch sandbox", self.native_unavailable)
                return self._via_torch(spec, started, self.native_unavailable, timeout)
            except Died as died:
                return self._death_outcome(died, started)
            except TimedOut:
                self._kill()
                return NativeBenchOutcome(
                    "bench_timeout",
                    reason=f"benchmark did not finish within {timeout:g} s (the sandbox was killed)",
                    seconds=time.monotonic() - started,
                )
            seconds = time.monotonic() - started
            if reply[0] == "ok":
                info = dict(reply[3])
                samples = info.pop("times", None)
                timing.update(info, via="native", ready_s=self.ready_s)
                return NativeBenchOutcome(
                    "ok", timings=reply[1], check=reply[2], seconds=seconds, sandbox=timing, samples=samples
                )
            if reply[0] == "unsupported":
                log.info("kiln: %s runs in the torch sandbox: %s", spec.key[:12], reply[1])
                return self._via_torch(spec, started, reply[1], timeout)
            _, what, message, _tb, sticky = reply
            if sticky:
                assert self._proc is not None
                self._proc.wait(10)
                self._proc.close()
                self._proc = None
                self.restarts += 1
                return NativeBenchOutcome(
                    "bench_crashed",
                    reason=f"{message} (a sticky CUDA error: the sandbox was replaced)",
                    seconds=seconds,
                    sandbox=timing,
                )
            status = "out_of_resources" if what == "out_of_resources" else "bench_error"
            return NativeBenchOutcome(status, reason=message, seconds=seconds, sandbox=timing)

    # -- internals ----------------------------------------------------------------------------

    def _ensure_ready(self, timing: dict[str, Any]) -> None:
        if self._proc is None or not self._proc.alive():
            if self._proc is not None:
                self.restarts += 1
            self.start()
        proc = self._proc
        assert proc is not None
        if self._hello is None:
            waited = time.monotonic()
            try:
                reply = proc.receive(_START_TIMEOUT_S)
            except TimedOut:
                proc.kill()
                raise Died(f"the sandbox did not start within {_START_TIMEOUT_S:g} s") from None
            except Died:
                proc.wait(10)
                raise _Fatal(f"it exited at start ({' | '.join(proc.stderr_tail()[-3:])})") from None
            if reply[0] == "fatal":
                proc.close(wait_s=10.0)
                self._proc = None
                raise _Fatal(reply[1])
            if reply[0] != "hello":
                raise Died(f"unexpected first message {reply[0]!r}")
            self._hello = dict(reply[2])
            self.ready_s = float(self._hello["ready_at"]) - proc.spawned_at
            timing["wait_s"] = time.monotonic() - waited
        if not self._inputs_sent:
            sent = time.monotonic()
            timing["inputs"] = self._send_inputs(proc)  # transfer_s, via_ipc, via_host
            timing["inputs_s"] = time.monotonic() - sent

    def _send_inputs(self, proc: WorkerProcess) -> dict[str, Any]:
        if self._inputs is None:
            raise SandboxError("set_inputs() must be called before bench()")
        inputs, reset_to_zero, restore_value = self._inputs
        if self._compare_kernels:
            proc.send(("compare_kernels", self._compare_kernels))
            loaded = proc.receive(_START_TIMEOUT_S)
            if loaded[0] == "ok_compare_kernels" and loaded[1]["failed"]:
                failed = dict(loaded[1]["failed"])
                if failed.pop(FINGERPRINT, None) is not None:  # the names only: read to the host
                    log.info("kiln: new distinct outputs are named on the host: %s", loaded[1])
                if failed:
                    log.info("kiln: outputs of %s are checked on the host: %s", sorted(failed), loaded[1])
        proc.send(("inputs", inputs, reset_to_zero, restore_value))
        reply = proc.receive(_START_TIMEOUT_S)
        if reply[0] == "inputs_failed" and any(
            isinstance(v, TensorDesc) and v.via_ipc for v in inputs.values()
        ):
            log.info(
                "kiln: the sandbox could not take the inputs over CUDA IPC (%s); sending host copies",
                reply[1],
            )
            inputs = host_only(inputs, self._args)
            self._inputs = (inputs, reset_to_zero, restore_value)
            proc.send(("inputs", inputs, reset_to_zero, restore_value))
            reply = proc.receive(_START_TIMEOUT_S)
        if reply[0] != "ok_inputs":
            raise Died(f"the sandbox could not take the inputs: {reply[1] if len(reply) > 1 else reply}")
        if self._reference is not None:
            proc.send(("reference", *self._reference))
            if proc.receive(_START_TIMEOUT_S)[0] != "ok_reference":
                raise Died("the sandbox could not take the reference outputs")
        self._inputs_sent = True
        return dict(reply[1])

    def _via_torch(
        self, spec: BenchSpec, started: float, why: str, timeout_s: float | None = None
    ) -> BenchOutcome:
        """Benchmark in the torch sandbox (started on first need) with the same inputs."""
        if self._torch is None:
            self._torch = Sandbox(self.device, timeout_s=self.timeout_s)
            self._torch.start()
        if not self._torch_inputs_sent:
            if self._inputs is None:
                raise SandboxError("set_inputs() must be called before bench()")
            self._torch.set_inputs(self._args, self._inputs[1], self._inputs[2])
            reference = self._user_reference or self._settled_reference()
            if reference is not None:
                self._torch.set_reference(*reference)
            self._torch_inputs_sent = True
        outcome = self._torch.bench(spec, timeout_s)
        fields = {name: getattr(outcome, name) for name in BenchOutcome.__dataclass_fields__}
        fields["seconds"] = time.monotonic() - started
        return NativeBenchOutcome(**fields, sandbox={"via": "torch", "why": why})

    def _settled_reference(self) -> tuple[dict[str, Any], tuple[float, float] | None] | None:
        """The reference outputs the native sandbox settled on (its first clean run), if any."""
        proc = self._proc
        if proc is None or not proc.alive() or not self._inputs_sent:
            return None
        try:
            proc.send(("get_reference",))
            reply = proc.receive(_START_TIMEOUT_S)
        except (Died, TimedOut):
            return None
        if reply[0] != "reference_data" or reply[1] is None:
            return None
        return {name: _to_torch(desc) for name, desc in reply[1].items()}, reply[2]

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc = None
        self.restarts += 1

    def _death_outcome(self, died: Died, started: float) -> BenchOutcome:
        proc = self._proc
        reason, tail = proc.death_reason(died, STICKY_EXIT) if proc is not None else (str(died), ())
        if proc is not None:
            proc.close()
        self._proc = None
        self.restarts += 1
        return NativeBenchOutcome(
            "bench_crashed", reason=reason, seconds=time.monotonic() - started, stderr_tail=tail
        )


def _to_torch(desc: TensorDesc) -> Any:
    """A contiguous host :class:`TensorDesc` as a CPU torch tensor."""
    import torch

    dtype = getattr(torch, desc.dtype.removeprefix("torch."))
    if not desc.nbytes or not desc.host:
        return torch.empty(desc.shape, dtype=dtype)
    raw = torch.frombuffer(bytearray(desc.host), dtype=torch.uint8)
    return raw.view(dtype).reshape(desc.shape).clone()


def _sys_path() -> list[str]:
    import sys

    return list(sys.path)

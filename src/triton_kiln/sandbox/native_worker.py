"""The native sandbox process: times compiled configs through kiln's C module, without torch.

It speaks the protocol of :mod:`triton_kiln.sandbox.torch_worker` (same frames, same replies, a few more
kinds), and is ready in a fraction of a second: Python, kiln's C module and a CUDA context::

    client (triton_kiln.sandbox.native_client)             native sandbox (spawned; own CUDA context)
      {"sys_path", "device", "c_module"}       ->   kiln's C module (the caller's build), cuda_init,
                                                    a 256 MB L2-flush buffer
      <- ("hello", pid, {"ready_at", "init_s"}) | ("fatal", reason)  (then exit EXIT_NO_DEVICE)
      ("inputs", {name: TensorDesc | value},   ->   device copies (IPC handles closed before
               reset_to_zero, restore_value)        any kernel runs), a pristine copy each
      <- ("ok_inputs", info) | ("inputs_failed", message)
      ("reference", {name: TensorDesc}, tol)   ->   expected outputs (the user's)
      <- ("ok_reference",)
      ("get_reference",)                       ->   <- ("reference_data", {name: TensorDesc} | None, tol)
      ("compare_kernels", {dtype: spec})       ->   the output check's kernel, to check on the GPU
      <- ("ok_compare_kernels", {"loaded", "failed"})  (triton_kiln.sandbox.device_check)
      ("release",)                             ->   the run ended: input copies and scratch freed
      <- ("ok_release", {"peak_bytes", "held_bytes"})  (the most it held for the run; now)
      ("bench", BenchSpec fields)              ->   cubin -> kiln's Launcher -> restore inputs ->
                                                    run once -> check outputs (numpy) ->
                                                    bench_loop (do_bench's loop, in C)
      <- ("ok", [p50, p20, p80], check, info) | ("err", kind, message, traceback, sticky)
         | ("unsupported", reason, info)   (a binary kiln's launcher does not run: clusters,
                                            TMA arguments, cooperative, PDL, tuples)

Binaries that ask for Triton's runtime allocation (global scratch: device-side tensor
descriptors; profile scratch) run here too: the sandbox is their allocator
(:class:`~triton_kiln.sandbox.device_inputs.ScratchMemory`, cuMemAlloc, one buffer per kind), which
kiln's launcher calls with Triton's size and alignment.

``info`` carries the sandbox's own measurements (seconds loading, checking, benchmarking).
After a sticky CUDA error (illegal address...) it replies and exits with ``STICKY_EXIT``; the
client starts a fresh one. Outputs are checked as in :mod:`triton_kiln.sandbox.torch_worker`: each output
argument keeps a few distinct representatives (:class:`~triton_kiln.sandbox.compare.Representatives`;
the first clean run's, or the user's reference, first); only a
:class:`~triton_kiln.sandbox.compare.Verdict` travels back, never the tensors.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from triton_kiln import child_env, procs
from triton_kiln.framing import encode, recv_frame
from triton_kiln.sandbox.compare import Representatives
from triton_kiln.sandbox.device_check import DeviceCheck
from triton_kiln.sandbox.device_inputs import DeviceInputs, ScratchMemory
from triton_kiln.sandbox.ipc import TensorDesc, host_desc
from triton_kiln.sandbox.native_failures import OutOfResources, Unsupported, classify
from triton_kiln.sandbox.timing import quantiles

ENV_FD = child_env.NATIVE_SANDBOX_FD
ENV_PARENT = child_env.NATIVE_SANDBOX_PARENT
STICKY_EXIT = 3  # as triton_kiln.sandbox.torch_worker.STICKY_EXIT
EXIT_NO_DEVICE = 4  # the sandbox could not start (no driver, no GPU, no C module)
FLUSH_BYTES = 256 * 1024 * 1024  # triton.testing.do_bench's L2 flush buffer
_TRITON_EXTRA_PARAMS = 2  # as triton_kiln.launch.launcher: Triton's global and profile scratch pointers


class NativeState:
    def __init__(self, device: int, c_module: str | None = None) -> None:
        from triton_kiln.launch.native import load_path, native

        # the caller's build of kiln's C module when it has one (no compiler run here), else ours
        self.cuda = load_path(c_module) if c_module and os.path.exists(c_module) else native()
        self.device = device
        self.cuda.cuda_init(device)
        self.flush = self.cuda.mem_alloc(FLUSH_BYTES)
        self.inputs = DeviceInputs(self.cuda)
        self.scratch = (ScratchMemory(self.cuda), ScratchMemory(self.cuda))  # global, profile
        self.reset_to_zero: list[str] = []
        self.restore_value: list[str] = []
        self.kernels: dict[str, Any] = {}
        self.unsupported: dict[str, str] = {}
        self.tolerances: tuple[float, float] | None = None
        self.representatives: Representatives[Any] = Representatives(self._compare_one)  # of HostArray
        self.reference_raw: dict[str, TensorDesc] | None = None  # the first representatives' bytes
        self._read_buffers: dict[str, Any] = {}  # output name -> host buffer, reused run to run
        self._nonfinite: dict[tuple[str, str], bool] = {}  # (output, representative) -> NaN/Inf found
        self.device_check = DeviceCheck(self.cuda, self.inputs, self.kernel)  # the check on the GPU
        self.peak_bytes = FLUSH_BYTES  # the most device memory held for the run (allocations)

    def held_bytes(self) -> int:
        """Device memory this process allocated and holds now (its CUDA context aside)."""
        return FLUSH_BYTES + self.inputs.held_bytes + sum(s.capacity for s in self.scratch)

    def release(self) -> dict[str, Any]:
        """The run ended: its input copies and scratch are freed; what it held at most, in bytes
        (then counted afresh for the next run)."""
        peak = max(self.peak_bytes, self.held_bytes())
        self.inputs.free()
        for scratch in self.scratch:
            scratch.free()
        self._read_buffers.clear()
        self.representatives.reset()
        self.reference_raw = None
        self.device_check.reset()
        self.peak_bytes = self.held_bytes()
        return {"peak_bytes": peak, "held_bytes": self.peak_bytes}

    # -- inputs and reference -----------------------------------------------------------------

    def set_inputs(
        self, inputs: dict[str, Any], reset_to_zero: list[str], restore_value: list[str]
    ) -> dict[str, Any]:
        self.inputs.load(inputs)
        self.reset_to_zero = list(reset_to_zero)
        self.restore_value = list(restore_value)
        self.representatives.reset()
        self.reference_raw = None
        self._read_buffers.clear()
        self._nonfinite.clear()
        self.device_check.reset()
        self.peak_bytes = max(self.peak_bytes, self.held_bytes())
        return {
            "transfer_s": self.inputs.transfer_s,
            "via_ipc": self.inputs.via_ipc,
            "via_host": self.inputs.via_host,
        }

    def set_reference(self, reference: dict[str, TensorDesc], tolerances: tuple[float, float] | None) -> None:
        """The user's expected outputs (or those another sandbox settled on): the first representatives."""
        import numpy as np

        from triton_kiln.sandbox.compare_np import decode, fingerprint_words, raw_view

        seeded = {}
        for name, d in reference.items():
            words = raw_view(np.frombuffer(d.host or b"", np.uint8), d.dtype, d.itemsize, d.shape, d.strides)
            seeded[name] = (fingerprint_words(d.dtype, words), decode(words, d.dtype))
        self.representatives.seed(seeded)
        self.reference_raw = dict(reference)
        self.tolerances = tolerances
        self.device_check.reset(active=False)  # the user's reference is on the host: checked there

    def _compare_one(self, name: str, output: Any, representative: Any) -> Any:
        from triton_kiln.sandbox.compare_np import compare_one

        return compare_one(name, output, representative, self.tolerances)

    # -- kernels --------------------------------------------------------------------------------

    def kernel(self, spec: dict[str, Any]) -> Any:
        key = spec["key"]
        if key in self.unsupported:
            raise Unsupported(self.unsupported[key])
        cached = self.kernels.get(key)
        if cached is not None:
            return cached
        try:
            launcher = self._load(spec)
        except Unsupported as exc:
            self.unsupported[key] = str(exc)
            raise
        self.kernels[key] = launcher
        return launcher

    def _load(self, spec: dict[str, Any]) -> Any:
        from triton_kiln.artifacts.artifact import CompiledArtifact
        from triton_kiln.launch.launcher import fast_path_blocker
        from triton_kiln.launch.scratch import ScratchNeeds
        from triton_kiln.launch.spec import ArgSpec, LaunchSpec

        files = {Path(name).suffix: Path(path) for name, path in spec["group"].items()}
        if ".json" not in files or ".cubin" not in files:
            raise Unsupported(f"the binary is not a CUDA cubin (files: {sorted(spec['group'])})")
        metadata = json.loads(files[".json"].read_text())
        artifact = CompiledArtifact(
            spec["key"], str(metadata.get("name", "")), files[".cubin"].read_bytes(), "cubin", metadata
        )
        signature, constexprs = spec["signature"], spec["constexprs"]
        launch_spec = LaunchSpec(
            tuple(ArgSpec(n, signature[n], constexprs.get(n)) for n in spec["arg_names"] if n in signature)
        )
        reason = fast_path_blocker(artifact, launch_spec)
        if reason is not None:
            raise Unsupported(reason)
        kinds = launch_spec.kinds()
        block_x = 32 * artifact.num_warps
        make = self.cuda.Launcher
        needs = ScratchNeeds.from_metadata(artifact.metadata)
        scratch = {"scratch": needs.pairs(), "allocators": self.scratch} if needs.any else {}
        try:
            launcher = make(
                artifact.binary,
                artifact.name,
                kinds,
                block_x,
                artifact.shared,
                _TRITON_EXTRA_PARAMS,
                **scratch,
            )
        except RuntimeError as exc:
            if "shared memory" in str(exc):
                raise OutOfResources(str(exc)) from None
            raise
        reported, expected = launcher.n_params, launcher.n_expected
        if reported >= 0 and reported != expected:
            extra = reported - (expected - _TRITON_EXTRA_PARAMS)
            if not 0 <= extra <= 8 or (needs.any and extra < _TRITON_EXTRA_PARAMS):
                raise Unsupported(
                    f"the driver reports {reported} parameters for {artifact.name}, kiln expected {expected}"
                )
            launcher = make(artifact.binary, artifact.name, kinds, block_x, artifact.shared, extra, **scratch)
        return launcher

    # -- benchmark ------------------------------------------------------------------------------

    def bench(self, spec: dict[str, Any]) -> tuple[Any, ...]:
        started = time.monotonic()
        launcher = self.kernel(spec)
        loaded = time.monotonic()
        ordered = tuple(self.inputs.argument(name) for name in spec["arg_names"])
        grid = tuple(int(g) for g in spec["grid"])

        self.inputs.restore_all()
        launcher.launch(grid, 0, ordered)
        self.cuda.ctx_synchronize()
        ran = time.monotonic()
        fingerprinted = self.device_check.fingerprint_s
        check = self.check_outputs() if spec["want_outputs"] else None
        compared = time.monotonic()
        self.inputs.restore_all()
        checked = time.monotonic()

        estimate, times = self.cuda.bench_loop(
            launcher,
            grid,
            ordered,
            self.inputs.zero_spans(self.reset_to_zero),
            self.inputs.restore_spans(self.restore_value),
            self.flush,
            FLUSH_BYTES,
            float(spec["warmup"]),
            float(spec["rep"]),
        )
        self.inputs.restore_all()
        self.cuda.ctx_synchronize()
        done = time.monotonic()
        self.peak_bytes = max(self.peak_bytes, self.held_bytes())  # scratch grows with launches
        info = {
            "load_s": loaded - started,
            "check_s": checked - loaded,
            # of check_s: the checked run (inputs restored, one launch, synchronized), the
            # comparison, and within it the host reads and hashes of new representatives
            "check_run_s": ran - loaded,
            "check_compare_s": compared - ran,
            "check_fingerprint_s": self.device_check.fingerprint_s - fingerprinted,
            "bench_s": done - checked,
            "seconds": done - started,
            "estimate_ms": estimate,
            "n_repeat": len(times),
            "check_on": "gpu" if self.device_check.active else "host",
        }
        if spec.get("want_samples"):
            info["times"] = [float(t) for t in times]
        return ("ok", quantiles(times, (0.5, 0.2, 0.8)), check, info)

    def check_outputs(self) -> Any:
        """Place this run's outputs among the representatives (:class:`~triton_kiln.sandbox.compare.Verdict`).

        The first clean run settles which tensors are outputs (those it changed; all, if it
        changed none) and becomes the reference; the verdict's triple is against it (or the
        user's), its ``outputs`` say which representative each output agreed with. Outputs are
        read into buffers reused from run to run and decoded only when compared by value: an
        output identical to a representative takes its NaN/Inf finding and costs one bitwise
        pass (what most configs of most kernels produce)."""
        import numpy as np

        from triton_kiln.sandbox.compare_np import decode, fingerprint_words, produced_nonfinite

        if self.device_check.usable():  # on the GPU: only a summary reaches the host
            self.device_check.tolerances = self.tolerances
            return self.device_check.check()
        inputs = self.inputs
        settled = self.representatives.names
        names = settled if settled is not None else (inputs.changed() or list(inputs.tensors))
        names = [name for name in names if name in inputs.tensors]
        dtypes = {name: inputs.tensors[name].desc.dtype for name in names}
        raw = {}
        for name in names:
            size = inputs.tensors[name].desc.nbytes
            buffer = self._read_buffers.get(name)
            if buffer is None or buffer.size != size:
                buffer = self._read_buffers[name] = np.empty(size, dtype=np.uint8)
            raw[name] = inputs.read(name, into=buffer)
        outputs = {name: decode(words, dtypes[name]) for name, words in raw.items()}

        def nonfinite_of(name: str) -> bool:
            for cluster, representative in (self.representatives.kept or {}).get(name, []):
                if (name, cluster) in self._nonfinite and representative.same_bits(outputs[name]):
                    return self._nonfinite[(name, cluster)]
            before = lambda: decode(inputs.read(name, pristine=True), dtypes[name])  # noqa: E731
            return produced_nonfinite(outputs[name], before)

        nonfinite = {name: nonfinite_of(name) for name in outputs}
        verdict = self.representatives.check(
            outputs, lambda name: fingerprint_words(dtypes[name], raw[name]), nonfinite
        )
        for name, reps in (self.representatives.kept or {}).items():
            for index, (cluster, value) in enumerate(reps):
                if name in outputs and value is outputs[name]:  # new: it must not share a read buffer
                    reps[index] = (cluster, value.owned())
                    self._nonfinite[(name, cluster)] = nonfinite[name]
        if settled is None:
            self.reference_raw = {
                name: host_desc(inputs.tensors[name].desc, words) for name, words in raw.items()
            }
        return verdict

    def settled_reference(self) -> dict[str, TensorDesc] | None:
        """The first representatives' bytes (read from the device when it kept them)."""
        if self.device_check.active:
            words = self.device_check.reference_words()
            if words is None:
                return None
            return {name: host_desc(self.inputs.tensors[name].desc, w) for name, w in words.items()}
        return self.reference_raw


def _warm_numpy() -> None:
    """Import numpy off the critical path (the output check needs it; the hello does not)."""
    with contextlib.suppress(ImportError):
        import numpy  # noqa: F401


def main() -> None:
    chan, _parent = procs.parent_channel(ENV_FD, ENV_PARENT)
    init = recv_frame(chan)
    sys.path[:] = init["sys_path"]
    began = time.monotonic()
    try:
        state = NativeState(init["device"], init.get("c_module"))
    except Exception as exc:
        chan.sendall(encode(("fatal", f"{type(exc).__name__}: {exc}")))
        chan.close()
        os._exit(EXIT_NO_DEVICE)
    chan.sendall(
        encode(("hello", os.getpid(), {"ready_at": time.time(), "init_s": time.monotonic() - began}))
    )
    threading.Thread(target=_warm_numpy, name="kiln-sandbox-numpy", daemon=True).start()
    serve(chan, state)


def serve(chan: socket.socket, state: NativeState) -> None:
    while True:
        try:
            message = recv_frame(chan)
        except (EOFError, ConnectionResetError):
            return
        kind = message[0]
        if kind == "bench":
            reply = _run(state, message[1])
        elif kind == "inputs":
            try:
                reply = ("ok_inputs", state.set_inputs(message[1], message[2], message[3]))
            except Exception as exc:
                _, sticky = classify(exc)
                chan.sendall(encode(("inputs_failed", f"{type(exc).__name__}: {exc}")))
                if sticky:
                    os._exit(STICKY_EXIT)
                continue
        elif kind == "reference":
            state.set_reference(message[1], message[2])
            reply = ("ok_reference",)
        elif kind == "get_reference":
            reply = ("reference_data", state.settled_reference(), state.tolerances)
        elif kind == "compare_kernels":
            reply = ("ok_compare_kernels", state.device_check.set_kernels(message[1]))
        elif kind == "release":
            reply = ("ok_release", state.release())
        else:
            reply = ("err", "error", f"unknown request {kind!r}", "", False)
        chan.sendall(encode(reply))
        if reply[0] == "err" and reply[4]:
            os._exit(STICKY_EXIT)  # this process's CUDA context is gone for good


def _run(state: NativeState, spec: dict[str, Any]) -> tuple[Any, ...]:
    started = time.monotonic()
    try:
        return state.bench(spec)
    except Unsupported as exc:
        return ("unsupported", str(exc), {"seconds": time.monotonic() - started})
    except BaseException as exc:
        what, sticky = classify(exc)
        return ("err", what, f"{type(exc).__name__}: {exc}", traceback.format_exc(), sticky)

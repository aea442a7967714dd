"""The sandbox process: loads compiled kernels, runs and times them on its own copies of the inputs.

::

    tuner (caller process)                          sandbox (spawned; its own CUDA context)
      ("inputs", {name: CPU tensor | value},   ->   copy to the GPU, keep a pristine clone
               reset_to_zero, restore_value)
      ("reference", {name: CPU tensor})        ->   expected outputs (optional, from the user)
      ("bench", BenchSpec)                     ->   load cubin (no compile) -> restore inputs ->
                                                    run once -> check outputs here -> do_bench
      <- ("ok", timings [p50, p20, p80], check) | ("err", kind, message, sticky)

Outputs are checked inside the sandbox, on the GPU: each output argument keeps a few distinct
representatives (:class:`~triton_kiln.sandbox.compare.Representatives`; the first config that runs
cleanly, or the user's reference when one was sent, first), and only a
:class:`~triton_kiln.sandbox.compare.Verdict` travels back (ok, largest difference and detail against
the reference; per argument, the representative it agreed with), never the tensors. The tuner
decides at the end of the run (:mod:`triton_kiln.autotuner.outputs`).

Binaries that ask for Triton's runtime allocation (global scratch: device-side tensor
descriptors; profile scratch) get it from the allocator the sandbox sets for itself at start
(:func:`torch_scratch_allocator`, torch's caching allocator, as libraries set theirs): the
caller's allocator stays in the caller's process.

The sandbox never shares memory with the caller: a config that writes out of bounds or makes
an illegal memory access corrupts only the sandbox's copies and context. After a sticky CUDA
error the sandbox replies and exits, and the client starts a fresh one for the next config.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from triton_kiln import child_env, procs, triton_compat
from triton_kiln.errors import is_out_of_resources
from triton_kiln.framing import encode, recv_frame
from triton_kiln.sandbox.compare import (
    Representatives,
    Verdict,
    compare_one,
    tensor_fingerprint,
    tensor_produced_nonfinite,
)
from triton_kiln.sandbox.timing import quantiles

ENV_FD = child_env.SANDBOX_FD
ENV_PARENT = child_env.SANDBOX_PARENT
STICKY_EXIT = 3

STICKY_MARKERS = (
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "an illegal",
    "device-side assert",
    "cudaErrorLaunchFailure",
    "CUDA_ERROR_ILLEGAL",
)


def torch_scratch_allocator(torch: Any, device: Any) -> Any:
    """``allocate(size, align, stream)``: Triton's scratch as an int8 tensor on ``device`` whose
    ``data_ptr()`` is a multiple of ``align`` (torch's caching allocator aligns to 512 bytes;
    larger alignments get a padded block and an aligned view of it)."""

    def allocate(size: int, align: int, stream: int | None) -> Any:
        if align <= 512:
            buffer = torch.empty(size, dtype=torch.int8, device=device)
            if buffer.data_ptr() % align == 0:
                return buffer
        padded = torch.empty(size + align, dtype=torch.int8, device=device)
        offset = -padded.data_ptr() % align
        return padded[offset : offset + size]

    return allocate


class _State:
    def __init__(self, device: int) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)  # creates this process's own CUDA context
        triton_compat.set_scratch_allocators(torch_scratch_allocator(torch, self.device))
        self.args: dict[str, Any] = {}
        self.pristine: dict[str, Any] = {}
        self.reset_to_zero: list[str] = []
        self.restore_value: list[str] = []
        self.kernels: dict[str, Any] = {}
        self.tolerances: tuple[float, float] | None = None
        self.representatives: Representatives[Any] = Representatives(self._compare_one)  # of tensors

    def set_inputs(self, args: dict[str, Any], reset_to_zero: list[str], restore_value: list[str]) -> None:
        torch = self.torch
        self.args = {}
        self.pristine = {}
        for name, value in args.items():
            if isinstance(value, torch.Tensor):
                on_gpu = torch.empty_strided(
                    value.shape, value.stride(), dtype=value.dtype, device=self.device
                )
                on_gpu.copy_(value)
                self.args[name] = on_gpu
                self.pristine[name] = on_gpu.clone()
            else:
                self.args[name] = value
        self.reset_to_zero = list(reset_to_zero)
        self.restore_value = list(restore_value)
        self.representatives.reset()
        torch.cuda.synchronize()

    def set_reference(self, reference: dict[str, Any], tolerances: tuple[float, float] | None) -> None:
        """The user's expected outputs (or those the native sandbox settled on): the first representatives."""
        self.representatives.seed(
            {name: (tensor_fingerprint(t), t.to(self.device)) for name, t in reference.items()}
        )
        self.tolerances = tolerances

    def _compare_one(self, name: str, output: Any, representative: Any) -> Any:
        return compare_one(name, output, representative, self.tolerances)

    def restore_all(self) -> None:
        for name, clone in self.pristine.items():
            self.args[name].copy_(clone)

    def kernel(self, spec: dict[str, Any]) -> Any:
        cached = self.kernels.get(spec["key"])
        if cached is not None:
            return cached
        # Loaded now: resource errors (shared memory...) surface here.
        kernel = triton_compat.load_compiled_kernel(
            spec["arg_names"], spec["signature"], spec["constexprs"], spec["group"], spec["hash"]
        )
        self.kernels[spec["key"]] = kernel
        return kernel

    def bench(self, spec: dict[str, Any]) -> tuple[Any, ...]:
        import triton.testing

        torch = self.torch
        kernel = self.kernel(spec)
        ordered = [self.args[name] for name in spec["arg_names"]]
        grid = tuple(spec["grid"]) + (1,) * (3 - len(spec["grid"]))
        launcher = kernel[grid]

        self.restore_all()
        launcher(*ordered)
        torch.cuda.synchronize()
        check = None
        if spec["want_outputs"]:
            check = self.check_outputs()
        self.restore_all()

        restore = {name: self.pristine[name] for name in self.restore_value}
        zero = [self.args[name] for name in self.reset_to_zero]

        def call() -> None:  # what triton.autotune times: hooks included
            for tensor in zero:
                tensor.zero_()
            launcher(*ordered)
            for name, clone in restore.items():
                self.args[name].copy_(clone)

        # do_bench's own loop; every run's time back, its quantiles computed as do_bench does
        samples = [
            float(t)
            for t in triton.testing.do_bench(call, warmup=spec["warmup"], rep=spec["rep"], return_mode="all")
        ]
        torch.cuda.synchronize()
        self.restore_all()
        timings = quantiles(samples, (0.5, 0.2, 0.8))
        return ("ok", timings, check, samples if spec.get("want_samples") else None)

    def check_outputs(self) -> Verdict:
        """Place this run's outputs among the representatives (:class:`~triton_kiln.sandbox.compare.Verdict`).

        The first clean run settles which tensors are outputs (those it changed; all, if it
        changed none) and becomes the reference; the verdict's triple is against it (or the
        user's), its ``outputs`` say which representative each output agreed with."""
        torch = self.torch
        names = self.representatives.names
        if names is None:
            tensors = [n for n, t in self.args.items() if isinstance(t, torch.Tensor)]
            names = [n for n in tensors if not torch.equal(self.args[n], self.pristine[n])] or tensors
        outputs = {name: self.args[name].clone() for name in names if name in self.args}
        nonfinite = {
            name: tensor_produced_nonfinite(value, self.pristine[name]) for name, value in outputs.items()
        }
        return self.representatives.check(outputs, lambda name: tensor_fingerprint(outputs[name]), nonfinite)


def _classify(exc: BaseException) -> tuple[str, bool]:
    text = f"{type(exc).__name__}: {exc}"
    sticky = any(marker.lower() in text.lower() for marker in STICKY_MARKERS)
    if is_out_of_resources(exc):
        return "out_of_resources", False
    return ("sticky" if sticky else "error"), sticky


def main() -> None:
    chan, _parent = procs.parent_channel(ENV_FD, ENV_PARENT)
    init = recv_frame(chan)
    sys.path[:] = init["sys_path"]
    state = _State(init["device"])
    chan.sendall(encode(("hello", os.getpid())))
    while True:
        try:
            message = recv_frame(chan)
        except (EOFError, ConnectionResetError):
            return
        kind = message[0]
        if kind == "inputs":
            _, args, reset_to_zero, restore_value = message
            state.set_inputs(args, reset_to_zero, restore_value)
            chan.sendall(encode(("ok_inputs",)))
            continue
        if kind == "reference":
            state.set_reference(message[1], message[2])
            chan.sendall(encode(("ok_reference",)))
            continue
        try:
            reply = state.bench(message[1])
        except BaseException as exc:
            what, sticky = _classify(exc)
            tb = traceback.format_exc()
            chan.sendall(encode(("err", what, f"{type(exc).__name__}: {exc}", tb, sticky)))
            if sticky:
                os._exit(STICKY_EXIT)  # this process's CUDA context is gone for good
            continue
        chan.sendall(encode(reply))

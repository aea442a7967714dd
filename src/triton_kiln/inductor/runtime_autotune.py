"""A codegen kernel's runtime autotune timed in kiln's sandbox (``install(sandbox_benchmarks=True)``,
``KILN_INDUCTOR_SANDBOX=1``).

A kernel Inductor generated with several configs (a reduction, a user-defined Triton kernel with
``triton.autotune``'s configs, the C++ wrapper's lazy compile's first run) times each at its
first call, with that call's inputs, in your process: a config whose kernel faults there kills
your process's CUDA context. With the sandbox on::

    CachingAutotuner.benchmark_all_configs(kernel, *args)      (your process, Inductor's code)
      RuntimeAutotune: the kernel pickled as a compile worker sends it back, each tensor argument
      copied to the host with its layout (the memory its strides reach)      --- one call --->
                                                                   sandbox: kernel rebuilt, its
                                                                   launchers made (binaries
                                                                   loaded), arguments on the GPU
      for each launcher, Inductor's loop calls kernel.bench(launcher)       --- one call each ->
                                                                   Inductor's own bench() of the
                                                                   copy: same runs, same clock
        <- ms | inf and Inductor's reason | a crash, a sticky CUDA error, a hang past
           KILN_BENCH_TIMEOUT_S: inf, one WARNING naming the config; the process is replaced
           and the kernel sent again for the next config
      Inductor's own bookkeeping (coordinate descent's cache, its logs) and its choice
      (the fastest), then your process runs only the chosen config.

Your arguments are never run on or changed: the sandbox times copies (Inductor's own timing
runs on them and zeroes what it zeroes after). Where every config failed, the kernel is not run
here: :class:`~triton_kiln.inductor.errors.InductorRuntimeAutotuneError` says why for each.
Timed as Inductor times them, in your process, where the sandbox cannot take the kernel (it
does not pickle, its arguments hold something other than tensors and numbers, or they exceed
:data:`MAX_ARGUMENT_BYTES`) or cannot rebuild it (one WARNING with the reason).
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triton_kiln import notices
from triton_kiln.inductor.errors import InductorRuntimeAutotuneError
from triton_kiln.sandbox.call_client import CallSandbox
from triton_kiln.sandbox.call_messages import CallFailure, CallOutcome
from triton_kiln.triton_compat import inductor as compat

log = logging.getLogger("kiln.inductor")

MAX_ARGUMENT_BYTES = 1 << 30
"""Arguments larger than this (1 GiB, summed) are timed in your process, as Inductor times them:
their copy passes through host memory twice (the copy and its pickle) and takes seconds."""

NOT_LOADED = "kiln: kernel not loaded"
"""What the sandbox answers for a kernel it does not hold (its process was replaced)."""

_RELOADS = 3  # loads of one kernel again within one config's timing, at most


@dataclass(frozen=True)
class SkippedConfig:
    """A config whose runtime-autotune timing failed in the sandbox: its time is ``inf``."""

    kernel: str
    config: str
    failure: CallFailure | str


@dataclass
class RuntimeAutotuneStats:
    """What the sandboxed runtime autotune did (for tests and benchmarks)."""

    kernels: int = 0
    configs: int = 0
    in_parent: list[tuple[str, str]] = field(default_factory=list)
    """(kernel, why) for each kernel timed in your process instead."""
    skipped: list[SkippedConfig] = field(default_factory=list)


class RuntimeAutotune:
    """Replaces ``CachingAutotuner.benchmark_all_configs``: each config timed in ``sandbox``."""

    def __init__(self, sandbox: CallSandbox, on_timed: Callable[[], None] | None = None) -> None:
        self.sandbox = sandbox
        self.stats = RuntimeAutotuneStats()
        self._on_timed = on_timed
        self._lock = threading.Lock()
        self._tokens = itertools.count()

    def benchmark_all_configs(self, original: Any) -> Any:
        """The method that replaces ``original`` (Inductor's ``benchmark_all_configs``)."""
        runtime = self

        @functools.wraps(original)
        def benchmark_all_configs(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            timer = runtime.timer(kernel, args, kwargs)
            if timer is None:
                return original(kernel, *args, **kwargs)
            kernel.bench = timer.bench  # Inductor's loop calls self.bench(launcher, ...)
            try:
                timings = original(kernel, *args, **kwargs)
            finally:
                kernel.__dict__.pop("bench", None)
                timer.close()
            timer.raise_if_none_ran(timings)
            return timings

        return benchmark_all_configs

    def timer(self, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _KernelTimer | None:
        """The sandbox's timer for this call, or ``None`` (logged) where Inductor times it here."""
        name = compat.kernel_label(kernel)
        if not compat.kernel_on_cuda(kernel):
            return None  # kiln's sandbox is a CUDA process
        payload = compat.kernel_payload(kernel)  # first: the arguments' copy is the larger cost
        if isinstance(payload, str):
            self._in_parent(name, f"the kernel cannot be sent: {payload}")
            return None
        arguments = host_arguments(args, kwargs)
        if isinstance(arguments, str):
            self._in_parent(name, arguments)
            return None
        with self._lock:
            self.stats.kernels += 1
            token = f"{name}-{next(self._tokens)}"
        timer = _KernelTimer(self, kernel, name, token, payload, arguments)
        if not timer.load():
            return None
        return timer

    def _in_parent(self, name: str, why: str) -> None:
        with self._lock:
            self.stats.in_parent.append((name, why))
        # the user asked for the sandbox and this kernel goes without it: said even with no logging set up
        notices.warn(log, f"kiln: {name}'s runtime autotune runs in this process, as Inductor runs it: {why}")

    def _skipped(self, skipped: SkippedConfig) -> None:
        with self._lock:
            self.stats.skipped.append(skipped)
        notices.warn(
            log,
            f"kiln: {skipped.kernel}'s config {skipped.config} skipped in its runtime autotune (time inf): "
            f"{skipped.failure}",
        )

    def _timed(self) -> None:
        with self._lock:
            self.stats.configs += 1
        if self._on_timed is not None:
            self._on_timed()


class _KernelTimer:
    """One ``benchmark_all_configs`` call's configs, timed one sandbox call each."""

    def __init__(
        self,
        runtime: RuntimeAutotune,
        kernel: Any,
        name: str,
        token: str,
        payload: bytes,
        arguments: _HostArguments,
    ) -> None:
        self.runtime = runtime
        self.kernel = kernel
        self.name = name
        self.token = token
        self.payload = payload
        self.arguments = arguments
        self.failures: list[SkippedConfig] = []
        self.held = False  # the sandbox's process holds the kernel (its last call succeeded)

    @property
    def sandbox(self) -> CallSandbox:
        return self.runtime.sandbox

    def load(self) -> bool:
        """The kernel and its arguments into the sandbox; ``False`` (logged) where it could not."""
        outcome = self._load_call()
        if outcome.failure is not None:
            self.runtime._in_parent(self.name, f"the sandbox could not load it: {outcome.failure}")
        return self.held

    def _load_call(self) -> CallOutcome:
        call = functools.partial(load_here, self.token, self.payload, self.arguments)
        outcome = self.sandbox.call(call, label=f"loading {self.name} for its runtime autotune")
        self.held = outcome.failure is None
        return outcome

    def bench(self, launcher: Any, *args: Any, **kwargs: Any) -> float:
        """``CachingAutotuner.bench``'s stand-in: ``launcher``'s time from the sandbox, in ms."""
        config = compat.launcher_config(launcher)
        call = functools.partial(time_here, self.token, compat.config_key(config))
        label = f"{self.name}'s config {config}"
        outcome = self.sandbox.call(call, label=label)
        for _ in range(_RELOADS):
            if outcome.failure is not None or outcome.value != NOT_LOADED:
                break
            # its process was replaced since (a config before crashed it), or another kernel's
            # runtime autotune loaded its own in between: load this one again
            reload = self._load_call()
            outcome = reload if reload.failure is not None else self.sandbox.call(call, label=label)
        self.runtime._timed()
        failure: CallFailure | str | None = outcome.failure
        if failure is None and outcome.value == NOT_LOADED:
            failure = f"the sandbox lost the kernel {_RELOADS} times in a row (other kernels loaded theirs)"
        if failure is not None:
            self.held = outcome.failure is None  # a crash or a hang replaces the process
            skipped = SkippedConfig(self.name, str(config), failure)
            self.failures.append(skipped)
            self.runtime._skipped(skipped)
            return math.inf
        ms, reason = outcome.value
        compat.note_benchmark_failure(self.kernel, launcher, reason)
        return float(ms)

    def close(self) -> None:
        """Free the sandbox's copies (its GPU memory) of this kernel and its arguments (a process
        that was replaced holds none: no new one is started for this)."""
        if self.held:
            self.sandbox.call(
                functools.partial(forget_here, self.token), label=f"freeing {self.name}'s inputs"
            )

    def raise_if_none_ran(self, timings: dict[Any, float]) -> None:
        """Every config failed in the sandbox: the kernel would fault here too, so it is not run."""
        if self.failures and not any(math.isfinite(ms) for ms in timings.values()):
            raise InductorRuntimeAutotuneError(self.name, [(s.config, str(s.failure)) for s in self.failures])


# --- the arguments, to the sandbox and back onto a GPU ---


@dataclass(frozen=True)
class HostTensor:
    """A tensor argument on the host: the memory its strides reach, flat, and its layout."""

    flat: Any  # a CPU tensor
    size: tuple[int, ...]
    stride: tuple[int, ...]
    device: int


@dataclass(frozen=True)
class _HostArguments:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def to_host(tensor: Any) -> HostTensor:
    """``tensor``'s elements as its kernel reads them (every element its sizes and strides reach,
    gaps between them included, from its first element on), copied to the host with its layout."""
    import torch

    flat = torch.as_strided(tensor.detach(), (_span(tensor),), (1,))
    return HostTensor(flat.cpu(), tuple(tensor.shape), tuple(tensor.stride()), tensor.device.index or 0)


def _span(tensor: Any) -> int:
    """How many elements, from its first, ``tensor``'s sizes and strides reach."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum(int(n - 1) * int(s) for n, s in zip(tensor.shape, tensor.stride(), strict=True))


def from_host(host: HostTensor, device: str) -> Any:
    """The tensor :func:`to_host` copied, on ``device``, with its sizes and strides."""
    import torch

    return torch.as_strided(host.flat.to(device), host.size, host.stride)


def host_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _HostArguments | str:
    """``args`` and ``kwargs`` with each CUDA tensor copied to the host, or why they cannot be
    sent (something that is not a tensor, a number, a string or ``None``; more than
    :data:`MAX_ARGUMENT_BYTES`)."""
    import torch

    total = 0

    def host(value: Any) -> Any:
        nonlocal total
        if isinstance(value, torch.Tensor):
            if value.device.type != "cuda":
                raise _NotSendable(f"a tensor on {value.device}")
            total += _span(value) * value.element_size()
            if total > MAX_ARGUMENT_BYTES:  # said before anything is copied
                raise _NotSendable(f"its arguments exceed {MAX_ARGUMENT_BYTES >> 30} GiB")
            return to_host(value)
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise _NotSendable(f"an argument of type {type(value).__name__}")

    try:
        return _HostArguments(tuple(host(a) for a in args), {k: host(v) for k, v in kwargs.items()})
    except _NotSendable as exc:
        return str(exc)


class _NotSendable(Exception):
    pass


def _on_device(value: Any) -> Any:
    return from_host(value, f"cuda:{value.device}") if isinstance(value, HostTensor) else value


# --- in the sandbox process ---

_LOADED: dict[str, tuple[Any, dict[tuple[Any, ...], Any], tuple[Any, ...], dict[str, Any]]] = {}


def load_here(token: str, payload: bytes, arguments: _HostArguments) -> None:
    """(In the sandbox) rebuild the kernel and its launchers, and put its arguments on the GPU;
    one kernel is held at a time."""
    import torch

    _LOADED.clear()
    kernel = compat.unpickle_kernel(payload)
    launchers = compat.make_launchers(kernel)
    args = tuple(_on_device(a) for a in arguments.args)
    kwargs = {k: _on_device(v) for k, v in arguments.kwargs.items()}
    torch.cuda.synchronize()
    _LOADED[token] = (kernel, launchers, args, kwargs)


def time_here(token: str, key: tuple[Any, ...]) -> tuple[float, str | None] | str:
    """(In the sandbox) one config's time by Inductor's own ``bench``, and its reason where
    ``inf``; :data:`NOT_LOADED` where this process does not hold the kernel."""
    held = _LOADED.get(token)
    if held is None:
        return NOT_LOADED
    kernel, launchers, args, kwargs = held
    launcher = launchers.get(key)
    if launcher is None:
        raise LookupError(f"the sandbox made no launcher for config {key} (it failed to load there)")
    ms = float(kernel.bench(launcher, *args, **kwargs))
    return ms, compat.benchmark_failure_reason(kernel, launcher) if math.isinf(ms) else None


def forget_here(token: str) -> None:
    """(In the sandbox) drop the kernel and its arguments' GPU copies."""
    _LOADED.pop(token, None)

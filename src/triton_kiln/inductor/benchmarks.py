"""Inductor's max-autotune template benchmarks in a kiln sandbox process
(``install(sandbox_benchmarks=True)``, ``KILN_INDUCTOR_SANDBOX=1``).

::

    Inductor (parent)                        SandboxBenchmarks (here)          call sandbox process
    -----------------                        ------------------------          --------------------
    AlgorithmSelectorCache.benchmark()
      make_benchmark_fn(choices, ...)  --->  benchmark_fn(choices):
                                               ATen/extern choices: timed here, as Inductor's
                                                 own subprocess mode does
                                               each GPU choice's bmreq.benchmark  ->  unpickle, run:
                                                 (+ Inductor's cache variables)      its own random
                                                                                     inputs, its own
                                                                              <-     CUDA context; ms
                                                 a crash, a sticky CUDA error, a hang past
                                                 KILN_BENCH_TIMEOUT_S, an exception: time inf,
                                                 one WARNING with kiln's reason; the process
                                                 is replaced when it died
                                               other choices: Inductor's own benchmarker
    timings {choice: ms}  <---------------
    (an inf choice is never selected; the parent never ran it)

Collective choices keep Inductor's own benchmarker (they must run in every rank's process).
The sandbox process is one per installed triton_kiln.inductor, started at ``install()`` when a GPU is
present; the benchmarks run one at a time (one GPU, no contention between them).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.sandbox.call_client import CallSandbox
from triton_kiln.sandbox.call_messages import CallFailure
from triton_kiln.triton_compat import inductor as compat

log = logging.getLogger("kiln.inductor")


@dataclass(frozen=True)
class SkippedChoice:
    """A template choice whose benchmark failed in the sandbox: its time is ``inf``."""

    choice: str
    failure: CallFailure


@dataclass
class BenchmarkStats:
    """What the sandbox benchmarker did (for tests, benchmarks and ``kiln report``-style logs)."""

    sandboxed: int = 0
    in_parent: int = 0
    by_inductor: int = 0
    skipped: list[SkippedChoice] = field(default_factory=list)
    compiled_in_sandbox: list[dict[str, str]] = field(default_factory=list)
    """Triton compiles the sandbox made itself (kernel and key parts): it should only load."""


class SandboxBenchmarks:
    """Times Inductor's choices: GPU template choices in ``sandbox``, the rest as Inductor would."""

    def __init__(
        self,
        sandbox: CallSandbox,
        parent_key_parts: ParentKeyParts | None = None,
        on_timed: Callable[[], None] | None = None,
    ) -> None:
        """``parent_key_parts(kernel, constants)``: this process's key parts for that compile (the
        config compiler's :meth:`~triton_kiln.inductor.config_compiler.ConfigCompiler.key_parts_for`), to say
        why the sandbox missed. ``on_timed()``: a choice was timed in the sandbox, or skipped
        (the progress line's count)."""
        self.sandbox = sandbox
        self._on_timed = on_timed
        self.stats = BenchmarkStats()
        self._lock = threading.Lock()
        self._parent_key_parts = parent_key_parts
        self._warned_compiles = False

    def make_benchmark_fn(self, original: Any) -> Any:
        """The ``classmethod`` that replaces ``AlgorithmSelectorCache.make_benchmark_fn``;
        ``original`` is the one it replaces (a ``classmethod`` object)."""
        benchmarks = self

        @functools.wraps(original.__func__)
        def make_benchmark_fn(
            cls: Any,
            choices: Any,
            input_nodes: Any,
            layout: Any,
            input_gen_fns: Any,
            hint_override: Any = None,
            is_collective: bool = False,
        ) -> Any:
            inductors = original.__get__(None, cls)
            if is_collective:
                return inductors(
                    choices,
                    input_nodes,
                    layout,
                    input_gen_fns,
                    hint_override=hint_override,
                    is_collective=True,
                )
            context = _Context(cls, inductors, input_nodes, layout, input_gen_fns, hint_override)
            return functools.partial(benchmarks.benchmark, context)

        return classmethod(make_benchmark_fn)

    def benchmark(self, context: _Context, choices: Any) -> dict[Any, float]:
        """``{choice: ms}`` for ``choices``, in their order (see the module docstring)."""
        choices = list(choices)
        extern = [c for c in choices if compat.is_extern_choice(context.cls, c)]
        sandboxed = [
            c
            for c in choices
            if not compat.is_extern_choice(context.cls, c) and compat.is_gpu_request_choice(c)
        ]
        taken = {id(c) for c in extern} | {id(c) for c in sandboxed}
        others = [c for c in choices if id(c) not in taken]
        timings: dict[Any, float] = {}
        if extern:
            timings.update(
                compat.benchmark_in_parent(
                    context.cls,
                    extern,
                    input_nodes=context.input_nodes,
                    layout=context.layout,
                    input_gen_fns=context.input_gen_fns,
                    hint_override=context.hint_override,
                )
            )
        for choice in sandboxed:
            timings[choice] = self.time_in_sandbox(choice)
        if sandboxed:
            self.check_sandbox_compiles()
        if others:
            timings.update(
                context.inductors(
                    others,
                    context.input_nodes,
                    context.layout,
                    context.input_gen_fns,
                    hint_override=context.hint_override,
                )(others)
            )
        with self._lock:
            self.stats.in_parent += len(extern)
            self.stats.sandboxed += len(sandboxed)
            self.stats.by_inductor += len(others)
        return {choice: timings[choice] for choice in choices if choice in timings}

    def time_in_sandbox(self, choice: Any) -> float:
        """One choice's time in ms from the sandbox; ``inf`` (logged at WARNING) if it failed."""
        label = compat.choice_label(choice)
        call = compat.benchmark_call(choice)
        outcome = self.sandbox.call(call, label=f"benchmark of {label}", env=compat.benchmark_env())
        if self._on_timed is not None:
            self._on_timed()
        if outcome.failure is None:
            try:
                value = float(outcome.value)
            except (TypeError, ValueError):
                value = math.inf
            return value
        with self._lock:
            self.stats.skipped.append(SkippedChoice(label, outcome.failure))
        log.warning("kiln: Inductor autotune choice %s skipped (time inf): %s", label, outcome.failure)
        return math.inf

    def check_sandbox_compiles(self) -> None:
        """Ask the sandbox which Triton compiles it made itself (it should find every binary kiln
        compiled in Triton's cache); the first time there are any, one WARNING says which part of
        the key differs from this process's."""
        outcome = self.sandbox.call(compat.compiles_here, label="the sandbox's own compiles")
        if outcome.failure is not None or not outcome.value:
            return
        compiled = [dict(one) for one in outcome.value]
        with self._lock:
            self.stats.compiled_in_sandbox.extend(compiled)
            first, self._warned_compiles = not self._warned_compiles, True
        if first:
            try:
                message = describe_sandbox_compiles(compiled, self._parent_key_parts)
            except Exception as exc:  # a diagnostic: never the compile's failure
                message = f"{_compiled_itself(compiled)} ({exc!r})"
            log.warning("kiln: %s", message)

    def start(self) -> None:
        self.sandbox.start()

    def close(self) -> None:
        self.sandbox.close()


ParentKeyParts = Callable[[str, "str | None"], "dict[str, str] | None"]
"""``(kernel name, constants label) -> key parts`` in the parent (``ConfigCompiler.key_parts_for``)."""


def describe_sandbox_compiles(compiled: list[dict[str, str]], parent_key_parts: ParentKeyParts | None) -> str:
    """One line on the sandbox's own compiles: how many, the first kernel, and which parts of its
    key differ from this process's key for that kernel (with both values, shortened)."""
    first = compiled[0]
    kernel = first.get("kernel", "?")
    head = (
        f"{_compiled_itself(compiled)} (first: {kernel}) instead of loading the binaries kiln put "
        "in Triton's cache, so its benchmarks took longer"
    )
    parent = parent_key_parts(kernel, first.get("constants")) if parent_key_parts is not None else None
    if parent is None:
        return f"{head}; this process keyed no kernel of that name. Key parts there: {_short(first)}"
    differ = triton_compat.key_parts_differ(first, parent)
    against = "" if parent.get("same_config") == "yes" else " (compared with another config of it)"
    if not differ:
        return f"{head}; its key parts equal this process's{against}"
    detail = "; ".join(
        f"{name}: here {_clip(parent.get(name))}, there {_clip(first.get(name))}" for name in differ
    )
    return f"{head}; its key differs from this process's{against} in {', '.join(differ)} ({detail})"


def _compiled_itself(compiled: list[dict[str, str]]) -> str:
    return f"the benchmark sandbox compiled {len(compiled)} Triton kernel(s) itself"


def _clip(value: str | None, width: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _short(parts: dict[str, str]) -> str:
    return ", ".join(f"{name}={_clip(value, 60)}" for name, value in parts.items() if name != "kernel")


@dataclass(frozen=True)
class _Context:
    """One ``make_benchmark_fn`` call's arguments."""

    cls: Any
    inductors: Any  # Inductor's own make_benchmark_fn, bound to cls
    input_nodes: Any
    layout: Any
    input_gen_fns: Any
    hint_override: Any


def make_sandbox(timeout_s: float) -> CallSandbox:
    """The sandbox process the benchmarks run in (torch imported and CUDA ready when it says so)."""
    return CallSandbox(
        timeout_s=timeout_s, warmup=compat.init_benchmark_process, env=dict(compat.BENCHMARK_PROCESS_ENV)
    )

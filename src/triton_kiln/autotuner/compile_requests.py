"""From a call's real arguments to one :class:`~triton_kiln.compile.request.CompileRequest` per config.

kiln specializes exactly as Triton's JIT does (same types, same ``tt.divisibility`` hints for
16-byte-aligned pointers and multiples of 16, integers equal to 1 turned into constexprs), by
running Triton's own argument binder for an explicit target: the binaries kiln tunes are the
ones Triton would have compiled for this call, and no GPU driver is needed to build them.

:func:`tuning_key` reproduces ``triton.autotune``'s cache key (the values of the ``key``
arguments, then the dtype of every argument that has one). :func:`call_meta` is the one rule for
which keyword arguments of ``run`` are the kernel's (all but ``grid`` and ``warmup``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_kiln import triton_compat
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest, guess_compile_cost
from triton_kiln.launch import prebuild
from triton_kiln.triton_compat import GPUTarget
from triton_kiln.tuning.configs import COMPILE_OPTIONS, config_json, config_label, config_options
from triton_kiln.tuning.results import ConfigResult

RUN_ONLY_KWARGS = ("grid", "warmup")
"""Keyword arguments of ``Autotuner.run`` that are not the kernel's (Triton passes them along)."""


def call_meta(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The kernel's own keyword arguments of a ``run`` call (``grid`` and ``warmup`` left out)."""
    return {k: v for k, v in kwargs.items() if k not in RUN_ONLY_KWARGS}


@functools.cache
def _binder(fn: Any, target: GPUTarget) -> tuple[Any, Any]:
    return triton_compat.argument_binder(fn, target)


@dataclass(frozen=True)
class BoundArgs:
    """A call's arguments bound to the kernel's parameters (in parameter order)."""

    args: dict[str, Any]  # every parameter, constexprs included (Triton's launcher takes them all)


def bind(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], target: GPUTarget) -> tuple[BoundArgs, Any]:
    """Bind a call; returns the bound arguments and ``(backend, Triton's specialization)``."""
    backend, binder = _binder(fn, target)
    bound, specialization, _options = binder(*args, **kwargs)
    return BoundArgs(dict(bound)), (backend, specialization)


class ConflictingMetaParameters(ValueError):
    """The call passes a meta-parameter the configs tune (``triton.autotune`` raises the same
    ``ValueError``): the caller's mistake, the same for every config, so never a failed config."""


def request_for(
    fn: Any,
    config: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    target: GPUTarget,
    requests: RequestCache | None = None,
    triton_key_dir: Path | None = None,
) -> tuple[CompileRequest, BoundArgs]:
    """The compile request for running ``fn`` with ``config`` on these arguments (taken from
    ``requests`` when an identical call built it before)."""
    meta = call_meta(kwargs)
    conflicts = meta.keys() & config.kwargs.keys()
    if conflicts:
        raise ConflictingMetaParameters(
            f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't "
            f"re-define auto-tuned symbols."
        )
    call_kwargs = {**meta, **config.all_kwargs()}
    bound, (backend, specialization) = bind(fn, args, call_kwargs, target)
    options_only = {k: v for k, v in call_kwargs.items() if k in COMPILE_OPTIONS}
    cache_key = requests.key(config, specialization, options_only) if requests is not None else None
    if cache_key is not None and requests is not None:
        cached = requests.get(cache_key)
        if cached is not None:
            return cached, bound
    _options, signature, constexpr_paths, attr_paths = triton_compat.pack_args(
        fn, backend, call_kwargs, bound.args, specialization, options_only
    )
    names = triton_compat.jit_arg_names(fn)
    hint = "by kiln's autotuner yet."
    constexprs = triton_compat.by_argument(fn.__name__, names, constexpr_paths, hint)
    attrs = triton_compat.by_argument(fn.__name__, names, attr_paths, hint)
    options = config_options(config)
    if triton_key_dir is None:
        request = CompileRequest(fn, signature, constexprs, options=options, target=target, attrs=attrs)
    else:
        request = CompileRequest(
            fn,
            signature,
            constexprs,
            options=options,
            target=target,
            attrs=attrs,
            triton_key_dir=triton_key_dir,
        )
    if cache_key is not None and requests is not None:
        requests.put(cache_key, request)
    return request, bound


class RequestCache:
    """Compile requests already built for a kernel, by (config, Triton's specialization, options).

    Triton's JIT keys its own kernel cache the same way (``compute_cache_key``), so a call that
    Triton would launch without compiling finds its request here without building and hashing a
    new :class:`CompileRequest` (the kernel's source included): the full path then costs about
    what Triton's JIT costs. ``TRITON_*`` variables are those of the request's first build.
    Bounded: it empties itself past ``limit`` entries.
    """

    def __init__(self, limit: int = 4096) -> None:
        self._requests: dict[tuple[Any, ...], CompileRequest] = {}
        self._limit = limit

    def key(self, config: Any, specialization: Any, options: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The cache key of a bound call (Triton's own: its specialization -- every argument's type,
        alignment class and constexpr value -- and the compile options; never the arguments' values,
        whose text can be a whole tensor), or ``None`` when the specialization is unhashable. The
        config is keyed by value (``triton.Config`` hashes its kwargs and ``pre_hook``), never by
        ``id()``: a pruned or reloaded config may be a new object, and a freed one's id reused."""
        key = (config, tuple(specialization), str(sorted(options.items())))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def get(self, key: tuple[Any, ...]) -> CompileRequest | None:
        return self._requests.get(key)

    def put(self, key: tuple[Any, ...], request: CompileRequest) -> None:
        if len(self._requests) >= self._limit:
            self._requests.clear()
        self._requests[key] = request

    def __len__(self) -> int:
        return len(self._requests)


def tuning_key(
    arg_names: Sequence[str], keys: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[Any, ...]:
    """``triton.autotune``'s key: the ``key`` arguments' values, then every argument's dtype."""
    named = {**dict(zip(arg_names, args, strict=False)), **kwargs}
    named = {k: v for k, v in named.items() if k in arg_names}
    key: list[Any] = [named[k] for k in keys if k in named]
    for value in named.values():
        if hasattr(value, "dtype"):
            key.append(str(value.dtype))
    return tuple(key)


@dataclass
class Candidate:
    """One config of a call, specialized: its label, compile request and bound arguments."""

    config: Any
    label: str
    request: CompileRequest
    bound: BoundArgs
    future: Future[CompiledArtifact] | None = None  # its compile, once submitted


def candidate_for(
    fn: Any,
    config: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    target: GPUTarget,
    requests: RequestCache | None = None,
    triton_key_dir: Path | None = None,
) -> Candidate:
    """The :class:`Candidate` for running ``fn`` with ``config`` on these arguments."""
    request, bound = request_for(fn, config, args, kwargs, target, requests, triton_key_dir)
    return Candidate(config, config_label(config), request, bound)


def submit_compiles(pool: Any, candidates: Iterable[Candidate], prebuild_launchers: bool) -> None:
    """Send each candidate's compile to ``pool`` (the longest guessed compile first) and, with
    ``prebuild_launchers`` (``KILN_PREBUILD_LAUNCHERS``), build Triton 3.5/3.6's launcher for
    their signatures beside the compiles (:mod:`triton_kiln.launch.prebuild`)."""
    submitted = list(candidates)
    for candidate in submitted:
        candidate.future = pool.submit(candidate.request, priority=guess_compile_cost(candidate.request))
    if prebuild_launchers:
        prebuild.start_requests(c.request for c in submitted)


def launch_grid(grid: Any, candidate: Candidate, kernel_name: str) -> tuple[int, ...]:
    """The 3-d launch grid of ``grid`` (a tuple, or ``grid(meta)``) for this candidate."""
    if grid is None:
        raise ValueError(f"{kernel_name}: launch it as kernel[grid](...)")
    if callable(grid):
        grid = grid({**candidate.bound.args, **candidate.config.all_kwargs()})
    dims = tuple(int(g) for g in grid)
    return dims + (1,) * (3 - len(dims))


def distinct(candidates: list[Candidate]) -> tuple[list[Candidate], list[tuple[Any, Any]]]:
    """The candidates with one per config: a config listed twice (same label, same ``pre_hook``;
    torchao's int8 matmul lists one so) is tuned once, and ``(duplicate, kept)`` config pairs
    come back so both get its timings. Two configs that print alike but whose ``pre_hook``
    differs are both kept, the later one labelled ``#2``, ``#3``... (labels key a run's results)."""
    kept: list[Candidate] = []
    duplicates: list[tuple[Any, Any]] = []
    by_label: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        alike = by_label.setdefault(candidate.label, [])
        same = next((c for c in alike if c.config.pre_hook is candidate.config.pre_hook), None)
        if same is not None:
            duplicates.append((candidate.config, same.config))
            continue
        labelled = (
            dataclasses.replace(candidate, label=f"{candidate.label} #{len(alike) + 1}")
            if alike
            else candidate
        )
        alike.append(labelled)
        kept.append(labelled)
    return kept, duplicates


def candidate_result(
    candidate: Candidate,
    status: str,
    why: str | None,
    compile_s: float | None,
    times: list[float] | None = None,
    max_diff: float | None = None,
) -> ConfigResult:
    """A tuning result of ``candidate``: ``status`` (and ``why``), its compile time, its timings
    (median, 20th and 80th percentile) and output difference when it ran."""
    return ConfigResult(
        label=candidate.label,
        config=config_json(candidate.config),
        status=status,
        reason=why,
        compile_s=compile_s,
        runtime_ms=times[0] if times else None,
        runtime_ms_p20=times[1] if times else None,
        runtime_ms_p80=times[2] if times else None,
        max_abs_diff=max_diff,
        artifact_key=candidate.request.key,
    )

"""A library's own search served by kiln: its ``run`` calls ``self._bench`` config by config.

Some libraries derive their autotuner from Triton's and replace ``run`` with their own search
(FlagGems' ``LibTuner``: its own key, SQL cache and policy, then ``self.fn.run(...)``), timing
each config with the inherited ``Autotuner._bench``. Under :func:`triton_kiln.install` such a class
derives from kiln's :class:`~triton_kiln.autotuner.Autotuner`, whose ``_bench`` is served here::

    LibTuner.run (wrapped by kiln: the search ends when it returns)
      policy -> self._bench(*args, config=c, **kwargs)        (Triton's contract: [p50, p20, p80])
        first call for these arguments: LibrarySearch
            every (pruned) config -> Candidate (compile_requests.py) -> pool.submit, all at once
            (parallel compiles, each in a crash-isolated worker)
        each call: wait for c's binary, bench it (bench.py: the GPU sandbox, or in-process
            when user hooks / a custom do_bench must run in the caller) through
            screening.Evaluator -> its timings; a failed config -> [inf, inf, inf], logged
      the library picks the winner from the timings and launches it with self.fn.run(...)

Each config that ran is also written to Triton's on-disk cache (``TRITON_CACHE_DIR``) under the
hash ``triton.compile`` computes for the very source and options the pool compiled
(:func:`seed_triton_cache`), as Triton's own ``_bench`` leaves every config it compiled there:
when the library's ``self.fn.run`` (Triton's JIT) launches the winner, its compile finds the
binary when the JIT's key is the same (the usual case), and compiles as before when it is not
(a different debug or instrumentation setting): nothing is written under a key it was not
compiled for.

What kiln cannot do here: check outputs config by config (the rule needs every config's outputs
at once, and the library, not kiln, picks the winner), or record the search in the tuning
database or report (the library keeps its own). :func:`role` says, from a class's code, who
drives its search.
"""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from triton_kiln import triton_compat
from triton_kiln.autotuner import log_lines
from triton_kiln.autotuner.bench import make_bencher
from triton_kiln.autotuner.compile_requests import Candidate, call_meta, submit_compiles, tuning_key
from triton_kiln.autotuner.plan import Bencher, Phase, Services, TuningPlan
from triton_kiln.autotuner.screening import Evaluator
from triton_kiln.tuning.configs import config_label
from triton_kiln.tuning.results import ConfigResult

log = logging.getLogger("kiln.autotune")

_INF = float("inf")


@dataclass(frozen=True)
class Role:
    """Who runs a kiln-derived class's search: ``kiln`` (kiln's ``run``, or a ``run`` calling
    ``super().run``), ``library`` (its ``run`` drives the search and times through ``_bench``),
    or ``none`` (its ``run`` calls neither: kiln has nothing to serve). ``owner``: the class
    whose ``run`` decides, ``module.qualname``."""

    driver: Literal["kiln", "library", "none"]
    owner: str


def _names(fn: Any) -> set[str]:
    """Every global and attribute name ``fn``'s code (nested functions included) refers to."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(getattr(fn, "__kiln_run__", fn), "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return names


def role(cls: type, base: type) -> Role:
    """The :class:`Role` of ``cls``, a subclass of ``base`` (kiln's ``Autotuner``): the first
    ``run`` up its classes that does not call ``super().run`` decides (none: kiln's own)."""
    below = cls.__mro__[: cls.__mro__.index(base)]
    for klass in below:
        run = vars(klass).get("run")
        if run is None or "super" in _names(run):
            continue
        owner = f"{klass.__module__}.{klass.__qualname__}"
        # the search may sit in a helper method: any function of the classes up to kiln's
        if any("_bench" in _names(f) for k in below for f in vars(k).values() if callable(f)):
            return Role("library", owner)
        return Role("none", owner)
    return Role("kiln", f"{base.__module__}.{base.__qualname__}")


def _same(a: Any, b: Any) -> bool:
    """The same argument: the same object, or an equal plain value (never a tensor's ``==``)."""
    return a is b or (type(a) is type(b) and isinstance(a, (int, float, str, bool)) and a == b)


def seed_triton_cache(jit_fn: Any, candidate: Candidate) -> bool:
    """Write ``candidate``'s compiled binary into Triton's cache (``TRITON_CACHE_DIR``, in
    Triton's layout) under the hash ``triton.compile`` gives its request's source and options;
    ``False`` when that slot is already filled."""
    assert candidate.future is not None
    artifact = candidate.future.result()
    request = candidate.request
    src = request.ast_source(jit_fn)
    slot = triton_compat.compile_hash(src, triton_compat.make_backend(request.target), dict(request.options))
    base = src.name[:150]  # as triton.compile names its files
    metadata_name = f"{base}.json"
    if triton_compat.triton_cache_group(slot, metadata_name) is not None:
        return False
    metadata = dict(artifact.metadata)
    metadata["hash"] = slot  # as triton.compile records it
    files: dict[str, bytes | str] = {
        f"{base}.{artifact.binary_ext}": artifact.binary,
        metadata_name: json.dumps(metadata),
    }
    triton_compat.put_in_triton_cache(slot, files, metadata_name)
    return True


def place_subclass(
    cls: Any,
    kiln_class: type,
    triton_class: type,
    only_methods: Sequence[str],
    ending_the_search: Callable[[Callable[..., Any]], Callable[..., Any]],
) -> None:
    """Where a library's autotuner class derived from kiln's goes, said in the log: back on
    Triton's class when it overrides one of ``only_methods`` or its ``run`` reaches nothing of
    kiln's; else kiln's, its ``kernel[grid]`` reaching its own ``run`` when that ``run`` is the
    library's (``_own_run``), its search state ending when that ``run`` returns (the ``run``
    wrapped by ``ending_the_search``)."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    overridden = [m for m in only_methods if m in cls.__dict__]
    found = role(cls, kiln_class)
    if overridden:
        why = f"it overrides {', '.join(overridden)}, which kiln's does not call"
    elif found.driver == "none":
        why = f"{found.owner}.run drives its own search without super().run or self._bench"
    else:
        why = ""
    if why and kiln_class in cls.__bases__:
        cls.__bases__ = tuple(triton_class if b is kiln_class else b for b in cls.__bases__)
        log.info("kiln: %s stays on Triton's autotuner: %s", name, why)
        return
    cls._own_run = found.driver != "kiln"
    if "run" in cls.__dict__:  # its search state ends when its run returns
        cls.run = ending_the_search(cls.__dict__["run"])
    if why:  # below a class that is kiln's: nothing to put back, but kiln is not used
        log.warning("kiln: %s derives from kiln's autotuner, but kiln does not tune it: %s", name, why)
    elif found.driver == "library":
        log.info(
            "kiln: %s drives its own search (%s.run overrides run); kiln compiles and benchmarks "
            "the configs it asks for (_bench)",
            name,
            found.owner,
        )
    else:
        log.info("kiln: %s is routed through kiln's autotuner", name)


class LibrarySearch:
    """One search a library drives through ``_bench``: one call's arguments, every config it may
    ask for compiled at once; ``bench(config, kwargs)`` is Triton's ``_bench`` for one of them."""

    def __init__(
        self, plan: TuningPlan, services: Services, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> None:
        self.plan = plan
        self.services = services
        self.tuner = services.kernel
        self.name = plan.name
        self.args = tuple(args)
        self.meta = call_meta(kwargs)
        self.key = tuning_key(plan.arg_names, plan.keys, args, kwargs)
        self.candidates: dict[Any, Candidate] = {}
        self.unbuildable: dict[Any, Exception] = {}  # raised when the library asks for that config
        self.results: dict[str, ConfigResult] = {}
        self.phase = Phase(plan.timing.warmup_ms, plan.timing.rep_ms, check=False)
        for config in self._configs(kwargs):
            self._add(config, kwargs)
        log.info(
            "kiln: %s: %s drives the search; kiln compiles its %d configs in parallel and times "
            "each one it asks for",
            self.name,
            type(self.tuner).__qualname__,
            len(self.candidates),
        )
        self.bencher: Bencher = make_bencher(plan, services, self.args, kwargs, library_search=True)

    def _configs(self, kwargs: dict[str, Any]) -> list[Any]:
        """The configs the library will ask for: pruned as Triton's ``run`` prunes (the library
        calls ``prune_configs`` before its policy), or all of them if pruning fails here."""
        tuner = self.tuner
        if len(tuner.configs) <= 1:
            return list(tuner.configs)
        try:
            return list(tuner.prune_configs(kwargs))
        except Exception as exc:  # the library's own pruning failing is the library's to report
            log.info("kiln: %s: pruning failed here (%s); compiling every config", self.name, exc)
            return list(tuner.configs)

    def _add(self, config: Any, kwargs: dict[str, Any]) -> Candidate | None:
        try:
            candidate = self.services.candidate(config, self.args, kwargs)
        except Exception as exc:  # e.g. a conflicting meta-parameter: Triton's _bench raises it
            self.unbuildable[config] = exc
            return None
        submit_compiles(self.services.pool(), [candidate], self.plan.settings.prebuild_launchers)
        self.candidates[config] = candidate
        return candidate

    def matches(self, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        """Whether a ``_bench`` call belongs to this search (same key, same argument objects)."""
        meta = call_meta(kwargs)
        same = len(args) == len(self.args) and all(_same(a, b) for a, b in zip(args, self.args, strict=False))
        same = same and meta.keys() == self.meta.keys() and all(_same(meta[k], self.meta[k]) for k in meta)
        return same and tuning_key(self.plan.arg_names, self.plan.keys, args, kwargs) == self.key

    def bench(self, config: Any, kwargs: dict[str, Any]) -> list[float]:
        """Triton's ``_bench`` for ``config``: ``[median, p20, p80]`` ms, inf for one that fails."""
        candidate = self.candidates.get(config)
        if candidate is None and config not in self.unbuildable:
            candidate = self._add(config, kwargs)  # a config the library made up itself
        if candidate is None:
            raise self.unbuildable[config]
        verbose = triton_compat.print_autotuning()
        if verbose:  # as Triton's _bench prints it
            print(log_lines.triton_config_line(self.name, config))
        result, times = Evaluator(self.name, self.bencher, kwargs.get("grid")).evaluate(candidate, self.phase)
        self.results[candidate.label] = result
        if result.status != "ok":
            if verbose:
                print(log_lines.triton_failed_line(result.status, result.reason))
            log.warning(
                "kiln: %s: config %s: %s: %s; its timing is inf, as Triton's _bench gives a config "
                "that cannot run",
                self.name,
                config_label(config),
                result.status,
                result.reason,
            )
            return [_INF, _INF, _INF]
        try:
            seed_triton_cache(self.plan.jit_fn, candidate)
        except OSError as exc:  # an unwritable cache costs the caller one compile, nothing more
            log.info("kiln: %s: could not write %s to Triton's cache: %s", self.name, candidate.label, exc)
        if isinstance(times, (list, tuple)):
            return [float(t) for t in times]
        return [float(times)] * 3

    def end(self) -> None:
        self.bencher.finish()

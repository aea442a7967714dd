"""Two arms' chosen configs timed in one process, under Triton's own harness; and the limit.

**Per kernel** (what decides the 2%): ``bench/realworld.py``'s ``harness`` arm runs the op once
with the kiln arm's choices installed (nothing tuned) while :class:`Capture` records, for every
autotuned kernel and every tuning key the op's call reaches, the first launch's arguments
(:class:`Launch`). Each launch is then timed with the kiln arm's and the Triton arm's chosen
config for that key exactly as Triton's autotuner times a config: the tuner's own
``Autotuner._bench`` (``do_bench`` of that one kernel launch with those arguments, the config's
and the tuner's pre/post hooks, ``reset_to_zero`` and the restore of in-place arguments),
alternating A, B, A, B for at least 5 rounds; each config's time is the median of its rounds
(:func:`time_kernel_choices`). When both arms chose the same config it is timed once per round
and the same number stands for both (noise is not a difference). The op's
``kiln_choice_ms_triton_harness`` / ``triton_choice_ms_triton_harness`` are the sums over the
launches of those medians (:func:`sum_rows`).

**Per op** (kept as ``*_op_level``): the op's whole call timed with ``do_bench``; for ops whose
Python host overhead dominates (FLA's ``chunk_gla``: kiln's three op-level runs were 0.32, 0.51
and 0.62 ms on one H100) it cannot decide 2%.

``bench/realworld.py`` and ``bench/autotune.py`` tune each op once with ``triton.autotune`` and
once with kiln, each in its own process. Whether kiln chose as well as Triton is then decided
here, in ONE fresh process with the stock ``triton.autotune``: each autotuned kernel is handed
the configs an arm chose (per tuning key, from that arm's ``choices.json``), so no tuning runs,
and the op is timed with ``triton.testing.do_bench`` (warm-up 25 ms, rep 100 ms, median),
alternating between the arms ``repeats`` times; each arm's time is the median of its rounds.
Timing both in one process on the same inputs leaves out what differs between processes (clocks
at the time, the allocator's addresses), which two arms' own ``op_ms`` keep.

:func:`limit_s` is the least time a tuning run of the op could take on this machine: per tuning
run, the longest compile or, when the compiles outnumber the cores, their sum over the cores,
plus the time spent timing the contenders (the final round); summed over the op's runs.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ConfigJson = Callable[[Any], dict[str, Any]]


class ReprCache(dict[Any, Any]):
    """A tuner's ``cache`` (tuning key -> config) matched by ``repr(key)``: ``choices.json`` keeps
    the keys as their repr. A key no arm chose raises ``KeyError`` naming it (never tuned)."""

    def __init__(self, by_repr: Mapping[str, Any]) -> None:
        super().__init__()
        self.by_repr = dict(by_repr)
        self.last_key: Any = None  # the key the tuner's run looked up last (:class:`Capture`)

    def __contains__(self, key: object) -> bool:
        self.last_key = key
        return repr(key) in self.by_repr

    def __getitem__(self, key: Any) -> Any:
        self.last_key = key
        try:
            return self.by_repr[repr(key)]
        except KeyError:
            raise KeyError(
                f"no chosen config for tuning key {key!r} (chosen: {sorted(self.by_repr)})"
            ) from None

    def get(self, key: Any, default: Any = None) -> Any:
        return self.by_repr.get(repr(key), default)

    def items(self) -> Any:
        return self.by_repr.items()


def apply_choices(
    tuners: Iterable[Any],
    choices: Mapping[str, Sequence[Sequence[Any]]],
    name_of: Callable[[Any], str],
    config_json: ConfigJson,
    originals: dict[int, list[Any]],
) -> dict[str, Any]:
    """Give each tuner the configs one arm chose: ``choices`` is ``{kernel: [[repr(key),
    config_json], ...]}``. ``originals`` keeps each tuner's own configs (filled on first use),
    the set the chosen ones are found in. Returns per kernel how many keys were set, or why not."""
    applied: dict[str, Any] = {}
    for tuner in tuners:
        name = name_of(tuner)
        chosen = choices.get(name)
        if not chosen:
            continue
        own = originals.setdefault(id(tuner), list(tuner.configs))
        by_repr: dict[str, Any] = {}
        union: list[Any] = []
        for key, wanted in chosen:
            config = next((c for c in own if config_json(c) == wanted), None)
            if config is None:
                applied[name] = f"the chosen config {wanted} is not among this kernel's configs"
                break
            by_repr[str(key)] = config
            if config not in union:
                union.append(config)
        else:
            if "best_config" in by_repr:  # a store without keys (FlagGems): its last choice only
                tuner.configs = union[:1]
            else:  # one config: launched without tuning; several: the cache answers every key
                tuner.configs = union
                tuner.cache = ReprCache(by_repr)
            applied[name] = len(by_repr)
    return applied


def time_alternately(
    arms: Mapping[str, Callable[[], None]],
    run: Callable[[], Any],
    bench: Callable[[Callable[[], Any]], float],
    repeats: int,
) -> dict[str, dict[str, Any]]:
    """Each arm's ``setup()`` then ``bench(run)``, the arms in turn (order reversed every other
    round), ``repeats`` rounds: ``{arm: {"ms": median, "runs": [...]}}``."""
    names = list(arms)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else names[::-1]:
            arms[name]()
            runs[name].append(float(bench(run)))
    return {name: {"ms": statistics.median(values), "runs": values} for name, values in runs.items()}


def limit_s(runs: Iterable[Mapping[str, Any]], cores: int) -> float | None:
    """The limit of an op's tuning runs (``to_json`` summaries, each with ``run.results[*].compile_s``
    and ``run.split.final_s``): per run ``max(longest compile, sum of compiles / cores) + final_s``,
    summed. ``None`` when no run has a compile time (every run served from the database)."""
    total, seen = 0.0, False
    for summary in runs:
        run = summary.get("run", summary)
        compiles = [float(r["compile_s"]) for r in run.get("results", []) if r.get("compile_s") is not None]
        if not compiles:
            continue
        seen = True
        final = float((run.get("split") or {}).get("final_s") or 0.0)
        total += max(*compiles, sum(compiles) / max(1, cores)) + final
    return total if seen else None


# -- per kernel: each launch the op reaches, both choices under the tuner's own _bench ----------


def triton_tuning_key(tuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The tuning key ``triton.runtime.autotuner.Autotuner.run`` computes for this call: the
    ``key`` arguments' values, then every argument's dtype (the form ``choices.json`` keeps)."""
    nargs = dict(zip(tuner.arg_names, args, strict=False))
    named = {k: v for k, v in {**nargs, **kwargs}.items() if k in tuner.arg_names}
    key: list[Any] = [named[k] for k in tuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


@dataclass
class Launch:
    """One autotuned kernel's launch as the op made it, for one tuning key."""

    tuner: Any
    name: str
    key: tuple[Any, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Capture:
    """Records the first launch per (autotuner, tuning key) while the op runs (:meth:`during`)."""

    name_of: Callable[[Any], str]
    launches: list[Launch] = field(default_factory=list)
    seen: set[tuple[int, str]] = field(default_factory=set)

    @contextmanager
    def during(self, tuners: Iterable[Any]) -> Iterator[list[Launch]]:
        """Wrap each tuner's ``run`` (an instance attribute over the class's method: the
        ``kernel[grid](...)`` path and heuristics above it call ``self.run``/``fn.run``)."""
        wrapped: list[tuple[Any, Any]] = []
        for tuner in tuners:
            own = vars(tuner).get("run")  # an instance's own run (rare) is put back as it was
            tuner.run = self._recording(tuner, tuner.run)
            wrapped.append((tuner, own))
        try:
            yield self.launches
        finally:
            for tuner, own in wrapped:
                if own is None:
                    del tuner.run
                else:
                    tuner.run = own

    def _recording(self, tuner: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            cache = getattr(tuner, "cache", None)
            if isinstance(cache, ReprCache):
                cache.last_key = None
            out = original(*args, **kwargs)
            # the key the tuner's own run looked up (a library's class may form it its own way),
            # else the one Triton's run forms
            looked_up = cache.last_key if isinstance(cache, ReprCache) else None
            key = looked_up if isinstance(looked_up, tuple) else triton_tuning_key(tuner, args, kwargs)
            seen = (id(tuner), repr(key))
            if seen not in self.seen:
                self.seen.add(seen)
                self.launches.append(Launch(tuner, self.name_of(tuner), key, tuple(args), dict(kwargs)))
            return out

        return run


def tuner_bench_ms(launch: Launch, config: Any) -> float:
    """One config of one launch timed exactly as Triton's autotuner times it: the tuner's own
    ``Autotuner._bench`` (its ``do_bench`` of the launch, with the config's and the tuner's
    pre/post hooks, in-place arguments reset and restored), the median it returns."""
    tuner = launch.tuner
    tuner.nargs = dict(zip(tuner.arg_names, launch.args, strict=False))
    try:
        return float(tuner._bench(*launch.args, config=config, **launch.kwargs)[0])
    finally:
        tuner.nargs = None


def chosen_config(
    chosen: Sequence[Sequence[Any]] | None, key: tuple[Any, ...], own: Sequence[Any], config_json: ConfigJson
) -> Any:
    """The config an arm chose for ``key`` (``[[repr(key), config_json], ...]``; a store without
    keys gives its ``"best_config"``; an arm that chose for one key only, that one), found among
    the kernel's own configs; ``None`` if none."""
    wanted = None
    entries = list(chosen or [])
    for stored_key, data in entries:
        if stored_key in (repr(key), "best_config"):
            wanted = data
            if stored_key == repr(key):
                break
    if wanted is None and len(entries) == 1:  # the op reached one key; its repr was formed otherwise
        wanted = entries[0][1]
    if wanted is None:
        return None
    return next((c for c in own if config_json(c) == wanted), None)


def time_pair(
    bench_a: Callable[[], float], bench_b: Callable[[], float] | None, rounds: int
) -> tuple[list[float], list[float]]:
    """``rounds`` rounds of A then B (B then A every other round: drift hits both alike); with
    ``bench_b`` ``None`` (both arms chose the same config) A alone, its runs standing for both."""
    a_runs: list[float] = []
    b_runs: list[float] = []
    for round_ in range(rounds):
        if bench_b is None:
            a_runs.append(float(bench_a()))
            continue
        order = [(a_runs, bench_a), (b_runs, bench_b)]
        for runs, bench in order if round_ % 2 == 0 else order[::-1]:
            runs.append(float(bench()))
    return a_runs, (list(a_runs) if bench_b is None else b_runs)


def time_kernel_choices(
    launches: Sequence[Launch],
    choices: Mapping[str, Mapping[str, Sequence[Sequence[Any]]]],
    own_configs: Callable[[Any], Sequence[Any]],
    config_json: ConfigJson,
    bench_config: Callable[[Launch, Any], float],
    rounds: int = 5,
) -> list[dict[str, Any]]:
    """Per launch, the ``kiln`` and ``triton`` arms' chosen configs (``choices[arm][kernel]``)
    timed with ``bench_config(launch, config)`` (the tuner's ``_bench``: Triton's own harness),
    alternating, ``max(5, rounds)`` rounds; one row per launch with the medians, their ratio
    and the rounds. A launch whose key an arm did not choose for is a row with ``error``."""
    rounds = max(5, rounds)
    rows: list[dict[str, Any]] = []
    for launch in launches:
        own = own_configs(launch.tuner)
        kiln = chosen_config(choices["kiln"].get(launch.name), launch.key, own, config_json)
        triton = chosen_config(choices["triton"].get(launch.name), launch.key, own, config_json)
        row: dict[str, Any] = {"kernel": launch.name, "key": repr(launch.key)}
        row["kiln_config"] = None if kiln is None else config_json(kiln)
        row["triton_config"] = None if triton is None else config_json(triton)
        if kiln is None or triton is None:
            missing = "kiln" if kiln is None else "triton"
            row["error"] = f"no chosen config for this key from the {missing} arm"
            rows.append(row)
            continue
        same = config_json(kiln) == config_json(triton)
        try:
            kiln_runs, triton_runs = time_pair(
                functools.partial(bench_config, launch, kiln),
                None if same else functools.partial(bench_config, launch, triton),
                rounds,
            )
        except Exception as exc:  # a launch that fails here is data, the other rows still count
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            rows.append(row)
            continue
        kiln_ms, triton_ms = statistics.median(kiln_runs), statistics.median(triton_runs)
        row.update(
            same_config=same,
            kiln_ms=kiln_ms,
            triton_ms=triton_ms,
            ratio=kiln_ms / triton_ms if triton_ms else None,
            kiln_runs=kiln_runs,
            triton_runs=triton_runs,
        )
        rows.append(row)
    return rows


def sum_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The op's chosen configs' time under Triton's harness: the sums over the timed launches of
    each arm's medians, and how many launches could not be timed (their rows say why)."""
    timed = [r for r in rows if "error" not in r]
    return {
        "kiln_choice_ms_triton_harness": sum(r["kiln_ms"] for r in timed) if timed else None,
        "triton_choice_ms_triton_harness": sum(r["triton_ms"] for r in timed) if timed else None,
        "kernel_launches_timed": len(timed),
        "kernel_launches_failed": len(rows) - len(timed),
        "kernels_same_config": sum(1 for r in timed if r["same_config"]),
    }

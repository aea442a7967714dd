"""Two arms' chosen configs timed in one process, under Triton's own harness; and the limit.

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

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

ConfigJson = Callable[[Any], dict[str, Any]]


class ReprCache(dict[Any, Any]):
    """A tuner's ``cache`` (tuning key -> config) matched by ``repr(key)``: ``choices.json`` keeps
    the keys as their repr. A key no arm chose raises ``KeyError`` naming it (never tuned)."""

    def __init__(self, by_repr: Mapping[str, Any]) -> None:
        super().__init__()
        self.by_repr = dict(by_repr)

    def __contains__(self, key: object) -> bool:
        return repr(key) in self.by_repr

    def __getitem__(self, key: Any) -> Any:
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

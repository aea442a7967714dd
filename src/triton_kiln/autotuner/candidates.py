"""A tuning run's candidates: one per (pruned) config, or that config's failure.

Specializing a config runs Triton's backend ``parse_options`` on its compile options, which
asserts on values it refuses (``num_warps=3``: "num_warps must be a power of 2"; ``num_ctas=2``
below sm90). Such a config cannot compile, so, as the README promises of a config that fails to
compile, it is skipped as ``compile_error`` with that message as its reason, and the run goes on
with the others. When every config fails so, the run raises :class:`AutotuneError` listing each
(the first failure as its cause). Pruning that leaves no config raises it too, naming ``top_k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from triton_kiln.autotuner.bench import reason
from triton_kiln.autotuner.specialize import Candidate, distinct
from triton_kiln.tuning.configs import config_json, config_label
from triton_kiln.tuning.results import ConfigResult

if TYPE_CHECKING:
    from triton_kiln.autotuner.autotuner import Autotuner

_FAILED = [float("inf")] * 3


@dataclass
class Built:
    """The run's candidates (one per distinct config), duplicates, and configs that failed here."""

    candidates: list[Candidate]
    duplicates: list[tuple[Any, Any]]
    failed: list[tuple[Any, ConfigResult]] = field(default_factory=list)

    def record(self, database: Any, run_id: int | None) -> None:
        """Record the configs that failed here in the run's database entry (before it finishes)."""
        if database is not None and run_id is not None:
            for _, result in self.failed:
                database.record(run_id, result)

    def apply(self, tuner: Autotuner) -> None:
        """Add the configs that failed here to the tuner's timings and its last run."""
        for config, _ in self.failed:
            tuner.configs_timings[config] = list(_FAILED)
        if self.failed and tuner.last_run is not None:
            results = (*tuner.last_run.results, *(r for _, r in self.failed))
            tuner.last_run = replace(tuner.last_run, results=results)


def build(tuner: Autotuner, configs: Sequence[Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Built:
    """Specialize each config for this call; one that Triton's backend refuses is a failed config."""
    from triton_kiln.autotuner.session import AutotuneError

    name = tuner.base_fn.__name__
    if not configs:
        top_k = getattr(tuner, "configs_top_k", None)
        raise AutotuneError(
            f"pruning left no configs of {name} to tune: prune_configs_by's top_k={top_k!r} with "
            f"{len(tuner.configs)} configs keeps none (a float keeps int(top_k * len(configs))); "
            f"give top_k an int >= 1 or a fraction that keeps at least one config"
        )
    built: list[Candidate] = []
    failed: list[tuple[Any, ConfigResult]] = []
    first: BaseException | None = None
    for config in configs:
        try:
            built.append(tuner._candidate(config, args, kwargs))
        except (AssertionError, ValueError) as exc:  # the backend refused the config's options
            first = first or exc
            label = config_label(config)
            failed.append((config, _failed_result(config, label, exc)))
    if not built:
        lines = [f"  {r.label}: {r.status}: {r.reason}" for _, r in failed]
        raise AutotuneError(f"every config of {name} failed:\n" + "\n".join(lines)) from first
    candidates, duplicates = distinct(built)
    return Built(candidates, duplicates, failed)


def _failed_result(config: Any, label: str, exc: BaseException) -> ConfigResult:
    why = reason(exc) if str(exc).strip() else type(exc).__name__
    return ConfigResult(label=label, config=config_json(config), status="compile_error", reason=why)

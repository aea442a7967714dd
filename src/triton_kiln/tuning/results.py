"""What an autotuning run measured: one :class:`ConfigResult` per config, one :class:`TuningRun` per run.

Both are frozen dataclasses that turn into plain JSON-able dicts (``to_json``) and back
(``from_json``). They are what :class:`~triton_kiln.tuning.db.TuningDatabase` stores and returns and
what :mod:`triton_kiln.tuning.report` prints.

Floats that JSON cannot carry are written as strings: ``+inf`` as ``"inf"`` and ``-inf`` as
``"-inf"`` (``from_json`` reads them back), so every dict here passes ``json.dumps(...,
allow_nan=False)``. NaN is never stored: SQLite turns it into NULL, so a NaN ``max_abs_diff``
(outputs that contain NaN) is recorded as ``inf`` and a NaN timing is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

STATUSES: tuple[str, ...] = (
    "ok",
    "compile_error",
    "crashed",
    "timeout",
    "out_of_resources",
    "bench_error",
    "bench_crashed",
    "bench_timeout",
    "wrong_output",
    "pruned",
)
"""Every status a config can end with. Only ``"ok"`` configs have a trusted runtime."""

_TIMINGS = ("compile_s", "runtime_ms", "runtime_ms_p20", "runtime_ms_p80", "screen_ms")


def _float_to_json(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "inf" if value > 0 else "-inf"


def _float_from_json(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number or null, not {value!r}")
    if isinstance(value, str):
        if value not in ("inf", "-inf"):
            raise ValueError(f"{name} must be a number, 'inf', '-inf' or null, not {value!r}")
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    raise ValueError(f"{name} must be a number or null, not {value!r}")


def _check_mapping(data: Any, what: str) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"not a {what} record: expected a JSON object, got {type(data).__name__}")


def _require(data: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return data[key]
    except KeyError:
        raise ValueError(f"not a {what} record: the key {key!r} is missing") from None


def _split(split: Any, kernel: str) -> dict[str, float]:
    """A run's time split as a plain dict of finite floats (``ValueError`` for anything else)."""
    if not isinstance(split, Mapping):
        raise ValueError(f"run of {kernel!r}: split must be a dict, not {type(split).__name__}")
    checked: dict[str, float] = {}
    for part, seconds in split.items():
        if not isinstance(part, str) or isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"run of {kernel!r}: split entry {part!r}: {seconds!r} is not seconds by name")
        if not math.isfinite(seconds):
            raise ValueError(f"run of {kernel!r}: split entry {part!r} is {seconds!r}, not a finite number")
        checked[part] = float(seconds)
    return checked


FLAGGED = "flagged: "
"""How an ``ok`` config's ``reason`` starts when the output check flagged it (outputs it could not
confirm: the config never wins over a trusted one); any other reason of an ``ok`` config is a
note, such as an argument left unchecked as config-dependent scratch."""


@dataclass(frozen=True)
class ConfigResult:
    """The outcome of one config: how long it took to compile, whether it ran, how fast, how right."""

    label: str
    """Human-readable identity of the config, unique within a run, e.g.
    ``"BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3"``."""

    config: dict[str, Any]
    """The config as JSON: ``{"kwargs": {...}, "num_warps": 4, "num_stages": 3, "num_ctas": 1,
    "maxnreg": None}``. Checked to be JSON-serialisable when the result is made."""

    status: str
    """One of :data:`STATUSES`."""

    reason: str | None = None
    """Why a config failed or was pruned (an error message, a signal name); for an ``"ok"`` config,
    what the output check flagged (``"flagged: ..."``: outputs it could not confirm; the config
    wins only when every ``ok`` config is flagged) and its notes (an argument not checked, as
    config-dependent scratch); else ``None``."""

    compile_s: float | None = None
    """Seconds spent compiling (``None`` when it never compiled, e.g. pruned)."""

    runtime_ms: float | None = None
    """Median runtime in milliseconds."""

    runtime_ms_p20: float | None = None
    """20th percentile runtime in milliseconds."""

    runtime_ms_p80: float | None = None
    """80th percentile runtime in milliseconds."""

    max_abs_diff: float | None = None
    """Largest absolute difference from the reference output (``inf`` if the output has NaN/inf)."""

    artifact_key: str | None = None
    """Compile key of the artifact in the :class:`~triton_kiln.artifacts.store.ArtifactStore`, if it
    compiled."""

    screen_ms: float | None = None
    """For a config timed again in the final round (a contender): its median runtime in the
    screening pass, while others still compiled (``runtime_ms`` is then the final round's);
    ``None`` for a config timed once (and in a database migrated from a schema without it)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"config {self.label!r}: unknown status {self.status!r}; allowed: {', '.join(STATUSES)}"
            )
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"a config label must be a non-empty string, not {self.label!r}")
        if not isinstance(self.config, dict):
            raise ValueError(
                f"config {self.label!r}: config must be a dict, not {type(self.config).__name__}"
            )
        try:
            json.dumps(self.config, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"config {self.label!r}: config must be JSON-serialisable (str/int/float/bool/None, "
                f"lists and dicts of them; no NaN or inf): {exc}"
            ) from None
        for name in _TIMINGS:
            value = getattr(self, name)
            if value is not None and math.isnan(value):
                raise ValueError(f"config {self.label!r}: {name} is NaN; record None for a missing value")
        if self.max_abs_diff is not None and math.isnan(self.max_abs_diff):
            object.__setattr__(self, "max_abs_diff", math.inf)  # SQLite cannot store NaN

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def flagged(self) -> bool:
        """An ``"ok"`` config whose outputs the check flagged (see :mod:`triton_kiln.autotuner.outputs`)."""
        return self.ok and (self.reason or "").startswith(FLAGGED)

    @property
    def trusted(self) -> bool:
        """An ``"ok"`` config the output check did not flag: one of those the winner comes from."""
        return self.ok and not self.flagged

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "config": self.config,
            "status": self.status,
            "reason": self.reason,
            "compile_s": _float_to_json(self.compile_s),
            "runtime_ms": _float_to_json(self.runtime_ms),
            "runtime_ms_p20": _float_to_json(self.runtime_ms_p20),
            "runtime_ms_p80": _float_to_json(self.runtime_ms_p80),
            "max_abs_diff": _float_to_json(self.max_abs_diff),
            "artifact_key": self.artifact_key,
            "screen_ms": _float_to_json(self.screen_ms),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConfigResult:
        what = "ConfigResult"
        _check_mapping(data, what)
        floats = {name: _float_from_json(data.get(name), name) for name in (*_TIMINGS, "max_abs_diff")}
        return cls(
            label=_require(data, "label", what),
            config=dict(_require(data, "config", what)),
            status=_require(data, "status", what),
            reason=data.get("reason"),
            artifact_key=data.get("artifact_key"),
            **floats,
        )


@dataclass(frozen=True)
class TuningRun:
    """One autotuning run of one kernel for one key on one device, with every config's result."""

    kernel: str
    """The kernel's name (for people; identity is ``kernel_key``)."""

    kernel_key: str
    """Hash of the kernel's identity (its source and everything it reaches)."""

    key_repr: str
    """Canonical JSON text of the autotune key values (e.g. ``'{"M": 4096, "N": 4096}'``)."""

    device_name: str
    """The GPU's name, e.g. ``"NVIDIA H100 80GB HBM3"``."""

    capability: str
    """Compute capability, e.g. ``"9.0"``."""

    triton_version: str

    results: tuple[ConfigResult, ...]
    """Every config's result, in the order they were recorded."""

    best_label: str | None
    """Label of the fastest correct config (``None`` if none worked, or the run is unfinished)."""

    default_label: str | None
    """Label of the config speed-ups are computed against: the first config given."""

    started_at: float
    """Unix time the run began."""

    wall_s: float | None = None
    """Seconds the whole run took (``None`` while unfinished)."""

    first_result_s: float | None = None
    """Seconds from the start to the first result."""

    split: dict[str, float] | None = None
    """Where the wall time went, in seconds (``None`` in a database migrated from a schema without it):
    ``sandbox_wait_s``, ``compile_s`` (overlaps the others), ``bench_s``, ``final_s``, ``other_s``;
    see :mod:`triton_kiln.autotuner.timesplit`."""

    finished_at: float | None = None
    """Unix time the run finished; ``None`` for a run that is still going or whose process died."""

    gpu_peak_bytes: int | None = None
    """The most GPU memory kiln's benchmark sandbox allocated for the run (its copies of the
    inputs, Triton's scratch, the L2 flush buffer; its CUDA context aside), freed when the run
    ended; ``None`` where the run had no native sandbox (in-process timing; a migrated database)."""

    run_id: int | None = None
    """Row id in the :class:`~triton_kiln.tuning.db.TuningDatabase` it was read from, else ``None``."""

    adoptions: int = 0
    """Processes of the node that waited for this run while it was tuned and took its best config
    instead of tuning (:mod:`triton_kiln.autotuner.node_tuning`), as the database read it."""

    adoption_wait_s: float | None = None
    """The longest of their waits, in seconds (``None``: no adoption)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))
        if self.split is not None:
            object.__setattr__(self, "split", _split(self.split, self.kernel))
        seen: set[str] = set()
        for result in self.results:
            if result.label in seen:
                raise ValueError(f"run of {self.kernel!r}: config label {result.label!r} appears twice")
            seen.add(result.label)
        if self.best_label is not None and self.best_label not in seen:
            raise ValueError(
                f"run of {self.kernel!r}: best_label {self.best_label!r} is not the label of any result"
            )

    @cached_property
    def results_by_label(self) -> dict[str, ConfigResult]:
        """Results keyed by config label."""
        return {result.label: result for result in self.results}

    @property
    def best(self) -> ConfigResult | None:
        """The best config's result, or ``None``."""
        return None if self.best_label is None else self.results_by_label[self.best_label]

    @property
    def default(self) -> ConfigResult | None:
        """The default config's result, or ``None`` (no default, or it was never recorded)."""
        return None if self.default_label is None else self.results_by_label.get(self.default_label)

    @property
    def ok_results(self) -> tuple[ConfigResult, ...]:
        """Results whose status is ``"ok"``, in recorded order."""
        return tuple(result for result in self.results if result.ok)

    @property
    def passed_over(self) -> tuple[ConfigResult, ...]:
        """Flagged ``ok`` configs that ran faster than the best, trusted one, fastest first: the
        output check could not confirm their outputs, so they did not win."""
        best = self.best
        if best is None or best.flagged or best.runtime_ms is None:
            return ()
        faster = [
            result
            for result in self.results
            if result.flagged and result.runtime_ms is not None and result.runtime_ms < best.runtime_ms
        ]
        return tuple(sorted(faster, key=lambda result: result.runtime_ms or 0.0))

    @property
    def unconfirmed(self) -> bool:
        """The best config is flagged: every ``ok`` config was, so the fastest of them won."""
        return self.best is not None and self.best.flagged

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "kernel_key": self.kernel_key,
            "key_repr": self.key_repr,
            "device_name": self.device_name,
            "capability": self.capability,
            "triton_version": self.triton_version,
            "results": [result.to_json() for result in self.results],
            "best_label": self.best_label,
            "default_label": self.default_label,
            "started_at": self.started_at,
            "wall_s": _float_to_json(self.wall_s),
            "first_result_s": _float_to_json(self.first_result_s),
            "split": None if self.split is None else dict(self.split),
            "finished_at": self.finished_at,
            "run_id": self.run_id,
            "adoptions": self.adoptions,
            "adoption_wait_s": _float_to_json(self.adoption_wait_s),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TuningRun:
        what = "TuningRun"
        _check_mapping(data, what)
        results = _require(data, "results", what)
        if not isinstance(results, list | tuple):
            raise ValueError(f"not a {what} record: 'results' must be a list, not {type(results).__name__}")
        run_id = data.get("run_id")
        return cls(
            kernel=_require(data, "kernel", what),
            kernel_key=_require(data, "kernel_key", what),
            key_repr=_require(data, "key_repr", what),
            device_name=_require(data, "device_name", what),
            capability=_require(data, "capability", what),
            triton_version=_require(data, "triton_version", what),
            results=tuple(ConfigResult.from_json(result) for result in results),
            best_label=data.get("best_label"),
            default_label=data.get("default_label"),
            started_at=float(_require(data, "started_at", what)),
            wall_s=_float_from_json(data.get("wall_s"), "wall_s"),
            first_result_s=_float_from_json(data.get("first_result_s"), "first_result_s"),
            split=data.get("split"),
            finished_at=_float_from_json(data.get("finished_at"), "finished_at"),
            run_id=None if run_id is None else int(run_id),
            adoptions=int(data.get("adoptions", 0)),
            adoption_wait_s=_float_from_json(data.get("adoption_wait_s"), "adoption_wait_s"),
        )

"""The output rule: which configs of a finished tuning run are rejected, flagged or trusted.

During the run each checked config's outputs come back as a :class:`~triton_kiln.sandbox.compare.Verdict`:
per output argument, the representative (a distinct output, named by a hash of its bytes) it
agreed with, those it was compared with and did not agree with, and whether the run wrote
NaN/Inf. :func:`decide` looks at every config's verdicts at once, before the winner is picked,
with each config's parameters (its kwargs, ``num_warps``, ``num_stages``, ``num_ctas``,
``maxnreg``). The rule, per output argument, over the N configs that were checked on it:

* With the user's ``reference=``, a config whose outputs differ from it is rejected at once
  (``wrong_output``); nothing below applies.
* **NaN/Inf.** A config whose run wrote NaN or Inf where the argument held a number is rejected
  when the configs that wrote only numbers are a clear majority (at least 3 and at least 2/3 of
  N); otherwise it is flagged.
* **Scratch, on evidence.** An argument is config-dependent scratch (per-program partial sums
  whose layout follows ``BLOCK_N``, as in Liger's DyT backward) when one parameter explains
  every difference and at least two groups confirm it: configs with equal values of the
  parameter agree, and two or more groups of at least two configs sharing a value agree within
  and differ from each other. Such an argument is not checked, for any config: every config
  competes equally (each one's ``reason`` notes it; none is flagged for it).
* **Majority.** Otherwise the largest group of configs that agree is a clear majority when it
  has at least 3 configs and at least 2/3 of N, and a config compared with it that differs is
  rejected. A parameter value that no config of the majority holds (the only ``MODE=5``, the only
  ``num_stages=5``) is no excuse: most real config lists have one, and it is what the cheapest
  wrong config looks like. A config a restarted sandbox never compared with the majority is
  flagged.
* **No clear majority**, no evidence of scratch (an even split, more distinct outputs than the
  sandbox keeps): every config is flagged.

A flagged config stays ``ok`` but never wins over a trusted one (an ``ok`` config nothing
flagged): the winner is the fastest trusted config, and a faster flagged one is named as passed
over (:attr:`~triton_kiln.tuning.results.TuningRun.passed_over`). Only when every ``ok`` config is
flagged does the fastest of them win, and the log and ``kiln report`` say that no config's
outputs could be confirmed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from triton_kiln.sandbox.compare import OutputCheck, Representatives, Verdict
from triton_kiln.tuning.configs import CONFIG_OPTIONS
from triton_kiln.tuning.results import FLAGGED, ConfigResult

if TYPE_CHECKING:
    from triton_kiln.autotuner.compile_requests import Candidate

log = logging.getLogger("kiln.autotune")

MIN_MAJORITY = 3
"""Configs that must agree before a config that disagrees with them is rejected."""

MAJORITY_SHARE = 2 / 3
"""The share of the checked configs that must agree before one that disagrees is rejected."""

MIN_SCRATCH_GROUPS = 2
"""Groups of configs (each of at least two sharing a parameter value) that must agree within and
differ from each other before an argument is taken for config-dependent scratch."""


@dataclass
class Decision:
    """What :func:`decide` concluded: reasons by config label, and the scratch arguments."""

    rejected: dict[str, list[str]] = field(default_factory=dict)
    flagged: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)  # label -> arguments not checked
    scratch: dict[str, str] = field(default_factory=dict)  # argument -> the parameter it follows

    def reject(self, label: str, why: str) -> None:
        self.rejected.setdefault(label, []).append(why)

    def flag(self, label: str, why: str) -> None:
        self.flagged.setdefault(label, []).append(why)

    def note(self, label: str, what: str) -> None:
        self.notes.setdefault(label, []).append(what)

    def reason(self, label: str) -> tuple[str, str | None]:
        """``(status, reason)`` of a config that ran ``ok``: ``wrong_output`` with why, or ``ok``
        with ``"flagged: ..."`` and notes (``None``: nothing to say)."""
        if label in self.rejected:
            return "wrong_output", "; ".join(self.rejected[label])
        parts = [FLAGGED + "; ".join(self.flagged[label])] if label in self.flagged else []
        parts += self.notes.get(label, [])
        return "ok", "; ".join(parts) or None


def config_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config record's parameters (:func:`~triton_kiln.tuning.configs.config_json`): kwargs, options."""
    params = {str(k): v for k, v in dict(config.get("kwargs", {})).items()}
    params.update((name, config.get(name)) for name in CONFIG_OPTIONS)
    return params


def _clear_majority(size: int, total: int) -> bool:
    return size >= MIN_MAJORITY and size >= MAJORITY_SHARE * total


def decide(verdicts: Mapping[str, Verdict], params: Mapping[str, Mapping[str, Any]]) -> Decision:
    """Apply the rule to the verdicts of a run's checked configs (``label -> Verdict``)."""
    decision = Decision()
    arguments: list[str] = []
    for verdict in verdicts.values():
        arguments += [name for name in verdict.outputs if name not in arguments]
    for argument in arguments:
        members = {label: v.outputs[argument] for label, v in verdicts.items() if argument in v.outputs}
        _decide_argument(argument, members, params, decision)
    return decision


def _decide_argument(
    argument: str,
    members: dict[str, OutputCheck],
    params: Mapping[str, Mapping[str, Any]],
    decision: Decision,
) -> None:
    total = len(members)
    finite = [label for label, check in members.items() if not check.nonfinite]
    for label, check in members.items():
        if not check.nonfinite:
            continue
        what = f"{argument}: the run wrote NaN/Inf where {len(finite)} of {total} configs wrote numbers"
        if _clear_majority(len(finite), total):
            decision.reject(label, what)
        else:
            decision.flag(label, what + " (too few to reject)")
    settled = {label: c for label, c in members.items() if not c.nonfinite}
    groups: dict[str, list[str]] = {}
    for label, check in settled.items():
        if check.cluster is not None:
            groups.setdefault(check.cluster, []).append(label)
    if len(groups) <= 1 and all(c.cluster is not None for c in settled.values()):
        return  # every config that wrote numbers agrees
    follows = _scratch_parameter(settled, params)
    if follows is not None:
        decision.scratch[argument] = follows
        for label in settled:
            decision.note(
                label,
                f"{argument} not checked: it differs between configs as {follows} does "
                "(config-dependent scratch)",
            )
        return
    different = {(c.cluster, other) for c in settled.values() for other in c.differs_from}
    majority = max(groups.items(), key=lambda item: len(item[1]), default=None)
    if majority is not None and _clear_majority(len(majority[1]), total):
        name, agreeing = majority
        for label, check in settled.items():
            if check.cluster == name:
                continue
            known = name in check.differs_from or (
                check.cluster is not None and (name, check.cluster) in different
            )
            if not known:
                decision.flag(
                    label,
                    f"{argument}: not compared with the {len(agreeing)} configs that agree "
                    "(checked by another sandbox process)",
                )
                continue
            decision.reject(
                label,
                f"{argument}: differs from the {len(agreeing)} of {total} configs that agree"
                f"{_detail(check, name)}; no evidence that {argument} is config-dependent scratch",
            )
        return
    sizes = sorted((len(g) for g in groups.values()), reverse=True)
    unplaced = sum(1 for c in settled.values() if c.cluster is None)
    shape = " + ".join(str(s) for s in sizes) + (f" + {unplaced} unplaced" if unplaced else "")
    for label in settled:
        decision.flag(
            label,
            f"{argument}: configs disagree ({shape} of {total}); no clear majority and no evidence "
            "of config-dependent scratch",
        )


def _detail(check: OutputCheck, cluster: str) -> str:
    if cluster in check.differs_from:
        index = check.differs_from.index(cluster)
        if index < len(check.details) and check.details[index]:
            return f" ({check.details[index]})"
    return ""


def _scratch_parameter(
    members: Mapping[str, OutputCheck], params: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """A parameter the argument follows, with evidence (see the module's rule), if any.

    Configs with equal values agree (one representative per value, every config placed), and
    at least :data:`MIN_SCRATCH_GROUPS` values held by two or more configs each have their own
    representative. A value held by one config is no evidence: a lone config that differs looks
    the same whether the argument is scratch or the config is wrong."""
    if any(check.cluster is None for check in members.values()):
        return None
    names: list[str] = []
    for label in members:
        names += [name for name in params.get(label, {}) if name not in names]
    for name in names:
        by_value: dict[str, set[str | None]] = {}
        counts: dict[str, int] = {}
        for label, check in members.items():
            key = repr(params.get(label, {}).get(name))
            by_value.setdefault(key, set()).add(check.cluster)
            counts[key] = counts.get(key, 0) + 1
        if any(len(clusters) != 1 for clusters in by_value.values()):
            continue
        confirmed = {
            cluster for key, clusters in by_value.items() if counts[key] >= 2 for cluster in clusters
        }
        if len(confirmed) >= MIN_SCRATCH_GROUPS:
            return name
    return None


class InProcessCheck:
    """The sandbox's :class:`~triton_kiln.sandbox.compare.Representatives`, for in-process benchmarks:
    outputs arrive as tensors (``BenchOutcome.outputs``), placed here into a :class:`Verdict`."""

    def __init__(self, tolerances: tuple[float, float] | None, reference: Mapping[str, Any] | None) -> None:
        from triton_kiln.sandbox.compare import compare_one

        self.tolerances = tolerances
        self.keeper: Representatives[Any] = Representatives(
            lambda name, out, ref: compare_one(name, out, ref, self.tolerances)
        )
        self.reference = reference  # the first representatives, seeded on first use

    def check(self, outputs: Mapping[str, Any], before: Mapping[str, Any]) -> Verdict:
        """``outputs``: the tensors after one run; ``before``: the arguments as they were."""
        from triton_kiln.sandbox.compare import tensor_fingerprint

        if self.reference is not None:
            self.keeper.seed({n: (tensor_fingerprint(t), t) for n, t in self.reference.items()})
            self.reference = None
        return self._check(outputs, before)

    def _check(self, outputs: Mapping[str, Any], before: Mapping[str, Any]) -> Verdict:
        import torch

        from triton_kiln.sandbox.compare import tensor_fingerprint, tensor_produced_nonfinite

        names = self.keeper.names
        if names is None:
            names = [n for n, t in outputs.items() if not _same(t, before.get(n))] or list(outputs)
        chosen = {n: outputs[n] for n in names if n in outputs}
        nonfinite = {
            n: tensor_produced_nonfinite(
                t, before[n] if _same_shape(t, before.get(n)) else torch.zeros_like(t)
            )
            for n, t in chosen.items()
        }
        return self.keeper.check(chosen, lambda n: tensor_fingerprint(chosen[n]), nonfinite)


def _same_shape(a: Any, b: Any) -> bool:
    import torch

    return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype


def _same(a: Any, b: Any) -> bool:
    import torch

    return _same_shape(a, b) and bool(torch.equal(a, b.to(a.device)))


@dataclass
class OutputChecks:
    """One run's output checks: whether the user gave a reference, and every config's verdict;
    ``groups``: verdicts of configs another process benchmarked on its own inputs (another GPU
    of the node, :mod:`.node_share`), by process: each group is decided on its own."""

    user_reference: bool
    in_process: InProcessCheck
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    groups: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    ruled: set[str] = field(default_factory=set)  # configs decided by this process's verdicts


def apply_rule(
    name: str,
    candidates: Sequence[Candidate],
    results: dict[str, ConfigResult],
    timings: dict[Any, Any],
    checker: OutputChecks,
    record: Callable[[ConfigResult], None],
) -> None:
    """Reject or flag the configs of kernel ``name`` by every checked config's outputs (the rule:
    :func:`decide`), each group of verdicts (this process's, each other GPU's) on its own: their
    outputs came from different inputs. A changed result goes to ``record``."""
    for verdicts in [checker.verdicts, *checker.groups.values()]:
        checked = {label: v for label, v in verdicts.items() if results[label].status == "ok"}
        if verdicts is checker.verdicts:
            checker.ruled = set(checked)
        if not checked:
            continue
        decision = decide(checked, {label: config_params(results[label].config) for label in checked})
        for candidate in candidates:
            label = candidate.label
            if label not in checked:
                continue
            status, why = decision.reason(label)
            if why is None:
                continue
            results[label] = replace(results[label], status=status, reason=why)
            if status != "ok":
                timings[candidate.config] = [math.inf] * 3
            record(results[label])
        for argument, parameter in decision.scratch.items():
            log.info("kiln: %s: %s differs between configs as %s does; treated as config-dependent "
                     "scratch (not checked)", name, argument, parameter)  # fmt: skip


def apply_here(
    labels: Sequence[str], results: dict[str, ConfigResult], checker: OutputChecks, note: str
) -> None:
    """Decide the configs ``labels`` another process benchmarked (already decided in their own
    group) by the verdicts of their outputs checked here as well: with this process's configs
    the rule decided and those checked here before, as if this process had screened them. A
    rejection here rejects; a flag here flags; ``note`` is added to each one's reason."""
    checker.ruled.update(labels)
    checked = {k: v for k, v in checker.verdicts.items() if k in checker.ruled}
    decision = decide(checked, {k: config_params(results[k].config) for k in checked})
    for label in labels:
        if results[label].status != "ok":
            continue
        status, why = decision.reason(label) if label in checked else ("ok", None)
        before = results[label].reason
        if status != "ok":
            reason = why
        elif why is not None and why.startswith(FLAGGED):
            reason = "; ".join(x for x in (why, before) if x)
        else:
            reason = "; ".join(x for x in (before, why) if x)
        if label in checked or checker.user_reference:
            reason = "; ".join(x for x in (reason, note) if x)
        results[label] = replace(results[label], status=status, reason=reason)

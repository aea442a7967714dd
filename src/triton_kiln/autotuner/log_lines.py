"""Where a tuning key's config came from, said once per key; and a warning when the output check
decided the winner (:func:`log_choice`).

Every key an autotuner resolves gets one INFO line on the ``kiln.autotune`` logger naming its
source (:class:`Source`): tuned on this call (with the time and the number of configs), the
tuning database, a bundle, or the autotuner's in-memory ``cache`` (a config put there by other
code, such as a subclass's shared store or an assignment to ``cache``)::

    kiln: add_kernel (4096, 'torch.float32'): tuned 4 configs on this call in 1.52 s; best BLOCK=1024, ...
    kiln: add_kernel (4096, 'torch.float32'): from the tuning database (~/.cache/kiln/tuning.sqlite3, ...
    kiln: add_kernel (4096, 'torch.float32'): adopted from another process of this node (waited ...
    kiln: add_kernel (4096, 'torch.float32'): from bundle model.kbundle; best BLOCK=1024, ...
    kiln: add_kernel (4096, 'torch.float32'): from the in-memory cache; best BLOCK=1024, ...

With ``TRITON_PRINT_AUTOTUNING=1`` (Triton's ``knobs.autotuning.print``) a key tuned on this call
also prints Triton's own lines to stdout (:func:`triton_config_line`, :func:`triton_done_lines`),
as ``triton.autotune`` does; a config adopted from the database or a bundle prints nothing, as
Triton's autotuner prints nothing for a result from its on-disk cache.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton_kiln.tuning.results import TuningRun

log = logging.getLogger("kiln.autotune")


class Source(enum.Enum):
    """Where the config of a tuning key came from."""

    TUNED = "tuned"
    DATABASE = "database"
    NODE = "node"
    BUNDLE = "bundle"
    MEMORY = "memory"


def tuned(name: str, key: Any, configs: int, seconds: float, best: str) -> None:
    """The key was tuned on this call: ``configs`` configs in ``seconds``."""
    log.info(
        "kiln: %s %s: tuned %d configs on this call in %.2f s; best %s", name, key, configs, seconds, best
    )


def from_database(name: str, key: Any, best: str, path: Any, tuned_at: float | None, configs: int) -> None:
    """The key's run was found in the tuning database at ``path`` (tuned at ``tuned_at``)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(tuned_at)) if tuned_at else "an earlier run"
    log.info(
        "kiln: %s %s: from the tuning database (%s, tuned %s over %d configs); best %s",
        name,
        key,
        path,
        when,
        configs,
        best,
    )


def from_node(name: str, key: Any, best: str, waited_s: float, configs: int) -> None:
    """Another process of the node tuned the key while this one waited ``waited_s`` for it."""
    log.info(
        "kiln: %s %s: adopted from another process of this node (waited %.2f s for its %d configs); best %s",
        name,
        key,
        waited_s,
        configs,
        best,
    )


def from_bundle(name: str, key: Any, best: str, path: Any) -> None:
    """The key's config came from the loaded bundle at ``path``."""
    log.info("kiln: %s %s: from bundle %s; best %s", name, key, path, best)


def from_memory(name: str, key: Any, best: str) -> None:
    """The key was already in the autotuner's ``cache`` when it was first called for."""
    log.info("kiln: %s %s: from the in-memory cache; best %s", name, key, best)


def triton_config_line(name: str, config: Any) -> str:
    """Triton's line before benchmarking a config (``Autotuner._bench`` with the knob on)."""
    return f"Autotuning kernel {name} with config {config}"


def triton_failed_line(status: str, why: str | None) -> str:
    """Triton's line for a config that failed (Triton says it for out-of-resources and compile
    assertion failures; kiln for every config it skipped, with the status it gave)."""
    return f"Autotuning failed with {status}: {why}" if why else f"Autotuning failed with {status}"


def triton_done_lines(name: str, key: Any, bench_time: float, best: Any) -> str:
    """Triton's text after tuning a key (``Autotuner.run`` with the knob on), word for word."""
    return (
        f"Triton autotuning for function {name},\nwith key as {key},\n"
        f"finished after {bench_time:.2f}s,\nbest config selected: {best};"
    )


def log_choice(name: str, key: Any, run: TuningRun) -> None:
    """Warn when the output check decided the winner: a faster flagged config was passed
    over, or no config's outputs could be confirmed and the fastest flagged one won."""
    best = run.best
    if best is None:
        return
    for passed in run.passed_over:
        log.warning(
            "kiln: %s %s: passed over %s (%.4f ms), faster than the chosen %s (%.4f ms): its outputs are %s",
            name,
            key,
            passed.label,
            passed.runtime_ms,
            best.label,
            best.runtime_ms,
            passed.reason,
        )
    if run.unconfirmed:
        log.warning(
            "kiln: %s %s: no config's outputs could be confirmed (every ok config is flagged); "
            "chose the fastest, %s: %s. Pass reference= to check outputs against yours.",
            name,
            key,
            best.label,
            best.reason,
        )

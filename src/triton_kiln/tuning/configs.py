"""A ``triton.Config``'s names, in one place: its compile options, its label and its JSON record.

The tuning database, the report and bundles store a config as JSON
(``{"kwargs": {...}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}``);
the autotuner names each config by :func:`config_label`. Every place that lists a config's
option names uses :data:`CONFIG_OPTIONS` (and :data:`COMPILE_OPTIONS` for what reaches the
compiler). Only :func:`config_from_json` imports Triton.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""The options of a ``triton.Config`` that its JSON record keeps."""

COMPILE_OPTIONS = (*CONFIG_OPTIONS, "ir_override")
"""The options of a ``triton.Config`` handed to the compiler (and named in its label)."""


def config_options(config: Any) -> dict[str, Any]:
    """Compile options of a ``triton.Config`` (``None`` values left out, as Triton does)."""
    return {
        name: getattr(config, name) for name in COMPILE_OPTIONS if getattr(config, name, None) is not None
    }


def config_label(config: Any) -> str:
    """A stable, readable name for a ``triton.Config`` (its kwargs, then its options)."""
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    parts += [f"{k}={v}" for k, v in config_options(config).items()]
    return ", ".join(parts)


def config_json(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as JSON (kwargs that are not JSON scalars become their ``repr``)."""
    data: dict[str, Any] = {
        "kwargs": {
            k: (v if isinstance(v, (int, float, str, bool)) or v is None else repr(v))
            for k, v in config.kwargs.items()
        }
    }
    data.update((name, getattr(config, name)) for name in CONFIG_OPTIONS)
    return data


def config_from_json(data: Mapping[str, Any]) -> Any:
    """The ``triton.Config`` a :func:`config_json` record describes."""
    from triton import Config

    options = {k: data[k] for k in CONFIG_OPTIONS if data.get(k) is not None}
    return Config(dict(data.get("kwargs", {})), **options)


def config_meta(data: Mapping[str, Any]) -> dict[str, Any]:
    """What a launch grid's ``meta`` gets from a config record: its kwargs and set options."""
    meta = dict(data.get("kwargs", {}))
    meta.update((name, data[name]) for name in CONFIG_OPTIONS if data.get(name) is not None)
    return meta

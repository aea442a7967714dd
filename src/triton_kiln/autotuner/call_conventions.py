"""How a call reaches a registered launch: heuristics, and normalizing any calling convention.

Two things about a tuned kernel's calls, decided once when the autotuner is made:

* **Heuristics under the autotuner** (``@triton.autotune`` over ``@triton.heuristics``): the
  decorated object is a ``Heuristics`` wrapping the ``@jit`` function. :func:`unwrap` finds the
  ``JITFunction`` and the heuristics layers; :meth:`CallShape.with_heuristics` computes their
  values for one config exactly as Triton's ``Heuristics.run`` would when Triton's autotuner
  calls it (from the positional arguments by name, the keyword arguments and the config's
  kwargs; outer layer first, each value seen by the next), so they become constexprs of that
  config's variant. (Heuristics *over* the autotuner need nothing: their values arrive as
  keyword arguments.)
* **Normalizing a call** for kiln's C dispatcher (``Dispatcher(..., normalize)``): a call with
  keyword arguments, or one that leaves parameters to their defaults, becomes one positional
  tuple, so every calling convention that names the same arguments reaches the same launch::

      prefix mode   the parameters a caller may pass come first and the config's come last:
                    normalize(*args, **kwargs) -> those parameters in order, defaults filled
                    (a generated function with the kernel's own signature): exactly the tuple
                    of a positional call, which the tables already key.
      full mode     heuristics under the autotuner, or a tuned parameter among the caller's:
                    normalize -> every parameter in order, the config (from the tuning key)
                    and the heuristics' values filled in, so they are part of the key.

  A call ``normalize`` cannot take raises ``TypeError``: the dispatcher then runs the full path,
  which raises the user's error or tunes.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_kiln.triton_compat import heuristics_layers, jit_params

Normalize = Callable[..., tuple[Any, ...]]


def unwrap(fn: Any) -> tuple[Any, list[dict[str, Callable[[dict[str, Any]], Any]]]]:
    """The ``JITFunction`` under ``fn`` and the heuristics layers above it (outer first)."""
    layers: list[dict[str, Callable[[dict[str, Any]], Any]]] = []
    inner = fn
    while True:
        values = heuristics_layers(inner)
        if values is None:
            return inner, layers
        layers.append(values)
        inner = inner.fn


class CallShape:
    """What the autotuner knows about its kernel's calls (see the module docstring)."""

    def __init__(
        self, jit_fn: Any, layers: list[dict[str, Callable[[dict[str, Any]], Any]]], configs: Sequence[Any]
    ) -> None:
        self.jit_fn = jit_fn
        self.layers = layers
        self.params = [p.name for p in jit_params(jit_fn)]
        tuned: set[str] = set()
        for config in configs:
            tuned.update(config.kwargs)
        self.tuned = tuned
        computed = {name for layer in layers for name in layer}
        self.computed = computed
        # The parameters a caller passes: every one that no config and no heuristic sets.
        self.callable = [p for p in self.params if p not in tuned and p not in computed]
        n = len(self.callable)
        self.prefix_mode = not layers and self.params[:n] == self.callable
        self._bind = _binder(jit_fn, self.callable)

    @property
    def registers_positional(self) -> bool:
        """Whether positional calls may be keyed as they are (not with heuristics under us)."""
        return not self.layers

    def with_heuristics(
        self, arg_names: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any], config: Any
    ) -> dict[str, Any]:
        """``kwargs`` plus the heuristics' values for running ``config`` (Triton's order)."""
        if not self.layers:
            return dict(kwargs)
        out = dict(kwargs)
        named = {**dict(zip(arg_names, args, strict=False)), **kwargs, **config.all_kwargs()}
        for layer in self.layers:
            for name, heuristic in layer.items():
                value = heuristic(named)
                named[name] = value
                out[name] = value
        return out

    def normalizer(self, lookup: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Normalize | None:
        """The dispatcher's ``normalize``; ``lookup(args, kwargs)`` gives the config a call would
        launch (or raises ``TypeError`` when there is none yet). ``None``: no normalizing."""
        if self._bind is None:
            return None
        bind = self._bind
        if self.prefix_mode:
            return _in_call_order(bind, self.callable)
        params = self.params
        callable_names = self.callable
        layers = self.layers

        def normalize(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            values = bind(*args, **kwargs)
            named = dict(zip(callable_names, values, strict=True))
            config = lookup(args, kwargs)
            named.update(config.all_kwargs())
            for layer in layers:
                for name, heuristic in layer.items():
                    named[name] = heuristic(named)
            try:
                return tuple(named[p] for p in params)
            except KeyError as exc:  # a parameter nothing set: the full path reports it
                raise TypeError(f"missing argument {exc}") from None

        return normalize


def _in_call_order(bind: Normalize, names: Sequence[str]) -> Normalize:
    """``bind``, refusing (``TypeError``) a call whose arguments with a ``dtype`` (tensors) come
    in another order than the signature's: Triton's tuning key lists dtypes in the order the call
    passed its arguments, so such a call may be another key (the full path decides, exactly as
    Triton). Other keywords (ints, bools, ``None``) may come in any order."""
    order = {name: index for index, name in enumerate(names)}

    def normalize(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        last = len(args) - 1
        for name, value in kwargs.items():
            index = order.get(name, -1)
            if index < 0:
                raise TypeError(f"unknown argument {name!r}: the full path decides")
            if hasattr(value, "dtype"):
                if index <= last:
                    raise TypeError("tensors out of signature order: the full path decides")
                last = index
        return bind(*args, **kwargs)

    return normalize


def _binder(jit_fn: Any, names: Sequence[str]) -> Normalize | None:
    """A function with the kernel's signature restricted to ``names`` (in order, defaults kept)
    returning their values as a tuple: Python's own binding, no per-call work of ours."""
    by_name = {p.name: p for p in jit_params(jit_fn)}
    if any(not n.isidentifier() or keyword.iskeyword(n) for n in names):
        return None
    defaults: dict[str, Any] = {}
    parts: list[str] = []
    for name in names:  # a subsequence of a valid signature: no default comes before a non-default
        param = by_name[name]
        if param.has_default:
            defaults[f"_d_{name}"] = param.default
            parts.append(f"{name}=_d_{name}")
        else:
            parts.append(name)
    body = ", ".join(names)
    source = (
        f"def _kiln_normalize({', '.join(parts)}):\n    return ({body}{',' if len(names) == 1 else ''})\n"
    )
    namespace: dict[str, Any] = dict(defaults)
    exec(compile(source, f"<kiln normalize {jit_fn.__name__}>", "exec"), namespace)
    bound: Normalize = namespace["_kiln_normalize"]
    return bound

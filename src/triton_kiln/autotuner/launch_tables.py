"""The variants an autotuner has launched: their launch tables, and their records for bundles.

A variant is one config's binary for one kind of call. After the full path has launched it
(:meth:`Variants.launch`), it is

* registered in the launch tables (:class:`~triton_kiln.launch.dispatch.LaunchTables`), so the next
  call like this one is matched by kiln's C dispatcher and launched without entering Python
  (calls with only positional arguments and no config ``pre_hook``); the key covers everything
  that chose the config and the binary, so a hit launches exactly what the full path would;
* remembered for :func:`triton_kiln.save_bundle` and recorded in ``<cache>/bundle-records`` for
  ``kiln bundle save`` (:mod:`triton_kiln.bundle.index`).

:meth:`Variants.from_bundle` adopts a loaded bundle's variant instead of tuning. The tables are
emptied whenever the autotuner's ``cache`` changes (:class:`TuningCache`).

``kernel[grid](*args)`` returns Triton's ``CompiledKernel`` of the config it launched, in every
path (C dispatcher hit, tuned, from the database, from a bundle, single config), as
``triton.autotune`` does; ``run(..., warmup=True)`` launches nothing and returns ``None``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from triton_kiln import program
from triton_kiln.artifacts import triton_files as layout
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.autotuner import log_lines
from triton_kiln.autotuner.call_conventions import CallShape
from triton_kiln.autotuner.compile_requests import Candidate, call_meta, launch_grid
from triton_kiln.autotuner.plan import Services
from triton_kiln.bundle.format import EntryRecord, KernelRecord, ParamRecord, entry_for
from triton_kiln.errors import KilnError
from triton_kiln.launch.dispatch import LaunchTables
from triton_kiln.launch.entry import HookedEntry, LaunchEntry
from triton_kiln.launch.launcher import KernelLauncher
from triton_kiln.launch.spec import LaunchSpec, param_flags
from triton_kiln.triton_compat import jit_params
from triton_kiln.tuning.configs import config_from_json, config_json, config_label

if TYPE_CHECKING:
    from triton_kiln.settings import Settings

log = logging.getLogger("kiln.autotune")


class TuningCache(dict[Any, Any]):
    """``Autotuner.cache`` (tuning key -> config); every change calls ``on_change``."""

    def __init__(self, on_change: Callable[[], None], *args: Any) -> None:
        super().__init__(*args)
        self._on_change = on_change

    @staticmethod
    def over(on_change: Callable[[], None], value: Any) -> Any:
        """What ``Autotuner.cache = value`` keeps: a mapping is copied into a TuningCache; any
        other store (a subclass's persistent one) is kept, behind a :class:`StoreView`."""
        if value is None or isinstance(value, Mapping):
            return TuningCache(on_change, value or {})
        return StoreView(on_change, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._on_change()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._on_change()

    def clear(self) -> None:
        super().clear()
        self._on_change()

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        self._on_change()
        return value

    def popitem(self) -> tuple[Any, Any]:
        item = super().popitem()
        self._on_change()
        return item

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._on_change()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._on_change()
        return value


class StoreView:
    """A subclass's own ``cache`` object, used as it is; writes also call ``on_change``."""

    def __init__(self, on_change: Callable[[], None], store: Any) -> None:
        self._on_change = on_change
        self.store = store

    def __contains__(self, key: Any) -> bool:
        return key in self.store

    def __getitem__(self, key: Any) -> Any:
        return self.store[key]

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self.store:  # stores need only `in` and `[]` (FLA's CachedAutotuner uses those)
            return default
        return self.store[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.store[key] = value
        self._on_change()

    def __delitem__(self, key: Any) -> None:
        del self.store[key]
        self._on_change()

    def pop(self, *args: Any) -> Any:
        value = self.store.pop(*args)
        self._on_change()
        return value

    def __len__(self) -> int:
        return len(self.store)

    def __iter__(self) -> Any:
        return iter(self.store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class Variants:
    """What an autotuner has launched (see the module docstring): its kernel's calls of
    ``shape``, tuned by ``keys``, launched with ``services``; ``full_path`` serves a call the
    launch tables do not hold."""

    def __init__(
        self,
        services: Services,
        settings: Settings,
        shape: CallShape,
        keys: Sequence[str],
        full_path: Any,
        normalize: Any = None,
    ) -> None:
        self.services = services
        self.tuner = services.kernel  # its Triton attributes: cache, best_config, tuned, loaded_from
        self.settings = settings
        self.shape = shape
        self.fn = fn = shape.jit_fn
        self.name: str = fn.__name__
        self.keys = list(keys)
        self.flags = param_flags(jit_params(fn), list(keys))
        self.tables = LaunchTables(
            self.flags,
            services.kernel,
            full_path,
            name=self.name,
            cache_dir=settings.cache_dir,
            normalize=normalize,
        )
        self._kernels: dict[str, tuple[Any, KernelLauncher]] = {}  # request key -> (Triton kernel, launcher)
        # Variants launched in this process, for bundles: (tuning key, request key) -> (entry, artifact).
        self._saved: dict[tuple[Any, str], tuple[EntryRecord, CompiledArtifact]] = {}

    # -- launching ----------------------------------------------------------------------------

    def forms(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[int, tuple[Any, ...]]]:
        """``(length, call key)`` of each form a later call like this one is matched by (the
        positional call as it is, and its normal form): taken *before* a config's ``pre_hook``
        runs, since a hook may change the caller's arguments (descriptor block shapes)."""
        if not self.tables.available:
            return []
        meta = call_meta(kwargs)
        forms: list[tuple[Any, ...]] = []
        if not meta and self.shape.registers_positional:
            forms.append(tuple(args))
        normalize = self.tables.normalizer
        if normalize is not None:
            with contextlib.suppress(TypeError):  # a call the dispatcher will not normalize
                forms.append(normalize(*args, **meta))
        out = []
        for form in forms:
            call_key = self.tables.key(form)
            if call_key is not None:
                out.append((len(form), call_key))
        return out

    def launch(
        self,
        config: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        grid: Any,
        key: tuple[Any, ...] | None,
        forms: list[tuple[int, tuple[Any, ...]]] | None = None,
    ) -> Any:
        """Launch ``config`` for this call (the full path); returns Triton's ``CompiledKernel``.
        ``forms``: :meth:`forms` of the call as it came (default: computed now)."""
        if forms is None:
            forms = self.forms(args, kwargs)
        candidate = self.services.candidate(config, args, kwargs)
        hit = self._kernels.get(candidate.request.key)
        if hit is None:
            pool = self.services.pool()
            artifact = pool.compile(candidate.request)
            program.note([candidate.request], "tuning")  # a tuned config's launch: the next run starts it
            kernel = layout.load_kernel(pool.store, candidate.request, artifact)
            spec = LaunchSpec.from_request(candidate.request)
            launcher = KernelLauncher(artifact, spec, triton=kernel, fast_launch=self.settings.fast_launch)
            hit = (kernel, launcher)
            self._kernels[candidate.request.key] = hit
        kernel, launcher = hit
        launcher.launch(launch_grid(grid, candidate, self.name), tuple(candidate.bound.args.values()))
        self._register(config, forms, candidate, kernel, launcher)
        if (key, candidate.request.key) not in self._saved:
            self._remember(key, config, candidate, launcher)
        return kernel

    def _register(
        self,
        config: Any,
        forms: list[tuple[int, tuple[Any, ...]]],
        candidate: Candidate,
        kernel: Any,
        launcher: KernelLauncher,
    ) -> None:
        """Let later calls like this one skip everything but the launch (a config with a
        ``pre_hook`` gets a :class:`HookedEntry`, which runs it before each launch)."""
        bound = candidate.bound.args
        names = tuple(bound)
        values = tuple(bound.values())
        source = self.tuner.loaded_from or "tuned"
        meta_extra = dict(config.all_kwargs())
        for length, call_key in forms:
            if length > len(values):
                continue
            tail = values[length:]
            entry = (
                LaunchEntry(launcher, names, tail, meta_extra, config, kernel, source)
                if config.pre_hook is None
                else HookedEntry(config.pre_hook, launcher, names, tail, meta_extra, config, kernel, source)
            )
            self.tables.put(length, call_key, entry)

    def clear(self) -> None:
        self.tables.clear()

    # -- bundles ------------------------------------------------------------------------------

    @functools.cached_property
    def _identity(self) -> tuple[str, list[ParamRecord]]:
        """The kernel's hash (source, helpers, globals) and parameter records, computed once."""
        from triton_kiln.compile.kernel_spec import KernelSpec

        params = []
        for param, flag in zip(jit_params(self.fn), self.flags.decode(), strict=True):
            default = param.default if param.has_default else None
            has_default = bool(param.has_default) and _json_able(default)
            params.append(ParamRecord(param.name, flag, has_default, default if has_default else None))
        kernel_hash = hashlib.sha256(str(KernelSpec.of(self.fn).identity).encode()).hexdigest()
        return kernel_hash, params

    def kernel_record(self) -> KernelRecord:
        """A new, empty KernelRecord for this kernel (entries are the caller's to add)."""
        kernel_hash, params = self._identity
        return KernelRecord(self.name, kernel_hash, list(params))

    def _remember(
        self, key: tuple[Any, ...] | None, config: Any, candidate: Candidate, launcher: KernelLauncher
    ) -> None:
        """Remember the variant for save_bundle, and record it in the cache for `kiln bundle save`."""
        from triton_kiln.bundle.index import write_record

        tuner = self.tuner
        name = self.name
        key_values = {k: candidate.bound.args[k] for k in self.keys if k in candidate.bound.args}
        run = tuner.tuned.get(key) if key is not None else None
        try:
            entry = entry_for(
                name,
                launcher.artifact,
                launcher.spec,
                key_values,
                config_json(config),
                run.to_json() if run is not None else None,
                tuner.loaded_from or ("tuned" if key is not None else "single config"),
            )
        except KilnError as exc:
            log.info("kiln: %s: this variant cannot go into a bundle: %s", name, exc)
            return
        self._saved[(key, candidate.request.key)] = (entry, launcher.artifact)
        pool = self.services.pool()
        if pool.store is not None:  # beside the binaries, in the pool's cache
            try:
                write_record(pool.settings.cache_dir, self.kernel_record(), entry)
            except OSError as exc:
                log.warning("kiln: could not record %s for `kiln bundle save`: %s", name, exc)

    def bundle_record(self) -> tuple[KernelRecord, dict[str, CompiledArtifact]]:
        """This kernel's variants launched in this process, as a bundle's KernelRecord + binaries."""
        record = self.kernel_record()
        artifacts: dict[str, CompiledArtifact] = {}
        for entry, artifact in self._saved.values():
            record.entries.append(entry)
            artifacts[artifact.key] = artifact
        return record, artifacts

    def from_bundle(
        self, key: tuple[Any, ...], args: Sequence[Any], kwargs: Mapping[str, Any], grid: Any
    ) -> Any:
        """Launch a loaded bundle's variant for this call, if one matches (its ``CompiledKernel``);
        ``None`` (nothing launched) otherwise."""
        from triton_kiln.bundle.runtime import BundleMissError, registered_bundles

        bundles = registered_bundles()
        if not bundles or not self.tables.available or call_meta(kwargs):
            return None
        tuner = self.tuner
        record = self.kernel_record()
        args = tuple(args)
        for bundle in reversed(bundles):
            kernel = bundle.find(record.name, record.kernel_hash)
            if kernel is None:
                continue
            try:
                variant = kernel.variant_for(args)
            except BundleMissError:
                continue
            launcher = variant.ensure_launcher()
            config = config_from_json(variant.entry.config)
            tuner.cache[key] = config
            tuner.best_config = config
            tuner.loaded_from = f"bundle {bundle.path}"
            log_lines.from_bundle(record.name, key, config_label(config), bundle.path)
            entry = LaunchEntry(
                launcher,
                variant.names,
                variant.tail,
                variant.meta_extra,
                config,
                launcher.triton_kernel(),
                tuner.loaded_from,
            )
            call_key = self.tables.key(args)
            if call_key is not None:
                self.tables.put(len(args), call_key, entry)
            return entry.launch(grid, args)
        return None


def _json_able(value: Any) -> bool:
    import json

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True

"""Running tuned kernels from a bundle: no Triton compiler, no compile, no tuning.

::

    load_bundle(path) -> Bundle                 manifest + checksums checked, device checked
    bundle["add_kernel"] -> BundledKernel
    kernel[grid](*args)                         call_key(args) -> entry -> KernelLauncher
                                                (kiln's C launcher, built lazily per entry)

Matching: each entry is indexed under the call key a matching call produces (see
:mod:`triton_kiln.launch.spec`), for every number of positional arguments a caller may pass (the
parameters left out must be constexprs fixed by the config, or have defaults). A call that
matches no entry raises :class:`BundleMissError`, listing what the bundle has.

Loaded bundles are also registered, so a ``triton_kiln.autotune``'d kernel with the same source
adopts a bundle's entry instead of tuning (it logs which happened at INFO).

``bundle[name][grid](*args)`` returns ``None``: a bundle's process has no Triton, so there is no
``CompiledKernel`` to return (an autotuner that adopts a bundle's variant returns Triton's).
Settings (``KILN_FAST_LAUNCH``, the cache for kiln's C helper) are resolved when the
:class:`Bundle` is made.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from triton_kiln import settings as settings_mod
from triton_kiln.bundle.format import BundleError, BundleReader, EntryRecord, KernelRecord
from triton_kiln.launch.dispatch import LaunchTables
from triton_kiln.launch.entry import LaunchEntry
from triton_kiln.launch.launcher import KernelLauncher
from triton_kiln.launch.native import NativeBuildError, native
from triton_kiln.launch.spec import LaunchSpec, LaunchSpecError, call_key_for, torch_dtype
from triton_kiln.settings import Settings
from triton_kiln.tuning.configs import config_meta

log = logging.getLogger("kiln.bundle")


class BundleMissError(BundleError, LookupError):
    """A call's arguments match no tuned variant in the bundle."""


class _Variant:
    """One entry, ready to launch once its launcher is built (lazily, on first use)."""

    __slots__ = ("bundle", "entry", "kernel", "meta_extra", "names", "ready", "tail")

    def __init__(
        self, bundle: Bundle, kernel: KernelRecord, entry: EntryRecord, tail: tuple[Any, ...]
    ) -> None:
        self.bundle = bundle
        self.kernel = kernel
        self.entry = entry
        self.tail = tail
        self.names = tuple(p.name for p in kernel.params)
        self.meta_extra = config_meta(entry.config)
        self.ready: LaunchEntry | None = None

    @property
    def launcher(self) -> KernelLauncher | None:
        return self.ready.launcher if self.ready is not None else None

    def ensure_launcher(self) -> KernelLauncher:
        return self._prepare().launcher

    def _prepare(self) -> LaunchEntry:
        if self.ready is None:
            artifact = self.bundle.reader.artifact(self.kernel, self.entry)
            launcher = KernelLauncher(artifact, self.entry.args, fast_launch=self.bundle.settings.fast_launch)
            self.ready = LaunchEntry(
                launcher,
                self.names,
                self.tail,
                self.meta_extra,
                config=dict(self.entry.config),
                source=f"bundle {self.bundle.path}",
            )
            log.info(
                "kiln: %s: tuned config %s loaded from bundle %s (%s launcher)",
                self.kernel.name,
                self.meta_extra,
                self.bundle.path,
                "kiln" if launcher.is_fast else "Triton's",
            )
        return self.ready

    def launch(self, grid: Any, args: tuple[Any, ...]) -> None:
        (self.ready or self._prepare()).launch(grid, args)

    @property
    def fast(self) -> tuple[Any, ...]:
        """What kiln's C dispatcher launches (see :class:`LaunchEntry`); builds the launcher once."""
        return (self.ready or self._prepare()).fast


class BundledKernel:
    """A tuned kernel from a bundle: ``kernel[grid](*args)`` launches the matching variant."""

    def __init__(self, bundle: Bundle, record: KernelRecord) -> None:
        self.bundle = bundle
        self.record = record
        self.name = record.name
        self._flags = record.flags
        # kiln's C dispatcher over this kernel's variants (the autotuner's fast path).
        self._tables = LaunchTables(
            self._flags, self, self._full_path, name=record.name, cache_dir=bundle.settings.cache_dir
        )
        self.best_config: dict[str, Any] | None = None  # the config (JSON) the last call launched
        for entry in record.entries:
            self._index(entry)

    def _index(self, entry: EntryRecord) -> None:
        params = self.record.params
        for n in range(len(params) + 1):
            tail: list[Any] = []
            for param, arg in zip(params[n:], entry.args.args[n:], strict=True):
                if arg.type == "constexpr" and (param.flag == "c" or not param.has_default):
                    tail.append(arg.value)
                elif param.has_default:
                    tail.append(param.default)
                else:
                    break
            else:
                try:
                    key = call_key_for(
                        LaunchSpec(entry.args.args[:n]), self._flags[:n], entry.key_values, torch_dtype
                    )
                except (LaunchSpecError, KeyError):
                    continue
                variant = _Variant(self.bundle, self.record, entry, tuple(tail))
                self._tables.put(n, key, variant, replace=False)

    def variant_for(self, args: tuple[Any, ...]) -> _Variant:
        """The variant a call with these positional arguments launches (no launch, no GPU needed)."""
        if not self._tables.available:
            raise NativeBuildError(
                f"kiln's C helper, which matches calls to variants, is missing: {self._tables.unavailable}"
            )
        variant: _Variant | None = self._tables.get(args)
        if variant is None:
            raise BundleMissError(self._miss_message(args))
        return variant

    def _miss_message(self, args: tuple[Any, ...]) -> str:
        def describe(value: Any) -> str:
            if hasattr(value, "dtype") and hasattr(value, "data_ptr"):
                return f"tensor[{value.dtype}, {'aligned' if value.data_ptr() % 16 == 0 else 'unaligned'}]"
            return repr(value)

        have = [
            f"  key {e.key_values}, config {config_meta(e.config)}, args "
            + ", ".join(f"{a.name}:{a.type}{'/16' if a.divisible_16 else ''}" for a in e.args.args)
            for e in self.record.entries
        ]
        return (
            f"bundle {self.bundle.path}: no tuned variant of {self.name} for a call with "
            f"{len(args)} arguments ({', '.join(describe(a) for a in args)}); it has:\n"
            + "\n".join(have)
            + "\nTune this kernel for these inputs and save the bundle again."
        )

    def __getitem__(self, grid: Any) -> Any:
        """``kernel[grid]``: kiln's C ``BoundCall`` over this kernel's variants (the autotuner's
        fast path), or :class:`_BundledCall` where kiln's C helper cannot be built."""
        bound = self._tables.bind(grid)
        return bound if bound is not None else _BundledCall(self, grid)

    def _full_path(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call the C dispatcher did not match: launch it, or say why it cannot be."""
        _BundledCall(self, grid)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"BundledKernel({self.name}, {len(self.record.entries)} variants, from {self.bundle.path})"


class _BundledCall:
    __slots__ = ("grid", "kernel")

    def __init__(self, kernel: BundledKernel, grid: Any) -> None:
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(
                f"{self.kernel.name} from a bundle takes positional arguments only (got {sorted(kwargs)})"
            )
        variant = self.kernel.variant_for(args)
        variant.launch(self.grid, args)
        self.kernel.best_config = dict(variant.entry.config)


class Bundle(Mapping[str, BundledKernel]):
    """The kernels of a loaded bundle, by name."""

    def __init__(
        self, path: str | Path, *, check_device: bool = True, settings: Settings | None = None
    ) -> None:
        """``settings``: default, those in force now (``KILN_*``)."""
        self.settings = settings if settings is not None else settings_mod.current()
        self.path = Path(path)
        self.reader = BundleReader(self.path)
        self.manifest = self.reader.manifest
        if check_device:
            check_device_matches(self)
        self._kernels = {k.name: BundledKernel(self, k) for k in self.manifest.kernels}

    def __getitem__(self, name: str) -> BundledKernel:
        try:
            return self._kernels[name]
        except KeyError:
            have = sorted(self._kernels)
            raise KeyError(f"bundle {self.path} has no kernel {name!r}; it has {have}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)

    def find(self, name: str, kernel_hash: str) -> BundledKernel | None:
        kernel = self._kernels.get(name)
        return kernel if kernel is not None and kernel.record.kernel_hash == kernel_hash else None

    def __repr__(self) -> str:
        return f"Bundle({self.path}, kernels={sorted(self._kernels)})"


def check_device_matches(bundle: Bundle, device: int = 0, info: tuple[int, int, int] | None = None) -> None:
    """Raise :class:`BundleError` unless every binary can run on ``device`` (capability, driver)."""
    if info is None:
        try:
            info = native(bundle.settings.cache_dir).device_info(device)
        except (NativeBuildError, RuntimeError) as exc:
            raise BundleError(f"cannot check bundle {bundle.path} against this GPU: {exc}") from None
    major, minor, driver = info
    capability = major * 10 + minor
    for kernel in bundle.manifest.kernels:
        for entry in kernel.entries:
            target = entry.metadata["target"]
            arch = int(target["arch"]) if str(target["arch"]).isdigit() else -1
            if target.get("backend") != "cuda" or arch < 0:
                raise BundleError(f"bundle {bundle.path}: {kernel.name} was built for {target}, not CUDA")
            # sm_90 and later Triton binaries use arch-specific features ("sm_90a"): exact match.
            same_family = arch // 10 == major and arch % 10 <= minor
            if arch != capability and (arch >= 90 or not same_family):
                raise BundleError(
                    f"bundle {bundle.path}: {kernel.name} was compiled for sm_{arch}; this GPU is "
                    f"sm_{capability}. Tune and save the bundle on a GPU of this kind."
                )
            needed = _driver_needed(entry.metadata)
            if needed and driver < needed:
                raise BundleError(
                    f"bundle {bundle.path}: {kernel.name} needs a CUDA driver supporting CUDA "
                    f"{needed // 1000}.{needed % 1000 // 10}; this driver supports "
                    f"{driver // 1000}.{driver % 1000 // 10}. Update the NVIDIA driver."
                )


def _driver_needed(metadata: Mapping[str, Any]) -> int:
    """The CUDA version (as cuDriverGetVersion reports it) the binary's PTX ISA needs, or 0."""
    ptx = metadata.get("ptx_version")
    if not isinstance(ptx, int) or ptx <= 0:
        return 0
    # PTX ISA 8.x -> CUDA 12.x, 9.x -> CUDA 13.x (ISA 8.0 came with CUDA 12.0).
    major, minor = divmod(ptx, 10)
    cuda_major = major + 4
    return cuda_major * 1000 + minor * 10


_registry: list[Bundle] = []
_registry_lock = threading.Lock()


def load_bundle(path: str | Path, *, register: bool = True) -> Bundle:
    """Load a bundle written by :func:`triton_kiln.save_bundle` or ``kiln bundle save``.

    Checks the format, every binary's checksum, and that this machine's GPU and driver can run
    every binary. The kernels run with no Triton compiler imported; with ``register`` (the
    default), ``triton_kiln.autotune``'d kernels of the same source also use the bundle's results.
    """
    bundle = Bundle(path)
    if register:
        with _registry_lock:
            _registry.append(bundle)
    return bundle


def registered_bundles() -> list[Bundle]:
    with _registry_lock:
        return list(_registry)

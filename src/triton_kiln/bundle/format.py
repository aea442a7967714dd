"""kiln bundles on disk: ``manifest.json`` plus one binary per tuned variant (docs/BUNDLES.md).

::

    bundle/                                   (or the same tree in one .tar / .tar.gz / .tgz)
      manifest.json      {"format": 1, "kernels": [KernelRecord...], ...}
      binaries/<artifact key>.cubin

A :class:`KernelRecord` describes one ``@triton.jit`` kernel (its parameters and how each is
matched against a call) and holds one :class:`EntryRecord` per tuned variant: the tuning key's
values, the chosen config, the binary's file, checksum and full launch metadata (every field
of :data:`triton_kiln.artifacts.artifact.LAUNCH_FIELDS` required), each argument's type and
specialization, and the tuning record. Bundles are untrusted input: :class:`BundleReader`
validates the manifest against its schema (:mod:`.schema`) and checks every binary at load,
reading files only through :mod:`.storage` (regular files inside the bundle, size-capped,
archives streamed). Every refusal is a :class:`BundleError` subclass (:mod:`.errors`) naming the
entry and field. Nothing is unpickled, nothing written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_kiln.artifacts.artifact import LAUNCH_FIELDS, CompiledArtifact
from triton_kiln.bundle.errors import (
    BundleChecksumError,
    BundleError,
    BundleMemberError,
    BundleMetadataError,
    BundleSchemaError,
    BundleTooLargeError,
)
from triton_kiln.bundle.schema import BUNDLE_FORMAT, parse_manifest
from triton_kiln.bundle.storage import MANIFEST, is_archive, open_storage
from triton_kiln.errors import MissingMetadataError
from triton_kiln.launch.spec import LaunchSpec, LaunchSpecError

__all__ = [
    "BUNDLE_FORMAT",
    "MANIFEST",
    "BundleChecksumError",
    "BundleError",
    "BundleMemberError",
    "BundleMetadataError",
    "BundleReader",
    "BundleSchemaError",
    "BundleTooLargeError",
    "EntryRecord",
    "KernelRecord",
    "Manifest",
    "ParamRecord",
    "check_bundle_path",
    "entry_for",
    "is_archive",
    "write_bundle",
]


@dataclass(frozen=True)
class EntryRecord:
    """One tuned variant: for calls with these key values and argument kinds, this binary."""

    key_values: dict[str, Any]
    config: dict[str, Any]
    artifact_key: str
    binary_file: str
    binary_sha256: str
    metadata: dict[str, Any]
    args: LaunchSpec
    tuning: dict[str, Any] | None = None
    source: str = "tuned"

    def to_json(self) -> dict[str, Any]:
        return {
            "key_values": self.key_values,
            "config": self.config,
            "artifact_key": self.artifact_key,
            "binary": self.binary_file,
            "binary_sha256": self.binary_sha256,
            "metadata": self.metadata,
            "args": self.args.to_json(),
            "tuning": self.tuning,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> EntryRecord:
        for name in ("key_values", "config", "artifact_key", "binary", "binary_sha256", "metadata", "args"):
            if name not in data:
                raise BundleError(f"{where}: the field {name!r} is missing")
        metadata = data["metadata"]
        if not isinstance(metadata, dict):
            raise BundleError(f"{where}: 'metadata' must be an object")
        for name in LAUNCH_FIELDS:
            if name not in metadata:
                raise MissingMetadataError(name, f"{where} ({metadata.get('name', '?')})")
        try:
            args = LaunchSpec.from_json(data["args"])
        except LaunchSpecError as exc:
            raise BundleError(f"{where}: {exc}") from None
        return cls(
            key_values=dict(data["key_values"]),
            config=dict(data["config"]),
            artifact_key=str(data["artifact_key"]),
            binary_file=str(data["binary"]),
            binary_sha256=str(data["binary_sha256"]),
            metadata=metadata,
            args=args,
            tuning=data.get("tuning"),
            source=str(data.get("source", "tuned")),
        )


@dataclass(frozen=True)
class ParamRecord:
    """A kernel parameter: its name, how calls are matched on it, and its default if any."""

    name: str
    flag: str  # "c" constexpr, "k" tuning key, "s" specialized, "n" do_not_specialize, "a" not on alignment
    has_default: bool = False
    default: Any = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "flag": self.flag}
        if self.has_default:
            data["default"] = self.default
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> ParamRecord:
        if "name" not in data or "flag" not in data:
            raise BundleError(f"{where}: a parameter record needs 'name' and 'flag': {dict(data)}")
        if data["flag"] not in ("c", "k", "s", "n", "a"):
            raise BundleError(f"{where}: parameter {data['name']!r} has the unknown flag {data['flag']!r}")
        return cls(str(data["name"]), str(data["flag"]), "default" in data, data.get("default"))


@dataclass
class KernelRecord:
    """One kernel of a bundle and its tuned variants."""

    name: str
    kernel_hash: str  # sha256 of the kernel's identity (source, helpers, globals)
    params: list[ParamRecord]
    entries: list[EntryRecord] = field(default_factory=list)

    @property
    def flags(self) -> bytes:
        return "".join(p.flag for p in self.params).encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kernel_hash": self.kernel_hash,
            "params": [p.to_json() for p in self.params],
            "entries": [e.to_json() for e in self.entries],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> KernelRecord:
        for name in ("name", "kernel_hash", "params", "entries"):
            if name not in data:
                raise BundleError(f"{where}: the field {name!r} is missing")
        where = f"{where} ({data['name']})"
        params = [ParamRecord.from_json(p, where) for p in data["params"]]
        entries = [EntryRecord.from_json(e, f"{where} entry {i}") for i, e in enumerate(data["entries"])]
        for i, entry in enumerate(entries):
            if len(entry.args.args) != len(params):
                raise BundleError(
                    f"{where} entry {i}: {len(entry.args.args)} arguments for {len(params)} parameters"
                )
        return cls(str(data["name"]), str(data["kernel_hash"]), params, entries)


@dataclass
class Manifest:
    kernels: list[KernelRecord]
    created: str = ""
    kiln_version: str = ""
    triton_version: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": BUNDLE_FORMAT,
            "created": self.created,
            "kiln_version": self.kiln_version,
            "triton_version": self.triton_version,
            "kernels": [k.to_json() for k in self.kernels],
        }


_OTHER_ARCHIVES = (
    ".zip", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst", ".tar.lz4", ".tar.lzma",
    ".7z", ".rar", ".gz", ".bz2", ".xz", ".zst", ".lz4",
)  # fmt: skip


def _is_bundle_directory(path: Path) -> bool:
    """An empty directory, or one holding what kiln writes (manifest.json, binaries/) and no more."""
    names = {child.name for child in path.iterdir()}
    return names <= {MANIFEST, "binaries"} and (not names or MANIFEST in names)


def check_bundle_path(path: Path) -> None:
    """Refuse a ``path`` kiln would not write a bundle to, before anything is read or made: an
    archive format kiln does not write (``x.zip`` would otherwise become a directory named
    ``x.zip``), a file that is not an archive, a directory that is not a bundle (replacing it
    would delete what it holds)."""
    name = path.name.lower()
    suffix = next((end for end in _OTHER_ARCHIVES if name.endswith(end)), None)
    if not is_archive(path) and suffix is not None:
        stem = path.name[: -len(suffix)] or "bundle"
        raise BundleError(
            f"{path}: kiln writes a bundle as a directory or a .tar, .tar.gz or .tgz archive, not as "
            f"{suffix}; name it {stem}.tar.gz, {stem}.tar or {stem}/"
        )
    if is_archive(path):
        if path.is_dir():
            raise BundleError(f"{path} is a directory; an archive bundle replaces only a file")
        return
    if path.is_dir() and not path.is_symlink():
        if not _is_bundle_directory(path):
            raise BundleError(
                f"{path} is a directory that is not a kiln bundle; kiln would replace it (deleting what it "
                f"holds), so it will not: name a new directory, an old bundle, or a .tar.gz"
            )
    elif os.path.lexists(path):
        raise BundleError(
            f"{path} exists and is not a directory; name a directory or a .tar / .tar.gz / .tgz archive"
        )


def write_bundle(path: Path, kernels: list[KernelRecord], binaries: Mapping[str, CompiledArtifact]) -> Path:
    """Write a bundle (a directory, or an archive when ``path`` ends in .tar/.tar.gz/.tgz).

    ``binaries`` maps each entry's ``artifact_key`` to its artifact. The bundle is assembled in
    a temporary place and moved into ``path`` at the end, replacing the bundle (or archive) that
    was there; :func:`check_bundle_path` refuses any other path (``x.zip``, a directory that is
    not a bundle) with a :class:`BundleError`, before anything is made.
    """
    from triton_kiln.version import __version__

    path = Path(path)
    check_bundle_path(path)
    if not kernels or not any(k.entries for k in kernels):
        raise BundleError("nothing to bundle: no tuned kernel variants were given")
    manifest = Manifest(
        kernels,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        kiln_version=__version__,
        triton_version=_triton_version(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        (staging / "binaries").mkdir()
        for kernel in kernels:
            for entry in kernel.entries:
                artifact = binaries.get(entry.artifact_key)
                if artifact is None:
                    raise BundleError(f"{kernel.name}: no binary for artifact {entry.artifact_key[:16]}")
                if artifact.binary_sha256 != entry.binary_sha256:
                    raise BundleError(f"{kernel.name}: the binary of {entry.artifact_key[:16]} changed")
                (staging / entry.binary_file).write_bytes(artifact.binary)
        (staging / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1, allow_nan=False) + "\n")
        if is_archive(path):
            tmp_archive = path.with_name(f".{path.name}.tmp")
            compressed = path.name.endswith(("gz", ".tgz"))
            with tarfile.open(tmp_archive, "w:gz") if compressed else tarfile.open(tmp_archive, "w") as tar:
                for member in sorted(staging.rglob("*")):
                    tar.add(member, arcname=str(member.relative_to(staging)), recursive=False)
            tmp_archive.replace(path)
        elif path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            staging.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def _triton_version() -> str:
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:
        return ""


class BundleReader:
    """A bundle's manifest, validated, and its binaries, checked (directory or archive).

    Everything a load can check is checked here, at once (docs/BUNDLES.md, "Checks on load"):
    the manifest's schema, and every referenced binary: present, a regular file inside the
    bundle, within the size limit, with the sha256 the manifest gives. :meth:`artifact` reads a
    binary again when it is first launched and checks its sha256 again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._storage = open_storage(self.path)
        raw = self._storage.manifest()  # its errors name the bundle already
        try:
            data = parse_manifest(raw)
        except BundleMetadataError as exc:
            raise BundleMetadataError(exc.field_name, f"{self.path}: {exc.kernel}") from None
        except BundleError as exc:
            raise type(exc)(f"{self.path}: {exc}") from None
        kernels = [
            KernelRecord.from_json(k, f"{self.path}: kernel {i}") for i, k in enumerate(data["kernels"])
        ]
        self.manifest = Manifest(
            kernels,
            created=str(data.get("created", "")),
            kiln_version=str(data.get("kiln_version", "")),
            triton_version=str(data.get("triton_version", "")),
        )
        for kernel in kernels:
            for entry in kernel.entries:
                self._check_digest(kernel, entry, self._storage.sha256(entry.binary_file))

    def _check_digest(self, kernel: KernelRecord, entry: EntryRecord, digest: str) -> None:
        if digest != entry.binary_sha256:
            raise BundleChecksumError(
                f"{self.path}: the binary {entry.binary_file} of {kernel.name} is corrupt: its sha256 "
                f"differs from the manifest's ({entry.binary_sha256[:16]}...). The bundle is damaged "
                f"or was edited; save it again."
            )

    def artifact(self, kernel: KernelRecord, entry: EntryRecord) -> CompiledArtifact:
        """The entry's binary as an artifact, read now and checked against its sha256 again."""
        binary = self._storage.read(entry.binary_file)
        self._check_digest(kernel, entry, hashlib.sha256(binary).hexdigest())
        return CompiledArtifact(
            key=entry.artifact_key,
            name=str(entry.metadata["name"]),
            binary=binary,
            binary_ext=entry.binary_file.rsplit(".", 1)[-1],
            metadata=entry.metadata,
        )


def entry_for(
    name: str,
    artifact: CompiledArtifact,
    spec: LaunchSpec,
    key_values: Mapping[str, Any],
    config: Mapping[str, Any],
    tuning: Mapping[str, Any] | None,
    source: str,
) -> EntryRecord:
    """An :class:`EntryRecord` for a tuned artifact (its binary goes to ``binaries/``)."""
    try:
        json.dumps(dict(key_values), allow_nan=False)
    except (TypeError, ValueError):
        raise BundleError(f"{name}: tuning-key values {dict(key_values)!r} have no JSON form") from None
    spec.to_json()  # raises LaunchSpecError for constexprs without a JSON form
    return EntryRecord(
        key_values=dict(key_values),
        config=dict(config),
        artifact_key=artifact.key,
        binary_file=f"binaries/{artifact.key}.{artifact.binary_ext}",
        binary_sha256=artifact.binary_sha256,
        metadata=dict(artifact.metadata),
        args=spec,
        tuning=dict(tuning) if tuning is not None else None,
        source=source,
    )

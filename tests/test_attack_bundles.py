"""Hostile bundles: every one ends in a BundleError subclass with a clear message, at load.

Bundles travel between machines, so ``kiln.load_bundle`` / ``kiln bundle show`` treat them as
untrusted: wrong types anywhere in the manifest, binaries that are missing, outside the bundle,
symlinks or hard links, a wrong sha256, and gzip bombs. Nothing outside the bundle is read (an
outside file's hash never shows in a message) and nothing is written.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import triton_kiln as kiln
from support.bundle_maker import compile_parts
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.bundle import BundleError, BundleReader, write_bundle
from triton_kiln.bundle.errors import (
    BundleChecksumError,
    BundleMemberError,
    BundleMetadataError,
    BundleSchemaError,
    BundleTooLargeError,
)
from triton_kiln.bundle.format import KernelRecord
from triton_kiln.errors import MissingMetadataError


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[KernelRecord, CompiledArtifact]:
    return compile_parts(tmp_path_factory.mktemp("compile-cache"))


@pytest.fixture
def bundle_dir(tmp_path: Path, parts: tuple[KernelRecord, CompiledArtifact]) -> Path:
    record, artifact = parts
    return write_bundle(tmp_path / "bundle", [record], {artifact.key: artifact})


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, str]:
    """A file outside any bundle, standing for /etc/shadow, and its sha256."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:$6$very-secret-hash:19000:0:99999:7:::\n")
    return secret, hashlib.sha256(secret.read_bytes()).hexdigest()


def _load_refused(path: Path, error: type[BundleError], match: str) -> BundleError:
    """Both entry points refuse ``path`` with ``error`` (the device check comes after)."""
    with pytest.raises(error, match=match) as info:
        kiln.load_bundle(path, register=False)
    with pytest.raises(error, match=match):
        BundleReader(path)
    assert str(path) in str(info.value)
    return info.value


def _edit(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = bundle / "manifest.json"
    data = json.loads(manifest.read_text())
    change(data)
    manifest.write_text(json.dumps(data))


def _entry(data: dict[str, Any]) -> dict[str, Any]:
    return data["kernels"][0]["entries"][0]  # type: ignore[no-any-return]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """``kernels.0.entries.0.config.num_warps`` -> set that field (or delete it: value ``DELETE``)."""

    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is DELETE:
            del node[key]
        else:
            node[key] = value

    return change


DELETE = object()


def _case_id(field: str, value: object) -> str:
    """A test id that is the same in every process (pytest-xdist's workers compare them): never
    an object's address."""
    shown = "<deleted>" if value is DELETE else repr(value)
    return f"{field}={shown}"[:60]


E0 = "kernels.0.entries.0"

SCHEMA_CASES = [
    ("kernels", DELETE, r"the field 'kernels' is missing"),
    ("kernels", 5, r"kernels: expected a list, got the number 5"),
    ("kernels", [], r"kernels: expected a non-empty list"),
    ("kernels.0", "add_kernel", r"kernels\[0\]: expected an object, got the string"),
    ("kernels.0.name", 7, r"kernels\[0\]\.name: expected a Python identifier"),
    ("kernels.0.params", "x_ptr", r"kernels\[0\]\.params: expected a list, got the string 'x_ptr'"),
    ("kernels.0.params.0.flag", "z", r"params\[0\]\.flag: expected one of c, k, s, n, a"),
    ("kernels.0.entries", {"a": 1}, r"kernels\[0\]\.entries: expected a list, got an object"),
    (f"{E0}.key_values", [4096], r"entries\[0\]\.key_values: expected an object, got a list"),
    (f"{E0}.key_values", {}, r"key_values: names \[\]; expected every tuning-key parameter \['n'\]"),
    (f"{E0}.key_values.n", {"x": 1}, r"key_values\.n: expected a string, number, boolean or null"),
    (f"{E0}.config", "BLOCK=1024", r"entries\[0\]\.config: expected an object, got the string"),
    (f"{E0}.config.kwargs", [1024], r"config\.kwargs: expected an object, got a list"),
    (
        f"{E0}.config.num_warps",
        "four",
        r"config\.num_warps: expected a positive integer, got the string 'four'",
    ),
    (f"{E0}.config.num_warps", True, r"config\.num_warps: expected a positive integer, got the boolean true"),
    (f"{E0}.config.num_stages", -1, r"config\.num_stages: expected an integer >= 0, got the number -1"),
    (f"{E0}.config.maxnreg", 1.5, r"config\.maxnreg: expected a positive integer or null"),
    (f"{E0}.artifact_key", None, r"artifact_key: expected a lowercase hex string, got null"),
    (f"{E0}.binary_sha256", "abc", r"binary_sha256: expected 64 lowercase hex digits"),
    (f"{E0}.metadata", [], r"metadata: expected an object, got a list"),
    (f"{E0}.metadata.num_warps", "four", r"metadata\.num_warps: expected a positive integer"),
    (f"{E0}.metadata.shared", -5, r"metadata\.shared: expected an integer >= 0"),
    (f"{E0}.metadata.target", "sm_90", r"metadata\.target: expected an object"),
    (f"{E0}.metadata.target.arch", "90", r"target\.arch: expected a positive integer, got the string '90'"),
    (f"{E0}.metadata.target.backend", "hip", r"target\.backend: expected 'cuda'"),
    (f"{E0}.metadata.launch_pdl", "no", r"metadata\.launch_pdl: expected true or false"),
    (f"{E0}.args", {"x_ptr": "*fp32"}, r"entries\[0\]\.args: expected a list, got an object"),
    (f"{E0}.args.0", "x_ptr", r"args\[0\]: expected an object"),
    (f"{E0}.args.0.type", 3, r"args\[0\]\.type: expected a string, got the number 3"),
    (f"{E0}.args.4.value", [1024], r"args\[4\]\.value: expected a string, number, boolean or null"),
    (f"{E0}.args.0.name", "y_ptr", r"args: names \['y_ptr', .*but the kernel's parameters are \['x_ptr'"),
    (f"{E0}.tuning", "fast", r"tuning: expected an object, got the string 'fast'"),
    ("format", True, r"format: expected the integer 1, got the boolean true"),
    ("format", "1", r"format: expected the integer 1, got the string '1'"),
    ("format", 2, r"a bundle of format 2; this kiln reads format 1"),
    ("created", 12, r"created: expected a string, got the number 12"),
]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    SCHEMA_CASES,
    ids=[_case_id(field, value) for field, value, _ in SCHEMA_CASES],
)
def test_wrong_types_in_the_manifest_are_schema_errors(
    bundle_dir: Path, field: str, value: Any, message: str
) -> None:
    _edit(bundle_dir, _set(field, value))
    _load_refused(bundle_dir, BundleSchemaError, message)


def test_a_missing_launch_field_is_a_bundle_error_and_a_missing_metadata_error(bundle_dir: Path) -> None:
    _edit(bundle_dir, _set(f"{E0}.metadata.shared", DELETE))
    error = _load_refused(bundle_dir, BundleMetadataError, r"lacks the field 'shared'")
    assert isinstance(error, MissingMetadataError)
    assert "kernels[0].entries[0].metadata" in str(error)


@pytest.mark.parametrize("depth", [40, 100_000])
def test_deep_nesting_is_refused(bundle_dir: Path, depth: int) -> None:
    manifest = bundle_dir / "manifest.json"
    text = manifest.read_text().replace(
        '"tuning": null', '"tuning": {"x": ' + "[" * depth + "]" * depth + "}"
    )
    assert text != manifest.read_text()
    manifest.write_text(text)
    _load_refused(bundle_dir, BundleSchemaError, r"nests deeper than 32 levels")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", r"not a kiln bundle manifest"),
        ('{"format": 1, "kernels": [NaN]}', r"NaN is not a JSON number"),
        ("{not json", r"not valid JSON"),
        (b"\xff\xfe", r"not valid JSON"),
    ],
)
def test_malformed_manifests(bundle_dir: Path, text: str | bytes, message: str) -> None:
    manifest = bundle_dir / "manifest.json"
    if isinstance(text, bytes):
        manifest.write_bytes(text)
    else:
        manifest.write_text(text)
    _load_refused(bundle_dir, BundleSchemaError, message)


# -- binaries ---------------------------------------------------------------------------------


def _binary(bundle: Path) -> Path:
    (binary,) = (bundle / "binaries").iterdir()
    return binary


def _assert_says_nothing_about(error: BaseException, outside: tuple[Path, str]) -> None:
    text = str(error)
    digest = outside[1]
    assert digest[:8] not in text, "the message leaks the outside file's hash"
    assert "very-secret" not in text


@pytest.mark.parametrize("where", ["/abs", "../..", "inner .."])
def test_binary_paths_outside_the_bundle_are_refused(
    bundle_dir: Path, outside: tuple[Path, str], where: str
) -> None:
    secret, digest = outside
    path = {
        "/abs": str(secret),
        "../..": "binaries/../../secret.txt",
        "inner ..": "binaries/..",
    }[where]

    def change(data: dict[str, Any]) -> None:
        _entry(data)["binary"] = path
        _entry(data)["binary_sha256"] = digest

    _edit(bundle_dir, change)
    error = _load_refused(bundle_dir, BundleMemberError, r"is not a file name inside the bundle's binaries/")
    _assert_says_nothing_about(error, outside)


def test_a_missing_binary_is_refused_at_load(bundle_dir: Path) -> None:
    _binary(bundle_dir).unlink()
    _load_refused(bundle_dir, BundleMemberError, r"binaries/.*\.cubin is missing from the bundle")


def test_a_binary_with_another_sha256_is_refused_at_load(bundle_dir: Path) -> None:
    binary = _binary(bundle_dir)
    data = binary.read_bytes()
    binary.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    error = _load_refused(
        bundle_dir, BundleChecksumError, r"is corrupt: its sha256 differs from the manifest's"
    )
    actual = hashlib.sha256(binary.read_bytes()).hexdigest()
    assert actual[:8] not in str(error)


def test_a_symlinked_binary_is_refused_even_with_the_outside_files_hash(
    bundle_dir: Path, outside: tuple[Path, str]
) -> None:
    secret, digest = outside
    binary = _binary(bundle_dir)
    binary.unlink()
    binary.symlink_to(secret)
    _edit(bundle_dir, lambda data: _entry(data).update(binary_sha256=digest))
    error = _load_refused(bundle_dir, BundleMemberError, r"is a symlink or not a directory")
    _assert_says_nothing_about(error, outside)


def test_a_symlinked_binaries_directory_is_refused(bundle_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.move(bundle_dir / "binaries", elsewhere)  # the right files, with the right hashes
    (bundle_dir / "binaries").symlink_to(elsewhere, target_is_directory=True)
    _load_refused(bundle_dir, BundleMemberError, r"binaries/ is a symlink or not a directory")


def test_a_hard_linked_binary_is_refused(bundle_dir: Path, outside: tuple[Path, str]) -> None:
    secret, digest = outside
    binary = _binary(bundle_dir)
    binary.unlink()
    os.link(secret, binary)
    _edit(bundle_dir, lambda data: _entry(data).update(binary_sha256=digest))
    error = _load_refused(bundle_dir, BundleMemberError, r"is a hard link \(2 names for one file\)")
    _assert_says_nothing_about(error, outside)


def test_a_fifo_manifest_is_refused_without_blocking(bundle_dir: Path) -> None:
    manifest = bundle_dir / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    _load_refused(bundle_dir, BundleMemberError, r"manifest\.json is not a regular file")


def test_a_symlinked_manifest_is_refused(bundle_dir: Path, tmp_path: Path) -> None:
    real = tmp_path / "real-manifest.json"
    shutil.move(bundle_dir / "manifest.json", real)
    (bundle_dir / "manifest.json").symlink_to(real)
    _load_refused(bundle_dir, BundleMemberError, r"manifest\.json is a symlink")


# -- archives ---------------------------------------------------------------------------------


def _archive_from(bundle: Path, target: Path, extra: Callable[[tarfile.TarFile], None] | None = None) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        for member in sorted(bundle.rglob("*")):
            tar.add(member, arcname=str(member.relative_to(bundle)), recursive=False)
        if extra is not None:
            extra(tar)
    return target


def _add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _add_link(tar: tarfile.TarFile, name: str, target: str, kind: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


def _without_binaries(bundle: Path) -> Path:
    shutil.rmtree(bundle / "binaries")
    return bundle


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("symlink", r"the member 'binaries/.*\.cubin' is a symbolic link"),
        ("hardlink", r"the member 'binaries/.*\.cubin' is a hard link"),
        ("absolute", r"the member '/tmp/kiln-attack' is not a plain path inside the bundle"),
        ("dotdot", r"the member '\.\./escaped' is not a plain path inside the bundle"),
        ("unexpected", r"unexpected member 'install\.sh'"),
        ("twice", r"the member 'manifest\.json' appears twice"),
        ("device", r"the member 'binaries/null' is not a regular file"),
    ],
)
def test_hostile_archive_members_are_refused(
    bundle_dir: Path, tmp_path: Path, outside: tuple[Path, str], case: str, message: str
) -> None:
    secret, digest = outside
    name = f"binaries/{_binary(bundle_dir).name}"
    manifest = (bundle_dir / "manifest.json").read_bytes()

    def extra(tar: tarfile.TarFile) -> None:
        if case == "symlink":
            _add_link(tar, name, str(secret), tarfile.SYMTYPE)
        elif case == "hardlink":
            _add_link(tar, name, str(secret), tarfile.LNKTYPE)
        elif case == "absolute":
            _add_file(tar, "/tmp/kiln-attack", b"x")
        elif case == "dotdot":
            _add_file(tar, "../escaped", b"x")
        elif case == "unexpected":
            _add_file(tar, "install.sh", b"rm -rf ~")
        elif case == "twice":
            _add_file(tar, "manifest.json", manifest)
        elif case == "device":
            info = tarfile.TarInfo("binaries/null")
            info.type = tarfile.CHRTYPE
            tar.addfile(info)

    if case in ("symlink", "hardlink"):
        _edit(bundle_dir, lambda data: _entry(data).update(binary_sha256=digest))
        _without_binaries(bundle_dir)
    before = sorted(p.name for p in tmp_path.iterdir())
    archive = _archive_from(bundle_dir, tmp_path / "hostile.tgz", extra)
    error = _load_refused(archive, BundleMemberError, message)
    _assert_says_nothing_about(error, outside)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "hostile.tgz"])  # nothing written
    assert not Path("/tmp/kiln-attack").exists()


def test_an_archive_without_its_binary_is_refused_at_load(bundle_dir: Path, tmp_path: Path) -> None:
    archive = _archive_from(_without_binaries(bundle_dir), tmp_path / "b.tar.gz")
    _load_refused(archive, BundleMemberError, r"binaries/.*\.cubin is missing from the archive")


def test_a_corrupt_binary_in_an_archive_is_refused_at_load(bundle_dir: Path, tmp_path: Path) -> None:
    binary = _binary(bundle_dir)
    binary.write_bytes(b"\0" + binary.read_bytes()[1:])
    archive = _archive_from(bundle_dir, tmp_path / "b.tgz")
    _load_refused(archive, BundleChecksumError, r"is corrupt")


def test_an_archive_is_read_lazily_and_checked_again_at_launch(bundle_dir: Path, tmp_path: Path) -> None:
    archive = _archive_from(bundle_dir, tmp_path / "b.tgz")
    reader = BundleReader(archive)
    kernel = reader.manifest.kernels[0]
    good = reader.artifact(kernel, kernel.entries[0])
    assert good.binary == _binary(bundle_dir).read_bytes()
    binary = _binary(bundle_dir)
    binary.write_bytes(b"\0" + binary.read_bytes()[1:])
    _archive_from(bundle_dir, archive)  # replaced after load
    with pytest.raises(BundleChecksumError, match="is corrupt"):
        reader.artifact(kernel, kernel.entries[0])


# -- gzip bombs -------------------------------------------------------------------------------

_ZEROS_16M = zlib.compress(b"\0" * (16 << 20), 9)


def _gzip_member(raw_deflate: bytes, size: int, crc: int) -> bytes:
    """One gzip member around an already deflated body (gzip allows members back to back)."""
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + raw_deflate + crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")


def _zeros_member(size: int) -> bytes:
    """A gzip member expanding to ``size`` zero bytes (a multiple of 16 MiB), made quickly."""
    assert size % (16 << 20) == 0
    body = _ZEROS_16M[2:-4]  # the raw deflate stream inside zlib's wrapper
    crc = zlib.crc32(b"\0" * (16 << 20))
    return _gzip_member(body, 16 << 20, crc) * (size // (16 << 20))


def _bomb(path: Path, members: list[tuple[str, int]]) -> Path:
    """A .tgz whose members (name, size of zeros) expand to far more than the file's size."""
    with open(path, "wb") as out:
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size = size
            out.write(gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT)))
            out.write(_zeros_member(size))
        out.write(gzip.compress(b"\0" * 1024))
    return path


BOMBS = {
    # one manifest of 1 GiB: refused from its header, nothing decompressed
    "manifest": [("manifest.json", 1 << 30)],
    # binaries each under the per-binary limit, 1.1 GiB in all: refused by the archive limit
    "many-binaries": [(f"binaries/{i:02d}.cubin", 48 << 20) for i in range(24)],
    # one binary of 1 GiB
    "binary": [("binaries/big.cubin", 1 << 30)],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_gzip_bomb_is_refused_without_being_read_into_memory(tmp_path: Path, kind: str) -> None:
    bomb = _bomb(tmp_path / "bomb.tgz", BOMBS[kind])
    assert bomb.stat().st_size < 2 << 20
    code = textwrap.dedent(
        f"""
        import resource
        import triton_kiln as kiln
        from triton_kiln.bundle import BundleReader
        from triton_kiln.bundle.errors import BundleTooLargeError
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for load in (BundleReader, lambda p: kiln.load_bundle(p, register=False)):
            try:
                load({str(bomb)!r})
                print("ACCEPTED")
            except BundleTooLargeError as exc:
                print("REFUSED", exc)
        print("GROWTH_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=110, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "ACCEPTED" not in result.stdout
    assert result.stdout.count("REFUSED") == 2, result.stdout
    assert "larger than kiln accepts" in result.stdout or "expands to more than" in result.stdout
    growth_mb = int(result.stdout.split("GROWTH_KB")[1]) / 1024
    assert growth_mb < 40, f"peak RSS grew by {growth_mb:.0f} MB reading a {bomb.stat().st_size:,}-byte bomb"


@pytest.mark.parametrize("member", ["manifest.json", "binary"])
def test_oversized_files_in_a_directory_are_refused_before_reading(bundle_dir: Path, member: str) -> None:
    path = bundle_dir / "manifest.json" if member == "manifest.json" else _binary(bundle_dir)
    with open(path, "r+b") as handle:
        handle.truncate(65 << 20)  # sparse: costs no disk
    _load_refused(bundle_dir, BundleTooLargeError, r"is larger than kiln accepts")

"""The artifact store: round trips, atomic writes, corrupt entries, required launch metadata,
and no pickle on disk.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import triton_kiln as kiln
from support.basics import add_request, is_cubin
from triton_kiln import ArtifactStore, CompiledArtifact, CompilePool, MissingMetadataError
from triton_kiln.artifacts import triton_files
from triton_kiln.artifacts.artifact import LAUNCH_FIELDS
from triton_kiln.errors import ArtifactError
from triton_kiln.files import atomic_write

SRC = Path(kiln.__file__).parent


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompiledArtifact]:
    """One real sm_90 artifact (add_kernel), compiled once for the whole module."""
    base = tmp_path_factory.mktemp("store-artifact")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
        with CompilePool(workers=1, cache_dir=base / "cache", use_disk_cache=False) as pool:
            yield pool.compile(add_request(128), timeout_s=60)


def with_key(artifact: CompiledArtifact, key: str) -> CompiledArtifact:
    return dataclasses.replace(artifact, key=key)


def entry_files(store: ArtifactStore) -> list[Path]:
    return sorted(p for p in store.root.rglob("*") if p.is_file())


def stray_temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------- round trip


def test_round_trip(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    assert store.get(artifact.key) is None
    assert artifact.key not in store
    directory = store.put(artifact)
    assert directory == store.path_for(artifact.key)
    assert artifact.key in store
    back = store.get(artifact.key)
    assert back is not None
    assert back is not artifact
    for f in dataclasses.fields(CompiledArtifact):
        assert getattr(back, f.name) == getattr(artifact, f.name), f.name
    assert is_cubin(back.binary)
    assert set(back.asm) >= {"ptx", "ttir", "ttgir", "llir"}
    # A second store on the same directory (another process, later) reads the same thing.
    assert ArtifactStore(tmp_path).get(artifact.key) == back


def test_put_keeps_existing_entry(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.put(artifact)
    other = dataclasses.replace(artifact, compile_s=artifact.compile_s + 100.0)
    store.put(other)
    stored = store.get(artifact.key)
    assert stored is not None
    assert stored.compile_s == artifact.compile_s


def test_bad_key_is_rejected(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    for bad in ("../../etc", "ABCDEF0123", "abc"):
        with pytest.raises(ArtifactError):
            store.get(bad)
    with pytest.raises(ArtifactError):
        store.put(with_key(artifact, "../" + artifact.key))


# ---------------------------------------------------------------------------- atomic writes


def test_put_leaves_no_temporaries(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.put(artifact)
    store.put(with_key(artifact, "ab" + artifact.key[2:]))
    assert not stray_temporaries(tmp_path)
    entries = sorted(p for p in store.root.glob("*/*") if p.is_dir())
    assert [p.name for p in entries] == sorted([artifact.key, "ab" + artifact.key[2:]])


def test_failed_put_leaves_nothing(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    # A lone surrogate cannot be encoded: the write fails half-way through the entry.
    bad = dataclasses.replace(artifact, asm={**artifact.asm, "zzz": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        store.put(bad)
    assert artifact.key not in store
    assert store.get(artifact.key) is None
    assert not stray_temporaries(tmp_path)
    assert entry_files(store) == []
    store.put(artifact)  # and the key can still be stored afterwards
    assert store.get(artifact.key) == artifact


KILLED_WRITER = """
import os, sys
from pathlib import Path
from triton_kiln import ArtifactStore

source, target, key = sys.argv[1:]
artifact = ArtifactStore(Path(source)).get(key)
assert artifact is not None
os.fsync = lambda fd: os._exit(9)  # killed right after the entry's first file is written
ArtifactStore(Path(target)).put(artifact)
"""


def test_writer_killed_mid_put_leaves_no_entry(artifact: CompiledArtifact, tmp_path: Path) -> None:
    ArtifactStore(tmp_path / "source").put(artifact)
    args = [str(tmp_path / "source"), str(tmp_path / "target"), artifact.key]
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 9, proc.stderr
    store = ArtifactStore(tmp_path / "target")
    leftovers = list(store.root.rglob(".tmp-*"))
    assert leftovers, "the writer was not killed in the middle of an entry"
    assert any(p.suffix == ".cubin" for p in leftovers[0].iterdir())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a half-written entry is invisible, not "corrupt"
        assert artifact.key not in store
        assert store.get(artifact.key) is None
    store.put(artifact)  # the next writer is not confused by the leftovers
    assert store.get(artifact.key) == artifact


def test_stale_temporary_directory_is_cleaned(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    shard = store.path_for(artifact.key).parent
    stale = shard / ".tmp-0123456789abcdef-dead"
    fresh = shard / ".tmp-fedcba9876543210-busy"
    for d in (stale, fresh):
        d.mkdir(parents=True)
        (d / "artifact.json").write_text("{")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    store.put(artifact)
    assert not stale.exists()  # a killed writer's leftovers
    assert fresh.exists()  # may belong to a writer still at work


def test_atomic_write(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.bin"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.bin"]


# ---------------------------------------------------------------------------- corrupt entries


def corrupt(store: ArtifactStore, key: str, how: str) -> None:
    entry = store.path_for(key)
    record = json.loads((entry / "artifact.json").read_text())
    if how == "bad-json":
        (entry / "artifact.json").write_text('{"format": 1, "key": ')
    elif how == "truncated-binary":
        binary = entry / record["binary_file"]
        binary.write_bytes(binary.read_bytes()[:-100])
    elif how == "missing-metadata":
        (entry / record["metadata_file"]).unlink()
    elif how == "missing-launch-field":  # checksums agree: an entry of a kiln that wrote no 'shared'
        meta = entry / record["metadata_file"]
        data = json.loads(meta.read_text())
        del data["shared"]
        meta.write_text(json.dumps(data))
        reseal(entry)
    elif how == "other-key":
        record["key"] = "f" * 64
        (entry / "artifact.json").write_text(json.dumps(record))
    elif how == "format":
        record["format"] = 999
        (entry / "artifact.json").write_text(json.dumps(record))
    else:  # pragma: no cover
        raise ValueError(how)


def reseal(entry: Path) -> None:
    """Rewrite the entry's manifest to match its files as they are now (as a forger would)."""
    record = json.loads((entry / "artifact.json").read_text())
    for name in record["files"]:
        data = (entry / name).read_bytes()
        record["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    record["binary_sha256"] = record["files"][record["binary_file"]]["sha256"]
    (entry / "artifact.json").write_text(json.dumps(record))


CORRUPTIONS = {
    "bad-json": "artifact.json is not a JSON object",
    "truncated-binary": "checksum mismatch",
    "missing-metadata": "FileNotFoundError",
    "missing-launch-field": "'shared'",
    "other-key": "ffffffffffff",
    "format": "999",
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_corrupt_entry_is_skipped_with_warning(artifact: CompiledArtifact, tmp_path: Path, how: str) -> None:
    store = ArtifactStore(tmp_path)
    store.put(artifact)
    assert store.get(artifact.key) is not None
    corrupt(store, artifact.key, how)
    with pytest.warns(kiln.CacheWarning) as record:
        assert store.get(artifact.key) is None
    assert len(record) == 1
    message = str(record[0].message)
    assert CORRUPTIONS[how] in message
    assert str(store.path_for(artifact.key)) in message


def test_intact_entry_gives_no_warning(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.put(artifact)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.get(artifact.key) == artifact


@pytest.mark.timeout(90)
def test_pool_recompiles_corrupt_entry(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = make_pool(workers=1, cache_dir=cache)
    good = first.compile(add_request(128))
    first.shutdown()
    store = ArtifactStore(cache)
    corrupt(store, good.key, "truncated-binary")

    pool = make_pool(workers=1, cache_dir=cache)
    with pytest.warns(kiln.CacheWarning, match="checksum"):
        future = pool.submit(add_request(128))
    again = future.result(timeout=60)
    assert pool.stats.disk_hits == 0
    assert pool.stats.dispatched == 1
    assert pool.stats.compiled == 1
    assert again.binary == good.binary  # recompiled, not read from the damaged file


@pytest.mark.timeout(90)
def test_recompiled_corrupt_entry_is_repaired(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = make_pool(workers=1, cache_dir=cache)
    good = first.compile(add_request(128))
    first.shutdown()
    corrupt(ArtifactStore(cache), good.key, "truncated-binary")
    second = make_pool(workers=1, cache_dir=cache)
    with pytest.warns(kiln.CacheWarning):
        second.compile(add_request(128))
    second.shutdown()
    third = make_pool(workers=1, cache_dir=cache, start=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", kiln.CacheWarning)
        future = third.submit(add_request(128))
    assert future.done()
    assert third.stats.disk_hits == 1
    repaired = ArtifactStore(cache).get(good.key)
    assert repaired is not None
    # Recompiled: same binary and metadata (its compile_s is the recompile's own).
    assert repaired.binary == good.binary
    assert repaired.metadata == good.metadata


# ---------------------------------------------------------------------------- launch metadata


def test_missing_launch_field_raises(artifact: CompiledArtifact) -> None:
    metadata = {k: v for k, v in artifact.metadata.items() if k != "shared"}
    with pytest.raises(MissingMetadataError) as info:
        dataclasses.replace(artifact, metadata=metadata)
    assert info.value.field_name == "shared"
    assert "'shared'" in str(info.value)
    assert "add_kernel" in str(info.value)
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, ArtifactError)


@pytest.mark.parametrize("field_name", LAUNCH_FIELDS)
def test_every_launch_field_is_required(artifact: CompiledArtifact, field_name: str) -> None:
    assert field_name in artifact.metadata  # Triton 3.6 really writes it
    metadata = {k: v for k, v in artifact.metadata.items() if k != field_name}
    with pytest.raises(MissingMetadataError, match=repr(field_name)):
        CompiledArtifact(
            key=artifact.key,
            name=artifact.name,
            binary=artifact.binary,
            binary_ext=artifact.binary_ext,
            metadata=metadata,
        )


def test_launch_fields_of_real_artifact(artifact: CompiledArtifact) -> None:
    assert artifact.num_warps == 4
    assert artifact.shared == artifact.metadata["shared"]
    assert artifact.target == ("cuda", 90, 32)
    with pytest.raises(MissingMetadataError, match="no_such_field"):
        artifact.launch_field("no_such_field")


def test_inconsistent_or_empty_artifact_rejected(artifact: CompiledArtifact) -> None:
    with pytest.raises(ArtifactError, match="inconsistent"):
        dataclasses.replace(artifact, name="other_kernel")
    with pytest.raises(ArtifactError, match="empty binary"):
        dataclasses.replace(artifact, binary=b"")


# ---------------------------------------------------------------------------- no pickle on disk


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "module",
    [
        "artifacts/store.py",
        "artifacts/store_entry.py",
        "artifacts/artifact.py",
        "artifacts/triton_files.py",
        "remote/artifacts.py",
        "remote/tuning.py",
        "remote/client.py",
        "artifacts/record.py",
        "remote/records.py",
    ],
)
def test_store_code_does_not_import_pickle(module: str) -> None:
    imports = imported_modules(SRC / module)
    readers = ("artifacts/artifact.py", "artifacts/store.py", "remote/artifacts.py", "remote/client.py")
    assert imports & {"json", "pydantic"} or module in readers
    assert not imports & {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"}


def test_store_files_are_json_binary_or_text(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.put(artifact)
    files = entry_files(store)
    assert files
    for path in files:
        data = path.read_bytes()
        assert not data.startswith(b"\x80"), f"{path.name} looks like a pickle"
        if path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".cubin":
            assert data == artifact.binary
            assert is_cubin(data)
        else:
            assert path.suffix[1:] in artifact.asm
            data.decode("utf-8")
    record = json.loads((store.path_for(artifact.key) / "artifact.json").read_text())
    assert record["binary_sha256"] == artifact.binary_sha256
    assert record["key"] == artifact.key


# ---------------------------------------------------------------------------- Triton's layout


def test_triton_dir_stores_the_entry_once_per_process(
    artifact: CompiledArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ArtifactStore(tmp_path)
    puts: list[str] = []
    real_put = store.put

    def counting_put(a: CompiledArtifact) -> Path:
        puts.append(a.key)
        return real_put(a)

    monkeypatch.setattr(store, "put", counting_put)
    first = triton_files.triton_files(store, artifact)
    again = triton_files.triton_files(store, artifact)
    assert first == again
    assert puts == [artifact.key]  # stored (and checked) once, then remembered
    assert Path(first[f"{artifact.name}.cubin"]).read_bytes() == artifact.binary
    assert Path(first[f"{artifact.name}.cubin"]).parent == store.path_for(artifact.key) / "triton"
    assert store.get(artifact.key) is not None
    # The remembered directory is rewritten if something removed it.
    for path in first.values():
        os.unlink(path)
    assert triton_files.triton_files(store, artifact) == first
    assert Path(first[f"{artifact.name}.json"]).is_file()
    assert puts == [artifact.key]


def test_a_launchers_triton_kernel_without_a_folder_uses_the_temporary_root(
    artifact: CompiledArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's launcher for a binary kiln's own cannot launch (a bundle's, say) is made in the
    process's one temporary root, which goes at exit, not in a new folder of TMPDIR per kernel."""
    from triton_kiln.launch import launcher
    from triton_kiln.launch.spec import LaunchSpec

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    spec = LaunchSpec.from_request(add_request(128))
    launcher.triton_kernel(artifact, spec)
    launcher.triton_kernel(artifact, spec)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("kiln-triton-")]
    assert triton_files.triton_dir(None, artifact).is_dir()


def test_triton_dir_without_a_store_reuses_one_temporary_root(artifact: CompiledArtifact) -> None:
    other = with_key(artifact, "e" * 64)
    first = triton_files.triton_dir(None, artifact)
    assert triton_files.triton_dir(None, artifact) == first  # no new directory per call
    second = triton_files.triton_dir(None, other)
    assert second != first
    assert second.parent == first.parent  # one temporary root per process
    group = triton_files.triton_files(None, artifact)
    assert Path(group[f"{artifact.name}.cubin"]).read_bytes() == artifact.binary
    assert first.is_dir()
    assert not second.exists()  # nothing is written for an artifact until its files are asked for

"""Attacks on the artifact cache: each ends in a kiln error or a
warned miss, and nothing outside kiln's own files is read or written."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request
from triton_kiln import CompilePool
from triton_kiln.artifacts import triton_files
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.artifacts.store import ArtifactStore, CacheWarning
from triton_kiln.errors import CacheDirError


def test_world_writable_cache_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(CacheDirError, match="writable by others") as info:
        ArtifactStore(root)
    assert "chmod go-w" in str(info.value)


def test_cache_dir_is_created_private(tmp_path: Path) -> None:
    root = tmp_path / "new" / "cache"
    ArtifactStore(root)
    assert (root.stat().st_mode & 0o777) == 0o700


def test_cache_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        root = tmp_path / "theirs"
        root.mkdir(mode=0o700)
        os.chown(root, 12345, 12345)
        owner = 12345
    else:
        root, owner = Path("/"), 0
    with pytest.raises(CacheDirError, match=f"belongs to user id {owner}") as info:
        ArtifactStore(root)
    assert "KILN_CACHE_DIR" in str(info.value)


# ---------------------------------------------------------------------------- tampered entries
#
# Each case: a real entry written by kiln (a real sm_90 compile), then tampered with as an
# attacker with write access to one entry would. Every case must end in a miss with one
# CacheWarning, and kiln must not name, open, read or write anything in the attacker's
# ``outside`` directory: checked with an audit hook (every path kiln's calls name) and with the
# outside files' bytes, modes and access times (a read would move an access time set in 1970).


@dataclasses.dataclass(frozen=True)
class Scene:
    """One tampering case's world: the store, the attacked entry, its neighbour, the outside."""

    store: ArtifactStore
    artifact: CompiledArtifact
    other: CompiledArtifact
    outside: Path

    @property
    def entry(self) -> Path:
        return self.store.path_for(self.artifact.key)

    @property
    def other_entry(self) -> Path:
        return self.store.path_for(self.other.key)

    def record(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.entry / "artifact.json").read_text())
        return data

    def write_record(self, record: dict[str, Any]) -> None:
        (self.entry / "artifact.json").write_text(json.dumps(record))

    def outside_copy(self, name: str) -> Path:
        """A copy of the entry's file ``name`` outside the cache (same bytes, so a checksum passes)."""
        target = self.outside / name
        target.write_bytes((self.entry / name).read_bytes())
        return target


@pytest.fixture(scope="module")
def two_artifacts(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[CompiledArtifact, CompiledArtifact]:
    """Two real sm_90 artifacts of one kernel name with different launch fields (num_warps 4 and 8)."""
    base = tmp_path_factory.mktemp("attack-artifacts")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
        with CompilePool(workers=1, cache_dir=base / "cache", use_disk_cache=False) as pool:
            first, second = pool.compile_many(
                [add_request(128), add_request(256, num_warps=8)], progress=False
            )
    assert isinstance(first, CompiledArtifact)
    assert isinstance(second, CompiledArtifact)
    assert first.name == second.name == "add_kernel"
    assert (first.num_warps, second.num_warps) == (4, 8)
    return first, second


@pytest.fixture
def scene(two_artifacts: tuple[CompiledArtifact, CompiledArtifact], tmp_path: Path) -> Scene:
    store = ArtifactStore(tmp_path / "cache")
    artifact, other = two_artifacts
    store.put(artifact)
    store.put(other)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not kiln's")
    return Scene(store, artifact, other, outside)


def rewrite_metadata(scene: Scene, **changes: Any) -> None:
    path = scene.entry / scene.record()["metadata_file"]
    metadata = json.loads(path.read_text())
    metadata.update(changes)
    path.write_text(json.dumps(metadata))


def set_record_path(scene: Scene, field: str, value: str, source: Path) -> None:
    """Point ``field`` of the record at ``value`` and list it in the manifest with ``source``'s true
    checksum: a consistent forgery, so only the path check stands between it and the reader."""
    record = scene.record()
    data = source.read_bytes()
    if field == "asm":
        record["asm"]["ptx"] = value
    else:
        record[field] = value
    record["files"][value] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    scene.write_record(record)


def replace_with_symlink(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def tamper(scene: Scene, how: str) -> None:
    entry, record, name = scene.entry, scene.record(), scene.artifact.name
    binary, metadata = record["binary_file"], record["metadata_file"]
    if how == "edited-num_warps":
        rewrite_metadata(scene, num_warps=8)
    elif how == "edited-shared":
        rewrite_metadata(scene, shared=scene.artifact.shared + 65536)
    elif how == "swapped-metadata":
        shutil.copyfile(scene.other_entry / metadata, entry / metadata)
    elif how == "swapped-record":
        shutil.copyfile(scene.other_entry / "artifact.json", entry / "artifact.json")
    elif how == "absolute-binary":
        set_record_path(scene, "binary_file", str(scene.outside_copy(binary)), entry / binary)
    elif how == "absolute-metadata":
        set_record_path(scene, "metadata_file", str(scene.outside_copy(metadata)), entry / metadata)
    elif how == "dotdot-binary":
        scene.outside_copy(binary)
        set_record_path(scene, "binary_file", f"../../../outside/{binary}", entry / binary)
    elif how == "dotdot-metadata":  # the neighbour's metadata, by a path through the shard
        source = scene.other_entry / metadata
        set_record_path(
            scene, "metadata_file", f"../../{scene.other.key[:2]}/{scene.other.key}/{metadata}", source
        )
    elif how == "dotdot-ptx":
        outside_ptx = scene.outside / f"{name}.ptx"
        outside_ptx.write_text("// not kiln's PTX\n")
        set_record_path(scene, "asm", f"../../../outside/{name}.ptx", outside_ptx)
    elif how == "subdirectory-binary":
        (entry / "sub").mkdir()
        shutil.copyfile(entry / binary, entry / "sub" / binary)
        set_record_path(scene, "binary_file", f"sub/{binary}", entry / binary)
    elif how == "unlisted-binary":  # a file of the entry that the manifest does not list for this role
        record["binary_file"] = "stray.cubin"
        shutil.copyfile(entry / binary, entry / "stray.cubin")
        scene.write_record(record)
    elif how == "symlink-binary":
        replace_with_symlink(entry / binary, scene.outside_copy(binary))
    elif how == "symlink-metadata":
        replace_with_symlink(entry / metadata, scene.outside_copy(metadata))
    elif how == "symlink-record":
        replace_with_symlink(entry / "artifact.json", scene.outside_copy("artifact.json"))
    elif how == "symlink-entry":
        shutil.copytree(entry, scene.outside / "entry")
        shutil.rmtree(entry)
        entry.symlink_to(scene.outside / "entry")
    elif how == "hardlink-binary":
        copy = scene.outside_copy(binary)
        (entry / binary).unlink()
        os.link(copy, entry / binary)
    elif how == "symlink-triton-dir":
        (entry / "triton").symlink_to(scene.outside)
    elif how == "symlink-triton-binary":
        triton_files.triton_files(scene.store, scene.artifact)
        replace_with_symlink(entry / "triton" / binary, scene.outside_copy(binary))
    elif how == "edited-triton-metadata":
        triton_files.triton_files(scene.store, scene.artifact)
        (entry / "triton" / metadata).write_text((scene.other_entry / metadata).read_text())
    elif how == "edited-ptx":
        ptx = entry / record["asm"]["ptx"]
        ptx.write_text(ptx.read_text().replace(".version", ".version 9.9 //", 1))
    elif how == "fifo-binary":
        replace_with_fifo(entry / binary)
    elif how == "fifo-metadata":
        replace_with_fifo(entry / metadata)
    elif how == "fifo-record":
        replace_with_fifo(entry / "artifact.json")
    elif how == "fifo-triton-binary":
        triton_files.triton_files(scene.store, scene.artifact)
        replace_with_fifo(entry / "triton" / binary)
    elif how == "previous-format":  # what kiln wrote before per-file checksums
        del record["files"]
        record["format"] = 1
        scene.write_record(record)
    elif how == "no-manifest":
        del record["files"]
        scene.write_record(record)
    else:  # pragma: no cover
        raise ValueError(how)


# case -> a fragment of the CacheWarning's message
ATTACKS = {
    "edited-num_warps": "add_kernel.json: checksum mismatch",
    "edited-shared": "add_kernel.json: checksum mismatch",
    "swapped-metadata": "add_kernel.json: checksum mismatch",
    "swapped-record": "entry holds key",
    "absolute-binary": "is not a plain file name",
    "absolute-metadata": "is not a plain file name",
    "dotdot-binary": "is not a plain file name",
    "dotdot-metadata": "is not a plain file name",
    "dotdot-ptx": "is not a plain file name",
    "subdirectory-binary": "is not a plain file name",
    "unlisted-binary": "stray.cubin is not listed in the entry's manifest",
    "symlink-binary": "add_kernel.cubin is a symbolic link",
    "symlink-metadata": "add_kernel.json is a symbolic link",
    "symlink-record": "artifact.json is a symbolic link",
    "symlink-entry": "is not a directory",
    "hardlink-binary": "add_kernel.cubin has 2 hard links",
    "symlink-triton-dir": "triton/ is a symlink",
    "symlink-triton-binary": "add_kernel.cubin is a symbolic link",
    "edited-triton-metadata": "triton/add_kernel.json differs",
    "edited-ptx": "add_kernel.ptx: checksum mismatch",
    "fifo-binary": "add_kernel.cubin is a FIFO",
    "fifo-metadata": "add_kernel.json is a FIFO",
    "fifo-record": "artifact.json is a FIFO",
    "fifo-triton-binary": "add_kernel.cubin is a FIFO",
    "previous-format": "format 1, expected 2",
    "no-manifest": "files: Field required",
}


class Watch:
    """What kiln's calls name (an audit hook) and what happens to the outside directory."""

    events: list[tuple[str, tuple[Any, ...]]]

    def __init__(self, outside: Path) -> None:
        self.outside = str(outside)
        self.events = []
        self.before = snapshot(outside)

    def offending(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Calls that named a path in the outside directory, a path with ``..``, or made a link."""
        bad = []
        for event, args in self.events:
            if event in ("os.symlink", "os.link"):
                bad.append((event, args))
                continue
            for arg in args:
                if not isinstance(arg, str | bytes | os.PathLike):
                    continue
                path = os.fsdecode(arg)
                norm = os.path.normpath(path)
                if ".." in Path(path).parts or norm == self.outside or norm.startswith(self.outside + os.sep):
                    bad.append((event, args))
        return bad


_watches: list[Watch] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watches and (event == "open" or event.startswith(("os.", "shutil."))):
        _watches[-1].events.append((event, args))


sys.addaudithook(_audit)


def snapshot(directory: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every path under ``directory``: mode, size, access time, bytes (files whose atime is set to 1970)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        data = b""
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # this read leaves no trace
        found[str(path)] = (st.st_mode, st.st_size, st.st_atime_ns, data)
    return found


def backdate_access_times(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, ns=(1_000_000_000, path.stat().st_mtime_ns))


@contextlib.contextmanager
def watching(outside: Path) -> Iterator[Watch]:
    backdate_access_times(outside)
    watch = Watch(outside)
    _watches.append(watch)
    try:
        yield watch
    finally:
        _watches.remove(watch)


def in_thread(fn: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """``fn()`` in a thread; fails the test (instead of hanging) if it blocks, e.g. on a FIFO."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed back to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"kiln blocked for {timeout_s} s reading the tampered entry"
    if errors:
        raise errors[0]
    return result[0]


def get_with_warnings(store: ArtifactStore, key: str) -> tuple[CompiledArtifact | None, list[str]]:
    def get() -> tuple[CompiledArtifact | None, list[str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = store.get(key)
        return found, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]

    result: tuple[CompiledArtifact | None, list[str]] = in_thread(get)
    return result


def test_the_watch_sees_a_read_outside(tmp_path: Path) -> None:
    """The two detectors work here: a path named by a call, and a read moving an access time."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("x")
    with watching(outside) as watch:
        (outside / "secret.txt").read_bytes()
    assert watch.offending()
    assert snapshot(outside) != watch.before


@pytest.mark.parametrize("how", list(ATTACKS))
def test_tampered_entry_is_a_warned_miss(scene: Scene, how: str) -> None:
    tamper(scene, how)
    with watching(scene.outside) as watch:
        found, messages = get_with_warnings(scene.store, scene.artifact.key)
        assert found is None  # never served
        assert len(messages) == 1, messages
        assert ATTACKS[how] in messages[0]
        assert str(scene.entry) in messages[0]
        # The neighbour entry is untouched and still served.
        neighbour, neighbour_messages = get_with_warnings(scene.store, scene.other.key)
        assert neighbour == scene.other
        assert neighbour_messages == []
    assert watch.offending() == []
    assert snapshot(scene.outside) == watch.before


@pytest.mark.parametrize("how", list(ATTACKS))
def test_tampered_entry_is_replaced_by_the_next_write(scene: Scene, how: str) -> None:
    """After the miss the caller recompiles and stores again: the entry is rebuilt inside the
    cache (links unlinked, never followed), and Triton's copy comes from the verified bytes."""
    tamper(scene, how)
    with watching(scene.outside) as watch:
        in_thread(lambda: scene.store.put(scene.artifact))
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            assert in_thread(lambda: scene.store.get(scene.artifact.key)) == scene.artifact
            group = in_thread(lambda: triton_files.triton_files(scene.store, scene.artifact))
            assert in_thread(lambda: scene.store.get(scene.artifact.key)) == scene.artifact
    assert watch.offending() == []
    assert snapshot(scene.outside) == watch.before
    assert not scene.entry.is_symlink()
    for name, path in group.items():
        assert Path(path).parent == scene.entry / "triton"
        assert not Path(path).is_symlink()
        assert not Path(path).parent.is_symlink()
        expected = scene.artifact.binary if name.endswith(".cubin") else scene.artifact.metadata_json()
        assert Path(path).read_bytes() == expected


@pytest.mark.parametrize("how", ["symlink-dir", "symlink-file", "fifo-file", "edited-file", "removed-file"])
def test_triton_copy_tampered_after_layout_is_rebuilt_inside_the_entry(scene: Scene, how: str) -> None:
    """The triton/ copy is checked on every call, even after this process laid it out."""
    first = triton_files.triton_files(scene.store, scene.artifact)
    triton_dir = scene.entry / "triton"
    binary = triton_dir / scene.artifact.binary_file_name
    if how == "symlink-dir":
        shutil.rmtree(triton_dir)
        triton_dir.symlink_to(scene.outside)
    elif how == "symlink-file":
        replace_with_symlink(binary, scene.outside / "secret.txt")
    elif how == "fifo-file":
        replace_with_fifo(binary)
    elif how == "edited-file":
        binary.write_bytes(binary.read_bytes()[:-1] + b"\x00")
    else:
        binary.unlink()
    with watching(scene.outside) as watch:
        group = in_thread(lambda: triton_files.triton_files(scene.store, scene.artifact))
    assert group == first
    assert watch.offending() == []
    assert snapshot(scene.outside) == watch.before
    assert not triton_dir.is_symlink()
    assert binary.read_bytes() == scene.artifact.binary
    assert not binary.is_symlink()
    assert sorted(p.name for p in triton_dir.iterdir()) == sorted(first)
    assert not [p for p in scene.entry.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_previous_format_directory_is_never_read(scene: Scene) -> None:
    """Entries of format 1 live in artifacts-v1, which this kiln never opens: a plain miss."""
    old_entry = scene.store.root.parent / "artifacts-v1" / scene.artifact.key[:2] / scene.artifact.key
    shutil.copytree(scene.entry, old_entry)
    shutil.rmtree(scene.entry)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert scene.store.get(scene.artifact.key) is None
    assert scene.store.root.name == "artifacts-v2"


@pytest.mark.timeout(120)
def test_pool_recompiles_an_entry_with_edited_launch_metadata(make_pool: Any, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = make_pool(workers=1, cache_dir=cache)
    good = first.compile(add_request(128))
    first.shutdown()
    store = ArtifactStore(cache)
    meta = store.path_for(good.key) / good.metadata_file_name
    meta.write_text(json.dumps({**good.metadata, "num_warps": 8, "shared": 99999}))

    pool = make_pool(workers=1, cache_dir=cache)
    with pytest.warns(CacheWarning, match="add_kernel.json: checksum mismatch"):
        future = pool.submit(add_request(128))
    again = future.result(timeout=60)
    assert pool.stats.disk_hits == 0
    assert pool.stats.compiled == 1
    assert (again.num_warps, again.shared) == (good.num_warps, good.shared)
    group = pool.triton_files(again)
    assert json.loads(Path(group["add_kernel.json"]).read_text())["num_warps"] == good.num_warps
    repaired = ArtifactStore(cache).get(good.key)
    assert repaired is not None
    assert repaired.metadata == good.metadata

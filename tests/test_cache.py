"""The cache as a whole: the KILN_CACHE_MAX_MB cap evicts least recently used entries as
the store grows, ``kiln cache info | clear | prune`` show and clean it, and nothing outside the
cache directory is ever deleted or followed (symlinks).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.basics import add_request
from triton_kiln import ArtifactStore, CompiledArtifact, CompilePool
from triton_kiln.artifacts import store_entry as entry_module
from triton_kiln.artifacts import usage
from triton_kiln.cli import main
from triton_kiln.cli.cache_dir import CacheSizeError, parse_size
from triton_kiln.tuning import TuningDatabase


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompiledArtifact]:
    """One real sm_90 artifact (add_kernel), compiled once for the module; copies get new keys."""
    base = tmp_path_factory.mktemp("cache-artifact")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
        with CompilePool(workers=1, cache_dir=base / "cache", use_disk_cache=False) as pool:
            yield pool.compile(add_request(128), timeout_s=120)


def copy(artifact: CompiledArtifact, n: int) -> CompiledArtifact:
    return dataclasses.replace(artifact, key=hashlib.sha256(f"entry {n}".encode()).hexdigest())


def fill(store: ArtifactStore, artifact: CompiledArtifact, count: int, *, age_s: float = 3600) -> list[str]:
    """``count`` entries, the first the least recently used (last use ``age_s`` ago and newer)."""
    keys = []
    for n in range(count):
        entry = store.put(copy(artifact, n))
        stamp = time.time() - age_s + n
        os.utime(entry, (stamp, stamp))
        keys.append(entry.name)
    return keys


def entry_size(store: ArtifactStore, artifact: CompiledArtifact) -> int:
    return usage.tree_size(store.put(copy(artifact, 10_000)))


# ---------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "size"),
    [("4096", 4096), ("500M", 500 << 20), ("2G", 2 << 30), ("2g", 2 << 30), ("1.5GiB", 3 << 29),
     ("10KB", 10 << 10), ("0", 0), ("1T", 1 << 40)],
)  # fmt: skip
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "abc", "2Q", "-1G", "1 G B"])
def test_bad_sizes_say_what_a_size_is(text: str) -> None:
    with pytest.raises(CacheSizeError, match="500M, 2G"):
        parse_size(text)


# ---------------------------------------------------------------------------- the cap


def test_the_cap_evicts_least_recently_used_entries(artifact: CompiledArtifact, tmp_path: Path) -> None:
    one = entry_size(ArtifactStore(tmp_path / "probe"), artifact)
    store = ArtifactStore(tmp_path / "c", max_bytes=10 * one + 200)  # entries differ by a few bytes
    keys = fill(store, artifact, 10)  # at the cap: nothing evicted
    assert len(usage.scan(store.root).entries) == 10
    assert store.get(keys[0]) is not None  # a read makes the oldest entry the most recently used
    newest = store.put(copy(artifact, 99))  # 11 entries: over the cap, down to 90% of it
    left = {entry.path.name for entry in usage.scan(store.root).entries}
    assert len(left) == 9
    assert newest.name in left
    assert keys[0] in left
    assert not {keys[1], keys[2]} & left  # the least recently used went


def test_the_cap_spares_entries_used_in_the_last_minute(artifact: CompiledArtifact, tmp_path: Path) -> None:
    one = entry_size(ArtifactStore(tmp_path / "probe"), artifact)
    store = ArtifactStore(tmp_path / "c", max_bytes=2 * one)
    for n in range(4):
        store.put(copy(artifact, n))  # all fresh: maybe being read by another process
    assert len(usage.scan(store.root).entries) == 4  # over the cap, by what was used just now


def test_without_a_cap_nothing_is_evicted(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "c")
    fill(store, artifact, 5)
    assert len(usage.scan(store.root).entries) == 5


def test_an_entry_evicted_while_it_is_read_is_a_quiet_miss(
    artifact: CompiledArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ArtifactStore(tmp_path / "c")
    entry = store.put(artifact)
    real = entry_module.read_entry

    def evicted_meanwhile(entry_fd: int, key: str) -> CompiledArtifact:
        usage.remove(entry)  # another process's eviction, between open and read
        return real(entry_fd, key)

    monkeypatch.setattr(entry_module, "read_entry", evicted_meanwhile)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.get(artifact.key) is None
    monkeypatch.undo()
    assert store.put(artifact) == entry
    assert store.get(artifact.key) is not None


# ---------------------------------------------------------------------------- kiln cache


def test_info_clear_and_prune(
    artifact: CompiledArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    monkeypatch.delenv("KILN_TUNING_DB", raising=False)
    one = entry_size(ArtifactStore(tmp_path / "probe"), artifact)
    store = ArtifactStore(cache)
    keys = fill(store, artifact, 6)
    with TuningDatabase(cache / "tuning.sqlite3"):
        pass
    (cache / "bundle-records").mkdir()
    (cache / "bundle-records" / "r.json").write_text("{}")
    runner = CliRunner()

    shown = runner.invoke(main, ["cache", "info"])
    assert shown.exit_code == 0, shown.output
    assert f"cache:           {cache}\n" in shown.output
    assert "compiled:        6 kernels" in shown.output
    assert "cap 10.0 GiB" in shown.output
    assert f"tuning database: {cache / 'tuning.sqlite3'}: " in shown.output
    assert "tuned variants:  1 recorded" in shown.output

    # what the store holds less its two oldest entries (entries differ by a few bytes: their
    # records hold times, so 4 x one probe entry can fall short of four real ones)
    before = usage.scan(store.root)
    sizes = {e.path.name: e.size for e in before.entries}
    limit = before.size - sizes[keys[0]] - sizes[keys[1]]
    assert abs(limit - 4 * one) < one  # about four entries
    pruned = runner.invoke(main, ["cache", "prune", "--max-size", f"{limit}B"])
    assert pruned.exit_code == 0, pruned.output
    assert pruned.output.startswith("removed 2 compiled kernels")
    assert {e.path.name for e in usage.scan(store.root).entries} == set(keys[2:])  # the newest four

    refused = runner.invoke(main, ["cache", "clear"])  # no stdin (CI): the prompt aborts
    assert refused.exit_code == 1
    assert "Aborted" in refused.output
    assert len(usage.scan(store.root).entries) == 4
    cleared = runner.invoke(main, ["cache", "clear", "--yes"])
    assert cleared.exit_code == 0, cleared.output
    assert cleared.output.startswith("removed 4 compiled kernels and 1 bundle records")
    assert usage.scan(store.root).entries == []
    assert (cache / "tuning.sqlite3").is_file()  # tuning results are kept
    assert not (cache / "bundle-records" / "r.json").exists()
    confirmed = runner.invoke(main, ["cache", "clear"], input="y\n")
    assert confirmed.exit_code == 0
    assert "removed 0 compiled kernels" in confirmed.output


def test_clear_keeps_entries_being_written(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.put(artifact)
    writing = store.root / "ab" / ".tmp-abcdef-being-written"
    writing.mkdir(parents=True)
    (writing / "x.cubin").write_bytes(b"half")
    result = CliRunner().invoke(main, ["cache", "clear", "--yes", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (writing / "x.cubin").read_bytes() == b"half"
    assert usage.scan(store.root).entries == []


def test_commands_on_a_missing_cache_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    for command in (["info"], ["clear", "--yes"], ["prune", "--max-size", "1G"]):
        result = CliRunner().invoke(main, ["cache", *command, "--cache-dir", str(missing)])
        assert result.exit_code == 0, result.output
    assert not missing.exists()


def test_a_bad_size_is_one_error_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cache", "prune", "--max-size", "lots", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 2  # a click.BadParameter: the usage, then one Error: line
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: Invalid value for '--max-size': 'lots' is not a size")
    assert result.output.splitlines()[-1] == error


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune", "--max-size", "0B"]])
def test_nothing_outside_the_cache_is_deleted_or_followed(
    artifact: CompiledArtifact, tmp_path: Path, command: list[str]
) -> None:
    outside = tmp_path / "precious"
    (outside / "ab").mkdir(parents=True)
    (outside / "ab" / "data.cubin").write_bytes(b"mine")
    (outside / "file.txt").write_text("mine")
    cache = tmp_path / "cache"
    store = ArtifactStore(cache)
    fill(store, artifact, 2)
    (store.root / "cd").symlink_to(outside)  # a shard that is a link
    (store.root / "ab").mkdir(exist_ok=True)
    (store.root / "ab" / ("ab" + "0" * 62)).symlink_to(outside)  # an entry that is a link
    (store.root / "ab" / ("ab" + "1" * 62)).mkdir()
    (store.root / "ab" / ("ab" + "1" * 62) / "triton").symlink_to(outside / "ab")  # a link in an entry
    (cache / "bundle-records").mkdir()
    (cache / "bundle-records" / "x.json").symlink_to(outside / "file.txt")
    old = tmp_path / "old-format"
    old.mkdir()
    (old / "keep.bin").write_bytes(b"mine")
    (cache / "artifacts-v1").symlink_to(old)  # a whole store that is a link
    result = CliRunner().invoke(main, ["cache", *command, "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    assert (outside / "ab" / "data.cubin").read_bytes() == b"mine"
    assert (outside / "file.txt").read_text() == "mine"
    assert (old / "keep.bin").read_bytes() == b"mine"
    assert usage.scan(store.root).entries == []  # the links themselves are gone


def test_a_pool_applies_the_cap(
    artifact: CompiledArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "1")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    one = entry_size(ArtifactStore(tmp_path / "probe"), artifact)
    store = ArtifactStore(tmp_path / "cache")
    fill(store, artifact, (1 << 20) // one + 1)  # old entries over 1 MiB
    with CompilePool(workers=1, cache_dir=tmp_path / "cache") as pool:
        assert pool.store is not None
        assert pool.store.max_bytes == 1 << 20
        pool.compile(add_request(256), timeout_s=120)
    assert usage.scan(store.root).size <= 1 << 20


def test_the_cache_document_says_what_the_commands_do() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "CACHE.md").read_text()
    for needle in ("KILN_CACHE_MAX_MB", "10240", "kiln cache prune --max-size", "--yes", "kiln settings"):
        assert needle in text


# ---------------------------------------------------------------------------- audit: units, foreign dirs


@pytest.mark.parametrize("size", ["10240", "0", "1.5", " 4096 "])
def test_a_size_without_a_unit_is_refused_and_nothing_is_removed(
    artifact: CompiledArtifact, tmp_path: Path, size: str
) -> None:
    """Audit: ``--max-size 10240`` (MiB in KILN_CACHE_MAX_MB's terms) meant 10240 bytes and
    emptied the cache without a question."""
    store = ArtifactStore(tmp_path / "cache")
    keys = fill(store, artifact, 3)
    result = CliRunner().invoke(
        main, ["cache", "prune", "--max-size", size, "--cache-dir", str(tmp_path / "cache")]
    )
    assert result.exit_code == 2, result.output  # a click.BadParameter: the usage, then one line
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: Invalid value for '--max-size': ")
    assert "give a unit" in error
    for example in ("10240M", "10G", "500K"):
        assert example in error
    assert result.output.splitlines()[-1] == error
    assert sorted(e.path.name for e in usage.scan(store.root).entries) == sorted(keys)


def test_sizes_with_a_unit_still_prune(artifact: CompiledArtifact, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "cache")
    fill(store, artifact, 3)
    runner = CliRunner()
    kept = runner.invoke(
        main, ["cache", "prune", "--max-size", "10G", "--cache-dir", str(tmp_path / "cache")]
    )
    assert kept.exit_code == 0, kept.output
    assert len(usage.scan(store.root).entries) == 3
    emptied = runner.invoke(
        main, ["cache", "prune", "--max-size", "0B", "--cache-dir", str(tmp_path / "cache")]
    )
    assert emptied.exit_code == 0, emptied.output
    assert usage.scan(store.root).entries == []


@pytest.mark.parametrize(
    ("size", "said"),
    [
        ("9" * 400 + "G", "is more than 1 EiB"),
        ("1" + "0" * 400 + "B", "is more than 1 EiB"),
        ("2000000T", "is more than 1 EiB"),
        ("0.4B", "0.4 bytes, not a whole number of bytes"),
        ("1.3K", "1331.2 bytes, not a whole number of bytes"),
        ("0.0000001M", "not a whole number of bytes"),
    ],
    ids=["400 digits G", "401 digits B", "2000000T", "0.4B", "1.3K", "0.0000001M"],
)
def test_a_huge_or_fractional_size_is_one_error_and_nothing_is_removed(
    artifact: CompiledArtifact, tmp_path: Path, size: str, said: str
) -> None:
    """A 400-digit size gave an OverflowError traceback; ``0.4B`` rounded to 0 and emptied the store."""
    store = ArtifactStore(tmp_path / "cache")
    keys = fill(store, artifact, 3)
    result = CliRunner().invoke(
        main, ["cache", "prune", "--max-size", size, "--cache-dir", str(tmp_path / "cache")]
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: Invalid value for '--max-size': ")
    assert said in error
    assert "nothing was removed" in error
    assert len(error) < 300  # the 400 digits are not repeated
    assert sorted(e.path.name for e in usage.scan(store.root).entries) == sorted(keys)


@pytest.mark.parametrize(
    "text",
    ["1e400G", "9" * 400 + "G", "0.4B", "1.3K", "1.5B"],
    ids=["1e400G", "400 digits G", "0.4B", "1.3K", "1.5B"],
)
def test_parse_size_refuses_what_is_not_whole_bytes_or_too_large(text: str) -> None:
    with pytest.raises(CacheSizeError):
        parse_size(text)


def test_parse_size_reads_large_and_fractional_units_exactly() -> None:
    assert parse_size("1024T") == 1 << 50
    assert parse_size("0.5K") == 512
    assert parse_size("1.25G") == 5 << 28


def _foreign_tree(root: Path) -> dict[Path, bytes]:
    """A directory that is not a kiln cache: files and folders of someone else's."""
    files = {
        root / "bin" / "tool": b"#!/bin/sh\n",
        root / "lib" / "libx.so": b"\x7fELF" + b"\0" * 2000,
        root / "share" / "doc" / "README": b"docs",
        root / "native" / "readme.txt": b"a folder named like kiln's launcher build",
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


@pytest.mark.parametrize(
    "command", [["info"], ["clear", "--yes"], ["prune", "--max-size", "0B"]], ids=" ".join
)
def test_a_directory_that_is_not_a_kiln_cache_is_neither_walked_nor_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Audit: ``kiln cache info --cache-dir /usr`` walked the whole tree (8 s) and called 5.7 GiB
    of it kiln's launcher build; ``clear`` and ``prune`` went ahead too."""
    foreign = tmp_path / "usr"
    files = _foreign_tree(foreign)
    walked: list[Path] = []
    real_tree_size, real_scan = usage.tree_size, usage.scan

    def tree_size(path: Path) -> int:
        walked.append(path)
        return real_tree_size(path)

    def scan(path: Path) -> usage.Usage:
        walked.append(path)
        return real_scan(path)

    monkeypatch.setattr(usage, "tree_size", tree_size)
    monkeypatch.setattr(usage, "scan", scan)
    result = CliRunner().invoke(main, ["cache", *command, "--cache-dir", str(foreign)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {foreign} is not a kiln cache (it holds none of ")
    assert "artifacts-v2/" in result.output
    assert "--cache-dir" in result.output
    assert result.output.count("\n") == 1
    assert walked == []
    assert {path: path.read_bytes() for path in files} == files


@pytest.mark.parametrize(
    "marker", ["artifacts-v2", "artifacts-v1", "bundle-records", "tuning.sqlite3", "triton-key-v1.json"]
)
def test_any_kiln_marker_makes_a_directory_a_cache(tmp_path: Path, marker: str) -> None:
    cache = tmp_path / "cache"
    _foreign_tree(cache)
    if marker.endswith((".json", ".sqlite3")):
        (cache / marker).write_bytes(b"")
    else:
        (cache / marker).mkdir()
    result = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    assert f"cache:           {cache}\n" in result.output


def test_an_empty_directory_is_an_empty_cache(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "compiled:        0 kernels" in result.output


@pytest.mark.parametrize(
    "command", [["info"], ["clear", "--yes"], ["prune", "--max-size", "1G"]], ids=" ".join
)
@pytest.mark.parametrize("var", ["KILN_WORKERS", "KILN_AUTOTUNE", "KILN_MEMORY_POLL_S"])
def test_cache_commands_ignore_settings_they_do_not_use(
    artifact: CompiledArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], var: str
) -> None:
    """Audit: ``KILN_WORKERS=abc kiln cache info`` failed on a setting the command never uses."""
    cache = tmp_path / "cache"
    fill(ArtifactStore(cache), artifact, 1)
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    monkeypatch.setenv(var, "abc")
    result = CliRunner().invoke(main, ["cache", *command])
    assert result.exit_code == 0, result.output
    assert str(cache) in result.output


@pytest.mark.parametrize(
    ("var", "value", "commands"),
    [
        ("KILN_CACHE_MAX_MB", "abc", [["info"]]),
        ("KILN_TUNING_DB", "/", [["info"]]),
        ("KILN_CACHE_DIR", "/dev/null", [["info"], ["clear", "--yes"], ["prune", "--max-size", "1G"]]),
    ],
)
def test_cache_commands_refuse_a_bad_setting_they_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str, commands: list[list[str]]
) -> None:
    if var != "KILN_CACHE_DIR":
        monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(var, value)
    for command in commands:
        result = CliRunner().invoke(main, ["cache", *command])
        assert result.exit_code == 1, (command, result.output)
        assert result.output.startswith(f"Error: {var}="), (command, result.output)
        assert result.output.count("\n") == 1, (command, result.output)

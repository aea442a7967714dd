"""The pool's memory cache: bounded in bytes (KILN_MEMORY_CACHE_MB), least
recently used out, and holding only what a launch needs unless KILN_KEEP_IR=1."""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request
from triton_kiln import CompilePool, Settings, SettingsError, settings
from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.pool.memory_cache import MemoryCache

IRS = {"ptx", "ttir", "ttgir", "llir"}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> CompiledArtifact:
    """One real sm_90 artifact (add_kernel), IRs included."""
    base = tmp_path_factory.mktemp("memory-artifact")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(base / "triton"))
        with CompilePool(workers=1, cache_dir=base / "cache", use_disk_cache=False) as pool:
            compiled = pool.compile(add_request(128), timeout_s=60)
    assert set(compiled.asm) >= IRS
    return compiled


def variant(artifact: CompiledArtifact, i: int) -> CompiledArtifact:
    return dataclasses.replace(artifact, key=f"{i:064x}")


def test_irs_are_most_of_an_artifact_and_dropped_by_default(artifact: CompiledArtifact) -> None:
    slim = artifact.without_ir()
    assert slim.asm == {}
    assert (slim.binary, slim.metadata, slim.key, slim.name) == (
        artifact.binary,
        artifact.metadata,
        artifact.key,
        artifact.name,
    )
    assert slim.nbytes < artifact.nbytes / 2  # LLVM IR and PTX dwarf the cubin
    cache = MemoryCache(1 << 30)
    kept = cache.put(artifact)
    assert kept.asm == {}
    assert cache.nbytes == slim.nbytes


def test_keep_ir_keeps_the_whole_artifact(artifact: CompiledArtifact) -> None:
    cache = MemoryCache(1 << 30, keep_ir=True)
    assert cache.put(artifact) is artifact
    del artifact
    gc.collect()
    kept = cache.get(next(iter(cache.keys())))
    assert kept is not None
    assert set(kept.asm) >= IRS


def test_byte_bound_evicts_least_recently_used(artifact: CompiledArtifact) -> None:
    size = artifact.without_ir().nbytes
    cache = MemoryCache(10 * size + size // 2)  # room for 10
    artifacts = [variant(artifact, i) for i in range(25)]
    for i, a in enumerate(artifacts):
        cache.put(a)
        if i == 5:
            assert cache.get(artifacts[0].key) is not None  # used: moves to the back of the line
    assert len(cache) == 10
    assert cache.nbytes == 10 * size <= cache.max_bytes
    assert cache.evictions == 15
    assert cache.keys() == [a.key for a in artifacts[15:]]
    assert artifacts[0].key not in cache  # used at 5, still the least recent by 15
    # Used artifacts survive evictions of older ones.
    cache.get(artifacts[15].key)
    cache.put(variant(artifact, 100))
    assert artifacts[15].key in cache
    assert artifacts[16].key not in cache


def test_artifact_larger_than_the_bound_is_not_kept(artifact: CompiledArtifact) -> None:
    cache = MemoryCache(artifact.without_ir().nbytes - 1)
    cache.put(artifact)
    assert len(cache) == 0
    assert cache.nbytes == 0


def test_hit_returns_the_callers_object_while_it_lives(artifact: CompiledArtifact) -> None:
    whole = variant(artifact, 7)
    cache = MemoryCache(1 << 30)
    cache.put(whole)
    assert cache.get(whole.key) is whole  # the caller holds it: same object, IRs and all
    del whole
    gc.collect()
    slim = cache.get(f"{7:064x}")
    assert slim is not None
    assert slim.asm == {}
    assert slim.binary == artifact.binary


@pytest.mark.timeout(120)
def test_pool_memory_cache_is_bounded_in_bytes(make_pool: Any, tmp_path: Path) -> None:
    requests = [add_request(block) for block in (32, 64, 128, 256, 512)]
    pool = make_pool(workers=2, use_disk_cache=False, cache_dir=tmp_path / "nodisk")
    sizes = [a.without_ir().nbytes for a in pool.compile_many(requests, progress=False)]  # type: ignore[union-attr]
    assert pool._table.memory.nbytes == sum(sizes)
    # A second pool with room for about two of them keeps the two most recently used.
    small = make_pool(
        workers=2,
        use_disk_cache=False,
        cache_dir=tmp_path / "nodisk2",
        settings=settings.current().replace(memory_cache_mb=1),
    )
    assert small._table.memory.max_bytes == 1 << 20
    small._table.memory.max_bytes = max(sizes) * 2 + min(sizes) // 2
    for request in requests:
        small.compile(request)
    memory = small._table.memory
    assert memory.nbytes <= memory.max_bytes
    assert memory.keys() == [r.key for r in requests[-2:]]
    assert memory.evictions == 3
    gc.collect()
    again = small.submit(requests[-1]).result()
    assert small.stats.memory_hits == 1
    assert again.asm == {}  # IRs dropped by default
    first = small.submit(requests[0])  # evicted: compiled again
    assert first.result().key == requests[0].key
    assert small.stats.compiled == 6


@pytest.mark.timeout(120)
def test_pool_keeps_irs_with_keep_ir(make_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_KEEP_IR", "1")
    pool = make_pool(workers=1, use_disk_cache=False, cache_dir=tmp_path / "nodisk")
    assert pool.settings.keep_ir is True
    key = pool.compile(add_request(128)).key
    gc.collect()
    again = pool.submit(add_request(128)).result()
    assert pool.stats.memory_hits == 1
    assert again.key == key
    assert set(again.asm) >= IRS


def test_memory_cache_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().memory_cache_mb == 512
    assert Settings().keep_ir is False
    env = {"KILN_MEMORY_CACHE_MB": "64", "KILN_KEEP_IR": "yes"}
    parsed = settings.from_env(env)
    assert (parsed.memory_cache_mb, parsed.keep_ir) == (64, True)
    for bad in ("0", "-5", "abc", "1.5", str((1 << 20) + 1)):
        with pytest.raises(SettingsError, match="KILN_MEMORY_CACHE_MB"):
            settings.from_env({"KILN_MEMORY_CACHE_MB": bad})
    with pytest.raises(SettingsError, match="KILN_KEEP_IR"):
        settings.from_env({"KILN_KEEP_IR": "maybe"})
    with pytest.raises(SettingsError, match="memory_cache_mb"):
        Settings(memory_cache_mb=0)
    monkeypatch.setenv("KILN_MEMORY_CACHE_MB", "0")
    with pytest.raises(SettingsError, match="KILN_MEMORY_CACHE_MB='0' is not valid"):
        CompilePool(start=False)


def test_the_settings_page_lists_the_settings() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md").read_text()
    assert "| `KILN_MEMORY_CACHE_MB` | 512 |" in page
    assert "| `KILN_KEEP_IR` | 0 |" in page
    assert "| `KILN_CACHE_MAX_MB` | 10240 |" in page


def test_nothing_in_kiln_reads_irs_of_an_artifact() -> None:
    """What the memory cache drops is never read: ``.asm`` of a kiln artifact is used only where
    artifacts are built and stored (an entry holds what it is given: artifacts/store_entry.py; Triton's
    cache is seeded with what the artifact holds: artifacts/triton_seed.py; a Ray reply carries
    what the remote worker built: farm/wire.py)."""
    src = Path(__file__).resolve().parents[1] / "src" / "triton_kiln"
    readers = sorted(
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if ".asm" in path.read_text() or "asm=" in path.read_text()
    )
    assert readers == [
        "artifacts/artifact.py",
        "artifacts/store_entry.py",
        "artifacts/triton_seed.py",
        "farm/wire.py",
        "triton_compat/compiling.py",
    ]

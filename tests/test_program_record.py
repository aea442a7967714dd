"""The program record (triton_kiln.program): what a run asked the pool for is written, read back
and bounded; the next process of the same program starts those compiles before its first call,
skipping what is cached and what changed; ``KILN_PROGRAM_RECORD=0`` turns it off; a corrupt record
is a miss with one warning.

Compiles are real (sm_90, no GPU); the second process is a real subprocess
(tests/support/program_record_child.py), driven as tests/test_jit_routing.py drives routed compiles.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support import kernels
from support.basics import add_request
from triton_kiln import CompilePool, settings
from triton_kiln import program as program_mod
from triton_kiln.program import record_file as record
from triton_kiln.program import replay
from triton_kiln.program.recorder import Recorder, entry_of

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

pytestmark = pytest.mark.timeout(300)

KERNEL_MODULE = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
"""


# --- the record on disk ---------------------------------------------------------------------------


def _entries(requests: list[Any], run: int, source: Any = "jit") -> list[record.Entry]:
    found = [entry_of(r, source, run, 1) for r in requests]
    assert all(e is not None for e in found)
    return [e for e in found if e is not None]


def test_a_noted_request_is_written_and_read_back(tmp_path: Path) -> None:
    path = record.record_path(tmp_path, "train.py")
    recorder = Recorder(path, "train.py", None, cap=8)
    request = add_request(block=64, attrs={"x_ptr": [["tt.divisibility", 16]]})
    recorder.note([request, request], "jit")  # noted once
    recorder.flush()
    back = record.read(path)
    assert back is not None
    assert back.runs == 1
    (entry,) = back.entries
    assert (entry.module, entry.qualname, entry.kernel) == ("support.kernels", "add_kernel", "add_kernel")
    assert (entry.key, entry.identity) == (request.key, request.spec.identity)
    rebuilt = replay.rebuild(entry, kernels.add_kernel, request.triton_key_dir)
    assert rebuilt.key == request.key  # the same request, from data


def test_the_record_keeps_at_most_its_cap_the_least_recently_needed_going(tmp_path: Path) -> None:
    path = record.record_path(tmp_path, "p")
    first = Recorder(path, "p", None, cap=3)
    first.note([add_request(block=b) for b in (16, 32, 64)], "jit")
    first.close()
    second = Recorder(path, "p", record.read(path), cap=3)
    assert second.run == 2
    second.note([add_request(block=b) for b in (128, 32)], "jit")
    second.close()
    back = record.read(path)
    assert back is not None
    blocks = [dict(e.constexprs)["BLOCK"] for e in back.entries]
    # this run's, in its order, then the last run's most recently needed; BLOCK=64 went
    assert blocks == [["int", 128], ["int", 32], ["int", 16]]
    assert [e.last_run for e in back.entries] == [2, 2, 1]
    assert [e.runs for e in back.entries] == [1, 2, 1]
    third = Recorder(path, "p", back, cap=2)
    third.note([add_request(block=b) for b in (256, 512, 1024)], "jit")  # a run's own cap
    third.close()
    again = record.read(path)
    assert again is not None
    assert len(again.entries) == 2


def test_noting_writes_nothing_on_the_callers_thread_and_a_burst_is_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []
    real_write = record.write
    monkeypatch.setattr(record, "write", lambda path, rec: (writes.append(path.name), real_write(path, rec)))
    path = record.record_path(tmp_path, "p")
    recorder = Recorder(path, "p", None, cap=64, delay_s=0.3)
    for block in (16, 32, 64, 128):  # a burst, as a model's first step routes its kernels
        recorder.note([add_request(block=block)], "jit")
    assert writes == []
    assert not path.exists()
    assert recorder.writer is not None
    deadline = time.monotonic() + 30
    while not writes and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    assert len(writes) == 1
    back = record.read(path)
    assert back is not None
    assert len(back.entries) == 4
    recorder.close()
    assert not recorder.writer.is_alive()
    assert len(writes) == 1  # nothing new: close() has nothing to write
    recorder.note([add_request(block=256)], "jit")  # after close: not noted
    assert len(record.read(path).entries) == 4  # type: ignore[union-attr]


def test_a_record_adopted_after_a_write_is_written_merged(tmp_path: Path) -> None:
    """Another machine's record that arrives after this run wrote its own is merged into the
    file (and so into what the remote cache gets) by the next write, with nothing more noted."""
    path = record.record_path(tmp_path, "p")
    recorder = Recorder(path, "p", None, cap=8, delay_s=0.05)
    recorder.note([add_request(block=16)], "jit")
    recorder.flush()
    first = record.read(path)
    assert first is not None
    assert len(first.entries) == 1
    other = Recorder(tmp_path / "other.json", "p", None, cap=8)
    other.note([add_request(block=32), add_request(block=64)], "jit")
    other.close()
    fetched = record.read(tmp_path / "other.json")
    assert fetched is not None
    recorder.adopt(fetched)
    deadline = time.monotonic() + 30
    merged = first
    while len(merged.entries) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
        merged = record.read(path) or merged
    assert [dict(e.constexprs)["BLOCK"] for e in merged.entries] == [["int", 16], ["int", 32], ["int", 64]]
    assert merged.runs == 2
    recorder.close()


def test_a_process_that_exits_without_uninstall_writes_its_record(tmp_path: Path) -> None:
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from support.basics import add_request\n"
        "from triton_kiln import program, settings\n"
        "program.start(settings.current())\n"
        "program.note([add_request(block=64)], 'jit')\n"
    )  # and exits at once: the writer's delay has not passed, the exit flush writes
    env = {
        **os.environ,
        "KILN_CACHE_DIR": str(tmp_path / "cache"),
        "KILN_PROGRAM": "exits-early",
        "KILN_PROGRAM_RECORD": "1",
    }
    subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__).parent)], env=env, check=True, timeout=120
    )
    back = record.read(record.record_path(tmp_path / "cache", "exits-early"))
    assert back is not None
    assert [dict(e.constexprs)["BLOCK"] for e in back.entries] == [["int", 64]]


@pytest.mark.parametrize(
    "text",
    [b"not json", b'{"format": 1, "program": "p", "runs": "7", "entries": []}', b"[" * 100_000],
    ids=["garbage", "a string for a number", "deep nesting"],
)
def test_a_corrupt_record_is_a_miss_with_one_warning(
    tmp_path: Path, text: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = record.record_path(tmp_path, "p")
    path.parent.mkdir(parents=True)
    path.write_bytes(text)
    with caplog.at_level(logging.WARNING, logger="kiln.program"):
        assert record.read(path) is None
    assert len(caplog.records) == 1
    assert "not valid" in caplog.records[0].getMessage()


def test_a_record_of_another_format_is_a_quiet_miss(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = record.record_path(tmp_path, "p")
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 2, "whatever": []}')
    with caplog.at_level(logging.WARNING, logger="kiln.program"):
        assert record.read(path) is None
    assert caplog.records == []


@pytest.fixture
def recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's program record begun on a fresh cache (no install()); the record's path."""
    with settings.scope(cache_dir=tmp_path / "cache", program="recording-test", program_record=True):
        current = settings.current()
        program_mod.start(current)
        try:
            yield record.record_path(current.cache_dir, "recording-test")
        finally:
            program_mod.stop()


def test_a_tunings_configs_are_recorded(
    recording: Path, make_pool: Callable[..., CompilePool], tmp_path: Path
) -> None:
    from test_autotune_cpu import by_block, configs, make_tuner, tune

    tuner, bench = make_tuner(make_pool, tmp_path, configs(64, 128), by_block({64: 2.0, 128: 1.0}))
    tune(tuner, bench)
    program_mod.flush()
    back = record.read(recording)
    assert back is not None
    assert [(e.kernel, e.source) for e in back.entries] == [("scale_kernel", "tuning")] * 2
    assert sorted(dict(e.constexprs)["BLOCK"][1] for e in back.entries) == [64, 128]


# --- replay in this process --------------------------------------------------------------------------


def _replay_of(entries: list[record.Entry], pool: CompilePool, monkeypatch: pytest.MonkeyPatch) -> Any:
    import triton_kiln.pool

    monkeypatch.setattr(triton_kiln.pool, "get_pool", lambda: pool)
    with settings.scope(cache_dir=pool.settings.cache_dir):
        done = replay.Replay("p", entries, settings.current())
    done.begin()
    assert done.wait(60)
    return done


def test_a_stale_entry_is_skipped_not_compiled(
    make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = make_pool()
    (entry,) = _entries([add_request(block=256)], 1)
    changed = entry.model_copy(update={"identity": "0" * 64})  # the kernel's source was another
    other_key = entry.model_copy(update={"key": "1" * 64})  # Triton or its environment was another
    gone = entry.model_copy(update={"qualname": "no_such_kernel"})
    done = _replay_of([changed, other_key, gone], pool, monkeypatch)
    assert done.started == 0
    assert done.skipped == {replay.SOURCE_CHANGED: 1, replay.CHANGED: 1, replay.GONE: 1}
    assert pool.stats.submitted == 0


def test_a_fresh_entry_is_compiled_and_a_cached_one_skipped(
    make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = make_pool()
    entries = _entries([add_request(block=512), add_request(block=1024)], 1)
    pool.compile(add_request(block=1024))
    done = _replay_of(entries, pool, monkeypatch)
    assert done.started == 1
    assert done.skipped == {replay.CACHED: 1}
    pool.compile(add_request(block=512))
    assert pool.stats.compiled == 2  # the replayed compile served the later request


# --- a second process of the same program ------------------------------------------------------------


def run_program(tmp_path: Path, cache: str = "cache", **env: str) -> tuple[dict[str, Any], str]:
    """Run program_record_child.py on the caches of ``tmp_path`` (kiln's in ``cache``: another
    is another machine's); its report and stderr."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    environ.update(
        PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS), str(tmp_path / "program")]),
        KILN_CACHE_DIR=str(tmp_path / cache),
        TRITON_CACHE_DIR=str(tmp_path / f"triton-{cache}"),
        KILN_WORKERS="1",
        KILN_PROGRESS="0",
        **env,
    )
    out = subprocess.run(
        [sys.executable, str(TESTS / "support" / "program_record_child.py")],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
        check=False,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, f"no report (exit {out.returncode}):\n{out.stderr[-3000:]}"
    return json.loads(line[len("REPORT ") :]), out.stderr


def forget_compiles(tmp_path: Path) -> None:
    """Both caches emptied, the program record kept: what is left to start is the record's."""
    for name in ("triton-cache",):  # run_program's default caches
        shutil.rmtree(tmp_path / name, ignore_errors=True)
    for store in (tmp_path / "cache").glob("artifacts-v*"):
        shutil.rmtree(store)


@pytest.fixture
def program_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "program"
    folder.mkdir()
    (folder / "record_kernels.py").write_text(KERNEL_MODULE)
    return folder


def _record_file(tmp_path: Path) -> Path:
    (path,) = (tmp_path / "cache" / record.DIRECTORY).glob("*.json")
    return path


def test_the_next_process_starts_the_recorded_compile_before_its_first_call(
    tmp_path: Path, program_dir: Path
) -> None:
    first, _ = run_program(tmp_path)
    assert first["replayed"] is False
    assert first["compiled_after_call"] == 1
    back = record.read(_record_file(tmp_path))
    assert back is not None
    assert [(e.kernel, e.source) for e in back.entries] == [("add_kernel", "jit")]
    forget_compiles(tmp_path)
    second, stderr = run_program(tmp_path)
    assert second["started"] == 1
    assert second["compiled_before_call"] == 1  # done before the program's first call
    assert second["compiled_after_call"] == 1  # which compiled nothing more
    assert "started 1 of 1 recorded compiles" in stderr
    third, stderr = run_program(tmp_path)  # everything cached: nothing starts
    assert third["started"] == 0
    assert third["skipped"] == {replay.CACHED: 1}
    assert third["pool_started_before_call"] is False
    assert "skipped 1 (1 already cached)" in stderr


def test_a_kernel_whose_source_changed_is_skipped(tmp_path: Path, program_dir: Path) -> None:
    run_program(tmp_path)
    forget_compiles(tmp_path)
    source = program_dir / "record_kernels.py"
    source.write_text(source.read_text().replace("x + y", "x + y + 1.0"))
    second, stderr = run_program(tmp_path)
    assert second["started"] == 0
    assert second["skipped"] == {replay.SOURCE_CHANGED: 1}
    assert second["compiled_before_call"] == 0  # nothing compiled from the stale entry
    assert second["compiled_after_call"] == 1
    assert "1 kernel source changed" in stderr


def test_kiln_program_record_0_records_and_starts_nothing(tmp_path: Path, program_dir: Path) -> None:
    off, _ = run_program(tmp_path, KILN_PROGRAM_RECORD="0")
    assert not (tmp_path / "cache" / record.DIRECTORY).exists()
    run_program(tmp_path)  # recorded
    forget_compiles(tmp_path)
    off, _ = run_program(tmp_path, KILN_PROGRAM_RECORD="0")
    assert off["replayed"] is False
    assert off["pool_started_before_call"] is False


def test_a_corrupt_record_file_warns_once_and_the_program_runs(tmp_path: Path, program_dir: Path) -> None:
    run_program(tmp_path)
    path = _record_file(tmp_path)
    path.write_bytes(b'{"format": 1, "program": ')
    report, stderr = run_program(tmp_path)
    assert report["replayed"] is False
    assert report["compiled_after_call"] == 0  # cached from the first run
    assert stderr.count("is not valid") == 1, stderr[-3000:]
    assert "Traceback" not in stderr


# --- another machine, through the remote cache ---------------------------------------------------


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    from support.redis_server import REDIS_SERVER, running_server

    if REDIS_SERVER is None:
        pytest.skip("no redis-server (apt-get install redis-server)")
    with running_server(tmp_path / "redis") as server:
        yield server.url


def test_a_fresh_machine_starts_the_compiles_another_machine_recorded(
    tmp_path: Path, program_dir: Path, redis_url: str
) -> None:
    """Machine A's record reaches the remote cache; machine B (a fresh kiln cache and Triton
    cache, the same remote) fetches it in a thread at install() and has the binary here (A's,
    fetched from the remote cache) before its program's first call."""
    remote = {"KILN_REMOTE_CACHE": redis_url, "KILN_REMOTE_TIMEOUT_S": "5", "KILN_PROGRAM": "train"}
    first, _ = run_program(tmp_path, "machine-a", **remote)
    assert first["replayed"] is False
    assert list((tmp_path / "machine-a" / record.DIRECTORY).glob("*.json")), "machine A kept no record"
    second, stderr = run_program(tmp_path, "machine-b", **remote)
    assert second["replayed"] is True, stderr[-2000:]
    # machine A's binary is in the remote cache too: the replay fetched it, before the first call
    assert second["skipped"] == {replay.FETCHED: 1}
    assert second["pool_started_before_call"] is True
    assert second["compiled_after_call"] == 0  # the call found it here: nothing compiled
    assert "1 fetched from the remote cache" in stderr
    back = record.read(next((tmp_path / "machine-b" / record.DIRECTORY).glob("*.json")))
    assert back is not None
    assert back.runs == 2  # machine A's run, then this one


def test_a_fresh_machine_compiles_a_recorded_kernel_the_remote_cache_holds_no_binary_of(
    tmp_path: Path, program_dir: Path, redis_url: str
) -> None:
    import redis

    remote = {"KILN_REMOTE_CACHE": redis_url, "KILN_REMOTE_TIMEOUT_S": "5", "KILN_PROGRAM": "train"}
    run_program(tmp_path, "machine-a", **remote)
    server = redis.Redis.from_url(redis_url)
    binaries = server.keys("kiln:r1:artifact:*")
    assert binaries, "machine A published no binary"
    server.delete(*binaries)  # expired, evicted: only the record is left
    second, stderr = run_program(tmp_path, "machine-b", **remote)
    assert second["started"] == 1, stderr[-2000:]
    assert second["compiled_before_call"] == 1
    assert second["compiled_after_call"] == 1  # the call compiled nothing more
    assert "started 1 of 1 recorded compiles" in stderr


def test_without_the_remote_cache_a_fresh_machine_replays_nothing(tmp_path: Path, program_dir: Path) -> None:
    run_program(tmp_path, "machine-a", KILN_PROGRAM="train")
    second, _ = run_program(tmp_path, "machine-b", KILN_PROGRAM="train")
    assert second["replayed"] is False


@pytest.mark.parametrize(
    "stored",
    [b"not json", b'{"format": 1, "program": "train", "runs": -1, "entries": []}'],
    ids=["garbage", "a negative run count"],
)
def test_an_invalid_remote_record_replays_nothing_and_the_program_runs(
    tmp_path: Path, program_dir: Path, redis_url: str, stored: bytes
) -> None:
    import redis

    from triton_kiln.remote.names import program_name

    redis.Redis.from_url(redis_url).set(program_name("train", record.FORMAT), stored)
    remote = {"KILN_REMOTE_CACHE": redis_url, "KILN_REMOTE_TIMEOUT_S": "5", "KILN_PROGRAM": "train"}
    report, stderr = run_program(tmp_path, "machine-b", **remote)
    assert report["replayed"] is False
    assert report["compiled_after_call"] == 1  # the program ran, and compiled its kernel itself
    assert "is not valid" in stderr

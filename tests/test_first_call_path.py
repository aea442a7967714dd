"""Nothing but compiling and timing on the first call's path.

* ``kiln.install()`` (and defining a tuned kernel) on a GPU machine starts no zygote where the
  cache has tuned before (a tuning's first miss does: tests/test_footprint.py), and starts the
  pool where nothing is tuned yet (``KILN_PREWARM=auto``): the GPU is faked only where kiln detects it
  (``kiln.sandbox.registry.gpu_present``); the pool, its zygote and Triton's key are real.
* Triton's key is computed once and kept: a second process reads the stored key and never opens
  ``libtriton.so`` (every ``open`` of it is counted); a new ``libtriton.so`` (another inode, size
  or mtime) invalidates the stored key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import triton

import triton_kiln as kiln
import triton_kiln.pool.pool as pool_mod
from support.basics import wait_no_processes
from support.kernels import add_kernel
from triton_kiln import settings, triton_compat
from triton_kiln.autotuner import prewarm as prewarm_mod
from triton_kiln.sandbox import registry

SRC = Path(__file__).resolve().parents[1] / "src"


def _join_prewarm() -> None:
    for thread in threading.enumerate():
        if thread.name == "kiln-prewarm":
            thread.join(timeout=120)


@pytest.fixture
def gpu_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A process that prewarmed nothing yet, on a machine that says it has a GPU (the only
    fake); no sandbox (it needs a real GPU), a cache that has tuned before (its database holds a
    run: ``KILN_PREWARM=auto`` starts nothing), a fresh process-wide pool."""
    from test_footprint import record_a_run

    record_a_run(tmp_path / "cache" / "tuning.sqlite3")
    monkeypatch.setattr(prewarm_mod, "_started", False)
    monkeypatch.setattr(prewarm_mod, "_untuned_checked", set())
    monkeypatch.setattr(prewarm_mod, "_compare_queued", False)
    monkeypatch.setattr(triton_compat.core, "_TRITON_KEY", None)
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    monkeypatch.setattr(pool_mod, "_DEFAULT_POOL", None)
    with settings.scope(cache_dir=tmp_path / "cache", sandbox=False, workers=1):
        yield
        made = pool_mod._DEFAULT_POOL
        if made is not None:
            made.shutdown(wait=True, cancel_futures=True)
            assert not wait_no_processes(made.pool_id), "the prewarmed pool left processes behind"


def test_install_starts_no_zygote(gpu_machine: None) -> None:
    kiln.install()
    try:
        _join_prewarm()
        assert pool_mod._DEFAULT_POOL is None, "kiln.install() made a pool before anything tuned"
    finally:
        kiln.uninstall()


def test_install_on_a_cache_where_nothing_is_tuned_starts_the_pool(gpu_machine: None, tmp_path: Path) -> None:
    (tmp_path / "cache" / "tuning.sqlite3").unlink()  # a fresh cache: the first call will tune
    kiln.install()
    try:
        _join_prewarm()
        assert pool_mod._DEFAULT_POOL is not None, "KILN_PREWARM=auto started no pool on a fresh cache"
        assert pool_mod._DEFAULT_POOL.wait_ready(120)
    finally:
        kiln.uninstall()


def test_on_a_fresh_cache_install_readies_what_a_first_tuning_waits_for(
    gpu_machine: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a first tuning would otherwise wait for on its path: the pool, the output check's
    kernels compiled in it, Triton's driver utilities and the sandbox (started ahead, it closes
    when idle if no tuning comes: tests/test_footprint.py)."""
    from triton_kiln.launch import prebuild

    (tmp_path / "cache" / "tuning.sqlite3").unlink()
    sm90 = triton_compat.GPUTarget("cuda", 90, 32)
    monkeypatch.setattr(prewarm_mod, "gpu_targets", lambda: [sm90])
    monkeypatch.setattr(prewarm_mod, "compare_futures", [])
    monkeypatch.setattr(prebuild, "_driver_utils_started", False)
    started: list[str] = []
    monkeypatch.setattr(registry, "prestart_ahead", lambda: started.append("sandbox"))
    with settings.scope(sandbox=True, prebuild_launchers=True):
        kiln.install()
        try:
            _join_prewarm()
            assert pool_mod._DEFAULT_POOL is not None
            assert prewarm_mod.compare_futures, "the output check's kernels were not queued"
            for future in prewarm_mod.compare_futures:
                future.result(timeout=300)
            assert prebuild._driver_utils_started, "Triton's driver utilities were not prebuilt"
            assert started == ["sandbox"]
        finally:
            kiln.uninstall()


def test_a_kernel_with_a_pool_of_its_own_starts_no_process_pool_even_on_a_fresh_cache(
    gpu_machine: None, tmp_path: Path, make_pool: Any
) -> None:
    (tmp_path / "cache" / "tuning.sqlite3").unlink()  # KILN_PREWARM=auto would start the shared pool
    own = make_pool(workers=1)
    configs: Any = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    kiln.autotune(configs=configs, key=["n"], pool=own)(add_kernel)
    _join_prewarm()
    assert pool_mod._DEFAULT_POOL is None, "a kernel with its own pool started the process's pool"


def test_defining_a_tuned_kernel_starts_no_zygote(gpu_machine: None) -> None:
    configs: Any = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
    kiln.autotune(configs=configs, key=["n"])(add_kernel)
    _join_prewarm()
    assert pool_mod._DEFAULT_POOL is None, "defining a tuned kernel made a pool before anything tuned"


def test_a_cpu_machine_starts_no_zygote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(prewarm_mod, "_started", False)
    monkeypatch.setattr(pool_mod, "_DEFAULT_POOL", None)
    assert registry.gpu_present() is False  # CI: no GPU
    with settings.scope(cache_dir=tmp_path / "cache"):
        kiln.install()
        try:
            _join_prewarm()
            assert pool_mod._DEFAULT_POOL is None
        finally:
            kiln.uninstall()


# -- Triton's key: once per machine, kept -------------------------------------------------------

_KEY_CHILD = textwrap.dedent(
    """
    import builtins, io, json, os, sys, time
    from pathlib import Path

    opened = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if "libtriton" in os.fspath(file) if isinstance(file, (str, bytes, os.PathLike)) else False:
            opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    builtins.open = counting_open
    io.open = counting_open
    from triton_kiln import triton_compat

    started = time.perf_counter()
    key = triton_compat.triton_key(Path(sys.argv[1]))
    print(json.dumps({"key": key, "seconds": time.perf_counter() - started, "opened": opened}))
    """
)


def _key_process(cache_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _KEY_CHILD, str(cache_dir)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_a_second_process_reads_the_stored_key_without_hashing_libtriton(tmp_path: Path) -> None:
    first = _key_process(tmp_path)
    assert first["opened"], "the first process must hash libtriton.so (the count would prove nothing)"
    second = _key_process(tmp_path)
    assert second["key"] == first["key"]
    assert second["opened"] == [], f"the second process hashed libtriton.so again: {second['opened']}"
    assert second["seconds"] < first["seconds"]
    stored = json.loads(next(tmp_path.glob("triton-key-v*.json")).read_text())
    assert stored["key"] == first["key"]


def test_the_stored_key_is_tied_to_libtriton_identity(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fingerprint changes with libtriton.so's inode (a reinstalled Triton): another file
    there means the stored key is not used."""
    root = tmp_path / "triton"
    (root / "_C").mkdir(parents=True)
    import sysconfig

    suffix = str(sysconfig.get_config_var("EXT_SUFFIX")).split(".")[-1]
    library = root / "_C" / f"libtriton.{suffix}"
    library.write_bytes(b"one")
    monkeypatch.setattr(triton_compat.core, "_triton_dir", lambda: root)
    before = triton_compat.core._fingerprint()
    stat = library.stat()
    replacement = root / "_C" / "new.tmp"
    replacement.write_bytes(b"one")  # same size, then the same mtime: only the inode differs
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(replacement, library)
    assert library.stat().st_ino != stat.st_ino
    assert triton_compat.core._fingerprint() != before


# -- the caller's own Triton: kiln's stored key, no hashing ---------------------------------------

_CALLER_CHILD = textwrap.dedent(
    """
    import builtins, io, json, os, sys, threading, time

    opened = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if "libtriton" in os.fspath(file) if isinstance(file, (str, bytes, os.PathLike)) else False:
            opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    builtins.open = counting_open
    io.open = counting_open
    sys.path.insert(0, sys.argv[1])
    import triton
    import triton_kiln as kiln
    from triton_kiln import triton_compat
    from triton_kiln.sandbox import registry

    registry.gpu_present = lambda: True  # the only fake: kiln believes it runs on a GPU machine
    # kiln's prewarm thread is held back until the compile is done: the key the caller's Triton
    # uses must come from install() itself, in the foreground, not from a thread that may be late
    import triton.runtime.cache as cache_mod
    from triton_kiln.autotuner import prewarm as prewarm_mod

    tritons_own = cache_mod.triton_key
    release = threading.Event()
    warm_pool = prewarm_mod._warm_pool
    if sys.argv[2] == "held":
        prewarm_mod._warm_pool = lambda *a: (release.wait(120), warm_pool(*a))
    kiln.install()
    seeded_at_install = cache_mod.triton_key is not tritons_own
    from support.kernels import add_kernel  # a plain @triton.jit kernel, compiled here, in the caller

    src = triton_compat.ASTSource(
        add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 64},
    )
    started = time.perf_counter()
    compiled = triton.compile(src, target=triton_compat.GPUTarget("cuda", 90, 32))
    seconds = time.perf_counter() - started
    release.set()
    for thread in threading.enumerate():
        if thread.name == "kiln-prewarm":
            thread.join(timeout=120)
    kiln.get_pool().shutdown(wait=True)
    kiln.uninstall()
    result = {"opened": opened, "hash": compiled.hash, "seconds": seconds, "seeded": seeded_at_install}
    print(json.dumps(result))
    """
)


def _caller_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        "KILN_CACHE_DIR": str(tmp_path / "cache"),
        "KILN_SANDBOX": "0",
        "KILN_WORKERS": "1",
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
    }


def _caller_process(env: dict[str, str], mode: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _CALLER_CHILD, str(Path(__file__).resolve().parent), mode],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_callers_own_compile_uses_the_stored_key_without_hashing_libtriton(tmp_path: Path) -> None:
    """A library's plain ``@triton.jit`` kernels compile in the caller, and the first one
    paid Triton's key (~2 s hashing libtriton.so). After ``kiln.install()`` on a GPU machine with
    a valid key file, the caller's Triton has kiln's key: the compile opens no libtriton.so."""
    _key_process(tmp_path / "cache")  # a valid key file, as an earlier process on this machine left it
    env = _caller_env(tmp_path)
    result = _caller_process(env, "held")
    assert result["hash"]
    assert result["seeded"], "kiln.install() returned before the caller's Triton had kiln's key"
    assert result["opened"] == [], f"the caller's compile hashed libtriton.so: {result['opened']}"


def test_without_a_key_file_the_callers_compile_waits_for_kilns_hash_instead_of_hashing_again(
    tmp_path: Path,
) -> None:
    """A machine's first process (no key file yet): kiln's prewarm thread hashes libtriton.so
    from ``kiln.install()`` on; the caller's own compile, right after, waits for that hash
    instead of running a second one beside it (libtriton.so read once in the process)."""
    result = _caller_process(_caller_env(tmp_path), "free")
    assert result["hash"]
    assert result["seeded"]
    assert len(result["opened"]) == 1, f"libtriton.so hashed {len(result['opened'])} times"
    assert json.loads(next((tmp_path / "cache").glob("triton-key-v*.json")).read_text())["key"]


# -- the output check's kernel: compiled beside the configs, not before the first benchmark ------


def test_prewarm_compiles_the_output_checks_kernel_beside_the_configs(
    gpu_machine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured on an H100 (bench/first_call_timeline.py): each tuning run that met a dtype first
    waited 0.4-1 s before its first benchmark for this kernel's compile. A tuning's first miss
    (``prewarm``) queues every variant in the pool; a later run's submit finds them done (the GPU
    is faked: its capability, and no sandbox process)."""
    from triton_kiln.autotuner import compare_kernels
    from triton_kiln.sandbox.compare_kernel import VARIANTS

    sm90 = triton_compat.GPUTarget("cuda", 90, 32)
    monkeypatch.setattr(registry, "prestart", lambda: None)
    monkeypatch.setattr(prewarm_mod, "gpu_targets", lambda: [sm90], raising=False)
    monkeypatch.setattr(prewarm_mod, "compare_futures", [], raising=False)
    with settings.scope(sandbox=True):
        kiln.install()
        try:
            assert prewarm_mod.prewarm(sandbox=True, pool=True)
            _join_prewarm()
            for future in getattr(prewarm_mod, "compare_futures", []):
                future.result(timeout=300)
            made = pool_mod._DEFAULT_POOL
            assert made is not None
            submitted = compare_kernels.submit(made, sm90, ["torch.bfloat16", "torch.float32", "torch.int32"])
            assert len(submitted) == 4  # three dtypes' variants and the fingerprint kernel
            assert all(f.done() for f in submitted.values()), "a first tuning run would wait for it"
            assert len(compare_kernels.requests(sm90, VARIANTS)) >= 8
        finally:
            kiln.uninstall()


def test_gpu_targets_from_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"  # the GPU is what is faked: the tool reporting it
    smi.write_text("#!/bin/sh\nprintf '9.0\\n9.0\\n8.6\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    targets = prewarm_mod.gpu_targets()
    assert [(t.backend, t.arch, t.warp_size) for t in targets] == [("cuda", 90, 32), ("cuda", 86, 32)]
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert prewarm_mod.gpu_targets() == []

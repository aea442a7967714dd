"""A planted or edited native helper never runs: kiln loads only the ``.so`` it built itself.

Each case plants a real shared object (compiled here with the system C compiler) whose
constructor writes a marker file the moment it is loaded, under the exact name kiln's launcher
has, then lets a fresh process build/load the helper (``native()``) or load a bundle. The
marker must never appear.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.bundle_maker import compile_parts
from triton_kiln.bundle import write_bundle
from triton_kiln.launch.native import PREBUILT_MODULE, helper_path

PLANTED_C = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("planted code ran", f); fclose(f); }
}
"""

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs the system C compiler")


def _plant(tmp_path: Path, target: Path, marker: Path) -> bytes:
    """Compile the planted object and put it at ``target``; return its bytes."""
    source = tmp_path / "planted.c"
    source.write_text(PLANTED_C)
    out = tmp_path / "planted.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', str(source), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out, target)
    return out.read_bytes()


# These cases are about the launcher kiln builds in its cache, so the prebuilt one (an editable
# install may have built it in place) is kept out: blocked from import, kiln builds its own.
BLOCK_PREBUILT = f"import sys; sys.modules[{PREBUILT_MODULE!r}] = None\n"


def _run(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KILN_CACHE_DIR": str(cache), "PYTHONWARNINGS": "always"}
    return subprocess.run(
        [sys.executable, "-c", BLOCK_PREBUILT + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


NATIVE = """
import triton_kiln as kiln
from triton_kiln.launch.native import native, NativeBuildError
try:
    module = native()
    print("LOADED", module.call_key)
except NativeBuildError as exc:
    print("REFUSED", exc)
"""


@needs_cc
def test_a_planted_helper_without_kilns_record_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    target = helper_path(cache)
    planted = _plant(tmp_path, target, marker)
    result = _run(NATIVE, cache)
    assert not marker.exists(), "the planted shared object ran in kiln's process"
    assert "LOADED" in result.stdout, result.stderr
    assert "NativeHelperWarning" in result.stderr
    assert "kiln has no record of building it" in result.stderr
    assert target.read_bytes() != planted  # replaced by kiln's own build
    assert (target.parent.stat().st_mode & 0o777) == 0o700


@needs_cc
def test_a_helper_edited_after_kiln_built_it_is_not_loaded(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    first = _run(NATIVE, cache)
    assert "LOADED" in first.stdout, first.stderr
    target = helper_path(cache)
    record = target.with_name(target.name + ".sha256")
    assert record.exists()
    recorded = record.read_text()
    _plant(tmp_path, target, marker)  # swapped after the build; the record is kiln's own
    result = _run(NATIVE, cache)
    assert not marker.exists(), "the edited shared object ran in kiln's process"
    assert "LOADED" in result.stdout, result.stderr
    assert "sha256 differs" in result.stderr
    assert record.read_text() == recorded  # the same source builds the same helper again


@needs_cc
def test_a_planted_helper_with_a_forged_record_does_not_run_via_load_bundle(tmp_path: Path) -> None:
    """kiln.load_bundle builds/loads the helper (device check); the planted one never runs."""
    record, artifact = compile_parts(tmp_path / "compile-cache")
    bundle = write_bundle(tmp_path / "b.tgz", [record], {artifact.key: artifact})
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    target = helper_path(cache)
    _plant(tmp_path, target, marker)
    target.with_name(target.name + ".sha256").write_text("0" * 64 + "\n")
    result = _run(
        f"""
        import triton_kiln as kiln
        try:
            kiln.load_bundle({str(bundle)!r})
            print("LOADED BUNDLE")
        except kiln.BundleError as exc:
            print("BUNDLE ERROR", exc)  # no GPU here: the device check refuses
        """,
        cache,
    )
    assert not marker.exists(), "the planted shared object ran on kiln.load_bundle"
    assert "BUNDLE" in result.stdout, result.stderr
    assert "sha256 differs" in result.stderr


@needs_cc
@pytest.mark.parametrize("mode", [0o770, 0o777])
def test_a_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    target = helper_path(cache)
    _plant(tmp_path, target, marker)
    target.parent.chmod(mode)
    result = _run(NATIVE, cache)
    assert not marker.exists()
    assert "REFUSED" in result.stdout, result.stderr
    assert "is writable by others" in result.stdout
    assert f"rm -r {target.parent}" in result.stdout  # the way out


@needs_cc
def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    elsewhere = tmp_path / "attacker"
    target = helper_path(cache)
    _plant(tmp_path, elsewhere / target.name, marker)
    elsewhere.chmod(0o700)
    cache.mkdir()
    target.parent.symlink_to(elsewhere, target_is_directory=True)
    result = _run(NATIVE, cache)
    assert not marker.exists()
    assert "REFUSED" in result.stdout, result.stderr
    assert "is a symlink" in result.stdout


@needs_cc
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    target = helper_path(cache)
    _plant(tmp_path, target, marker)
    target.parent.chmod(0o700)
    os.chown(target.parent, 65534, 65534)
    result = _run(NATIVE, cache)
    assert not marker.exists()
    assert "REFUSED" in result.stdout, result.stderr
    assert "is owned by uid 65534" in result.stdout

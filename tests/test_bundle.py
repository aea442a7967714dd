"""Bundles on CPU: round trips of real sm_90 binaries, rejection of bad bundles, call matching,
no Triton on load, and the C call key agreeing with Triton's own specialization."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

import triton_kiln as kiln
from support import kernels
from support.basics import SM90
from triton_kiln.artifacts.store import ArtifactStore
from triton_kiln.autotuner.compile_requests import request_for
from triton_kiln.bundle import BundleError, BundleMissError, BundleReader, write_bundle
from triton_kiln.bundle.format import entry_for
from triton_kiln.bundle.index import collect_recorded, write_record
from triton_kiln.bundle.runtime import Bundle, check_device_matches
from triton_kiln.cli import main as cli
from triton_kiln.errors import MissingMetadataError
from triton_kiln.launch.native import native
from triton_kiln.launch.spec import LaunchSpec, call_key_for, param_flags, torch_dtype
from triton_kiln.tuning.configs import config_json as _config_json

CONFIGS = [kiln.Config({"BLOCK": 1024}, num_warps=4), kiln.Config({"BLOCK": 256}, num_warps=2)]


def _tuner(pool: Any) -> Any:
    return kiln.autotune(CONFIGS, key=["n"], pool=pool, target=SM90, database=False)(kernels.add_kernel)


def _variant(tuner: Any, pool: Any, args: tuple[Any, ...], config: Any = CONFIGS[0]) -> tuple[Any, Any]:
    request, bound = request_for(tuner.fn, config, args, {}, SM90)
    artifact = pool.compile(request)
    key_values = {k: bound.args[k] for k in tuner.keys}
    entry = entry_for(
        "add_kernel",
        artifact,
        LaunchSpec.from_request(request),
        key_values,
        _config_json(config),
        None,
        "tuned",
    )
    return entry, artifact


@pytest.fixture
def bundle_parts(make_pool: Any) -> tuple[Any, Any, Any, tuple[Any, ...]]:
    pool = make_pool(workers=2)
    tuner = _tuner(pool)
    x = torch.zeros(4096)
    args = (x, x, x, 4096)
    entry, artifact = _variant(tuner, pool, args)
    record = tuner._variants.kernel_record()
    record.entries.append(entry)
    return tuner, record, artifact, args


@pytest.mark.parametrize("name", ["bundle", "bundle.tar.gz", "bundle.tar"])
def test_round_trip_and_matching(tmp_path: Path, bundle_parts: Any, name: str) -> None:
    _, record, artifact, args = bundle_parts
    path = write_bundle(tmp_path / name, [record], {artifact.key: artifact})
    reader = BundleReader(path)
    (kernel,) = reader.manifest.kernels
    assert kernel.name == "add_kernel"
    assert kernel.to_json() == record.to_json()
    loaded = reader.artifact(kernel, kernel.entries[0])
    assert loaded.binary == artifact.binary
    assert loaded.metadata == artifact.metadata

    bundle = Bundle(path, check_device=False)
    add = bundle["add_kernel"]
    variant = add.variant_for(args)
    assert variant.entry.config["kwargs"] == {"BLOCK": 1024}
    assert variant.tail == (1024,)  # BLOCK comes from the config
    x = args[0]
    with pytest.raises(BundleMissError, match="no tuned variant of add_kernel") as info:
        add.variant_for((x, x, x, 8192))  # another tuning key
    assert "key {'n': 4096}" in str(info.value)
    with pytest.raises(BundleMissError):
        add.variant_for((x[1:], x, x, 4096))  # unaligned: another specialization
    with pytest.raises(BundleMissError):
        add.variant_for((x.half(), x, x, 4096))  # another dtype
    with pytest.raises(KeyError, match="no kernel 'nope'"):
        bundle["nope"]


def test_calls_that_match_no_variant_say_so_through_the_c_dispatcher(
    tmp_path: Path, bundle_parts: Any
) -> None:
    """``bundle[name][grid](...)`` is kiln's C BoundCall; its misses reach the Python path,
    which raises the same errors as ``variant_for``, and nothing is launched (no GPU here)."""
    _, record, artifact, args = bundle_parts
    bundle = Bundle(write_bundle(tmp_path / "b", [record], {artifact.key: artifact}), check_device=False)
    add = bundle["add_kernel"]
    call = add[(4,)]
    assert type(call).__name__ == "BoundCall"
    x = args[0]
    with pytest.raises(BundleMissError, match="no tuned variant of add_kernel"):
        call(x, x, x, 8192)
    with pytest.raises(BundleMissError):
        call(x.half(), x, x, 4096)
    with pytest.raises(TypeError, match="positional arguments only"):
        call(x, x, x, n=4096)
    assert add.best_config is None  # nothing launched


def test_rejects_corrupt_and_mismatched_bundles(tmp_path: Path, bundle_parts: Any) -> None:
    _, record, artifact, _ = bundle_parts
    path = write_bundle(tmp_path / "b", [record], {artifact.key: artifact})
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())

    binary = next((path / "binaries").iterdir())
    good = binary.read_bytes()
    reader = BundleReader(path)
    binary.write_bytes(good[:-8] + b"\0" * 8)
    with pytest.raises(BundleError, match="is corrupt"):  # changed after load: checked at launch
        reader.artifact(reader.manifest.kernels[0], reader.manifest.kernels[0].entries[0])
    with pytest.raises(BundleError, match="is corrupt"):  # and at load (#12 item 6)
        BundleReader(path)
    binary.write_bytes(good)

    broken = json.loads(json.dumps(manifest))
    del broken["kernels"][0]["entries"][0]["metadata"]["shared"]
    manifest_path.write_text(json.dumps(broken))
    with pytest.raises(MissingMetadataError, match="shared"):
        BundleReader(path)

    manifest_path.write_text(json.dumps({**manifest, "format": 99}))
    with pytest.raises(BundleError, match="format 99"):
        BundleReader(path)
    manifest_path.write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        BundleReader(path)
    manifest_path.write_text(json.dumps(manifest))

    with pytest.raises(BundleError, match="no bundle at"):
        BundleReader(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(BundleError, match=r"not a \.tar"):
        BundleReader(tmp_path / "file.txt")

    bundle = Bundle(path, check_device=False)
    check_device_matches(bundle, info=(9, 0, 13000))
    with pytest.raises(BundleError, match=r"compiled for sm_90; this GPU is sm_80"):
        check_device_matches(bundle, info=(8, 0, 13000))
    with pytest.raises(BundleError, match="sm_100"):
        check_device_matches(bundle, info=(10, 0, 13000))
    if artifact.metadata.get("ptx_version"):
        with pytest.raises(BundleError, match="Update the NVIDIA driver"):
            check_device_matches(bundle, info=(9, 0, 11000))


def test_nothing_to_bundle_is_an_error(tmp_path: Path, make_pool: Any) -> None:
    tuner = _tuner(make_pool(workers=1))
    with pytest.raises(BundleError, match="has not been called in this process"):
        kiln.save_bundle(tmp_path / "b", tuner)
    with pytest.raises(TypeError, match=r"kiln\.autotune"):
        kiln.save_bundle(tmp_path / "b", kernels.add_kernel)


def test_loading_a_bundle_imports_no_triton(tmp_path: Path, bundle_parts: Any) -> None:
    _, record, artifact, _ = bundle_parts
    path = write_bundle(tmp_path / "b.tgz", [record], {artifact.key: artifact})
    code = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import torch
        import triton_kiln as kiln
        from triton_kiln.bundle.runtime import Bundle
        bundle = Bundle({str(path)!r}, check_device=False)
        x = torch.zeros(4096)
        variant = bundle["add_kernel"].variant_for((x, x, x, 4096))
        artifact = bundle.reader.artifact(variant.kernel, variant.entry)
        assert artifact.binary[:4] == b"\\x7fELF"
        assert not [m for m in sys.modules if m.split(".")[0] == "triton"]
        print("OK")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_cli_saves_recorded_variants(tmp_path: Path, bundle_parts: Any) -> None:
    _, record, artifact, _ = bundle_parts
    cache = tmp_path / "cache"
    runner = CliRunner()
    empty = runner.invoke(cli, ["bundle", "save", str(tmp_path / "out"), "--cache-dir", str(tmp_path)])
    assert empty.exit_code == 1
    assert f"no tuned variants recorded in {tmp_path}" in empty.output
    ArtifactStore(cache).put(artifact)
    write_record(cache, record, record.entries[0])
    result = runner.invoke(cli, ["bundle", "save", str(tmp_path / "out.tgz"), "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    assert "add_kernel: 1 variant(s)" in result.output
    shown = runner.invoke(cli, ["bundle", "show", str(tmp_path / "out.tgz")])
    assert shown.exit_code == 0, shown.output
    assert "{'BLOCK': 1024}" in shown.output
    assert "sm_90" in shown.output
    kernels_, binaries = collect_recorded(cache)
    assert [k.name for k in kernels_] == ["add_kernel"]
    assert artifact.key in binaries


@pytest.mark.parametrize("name", ["x.zip", "x.tar.bz2", "x.tar.xz", "x.7z", "x.gz"])
def test_write_bundle_refuses_archive_formats_it_does_not_write(
    tmp_path: Path, bundle_parts: Any, name: str
) -> None:
    _, record, artifact, _ = bundle_parts
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BundleError, match=r"a directory or a \.tar, \.tar\.gz or \.tgz archive") as info:
        write_bundle(out / name, [record], {artifact.key: artifact})
    assert "x.tar.gz" in str(info.value)
    assert list(out.iterdir()) == []  # no directory named x.zip, no staging left


def test_write_bundle_never_replaces_what_is_not_a_bundle(tmp_path: Path, bundle_parts: Any) -> None:
    _, record, artifact, _ = bundle_parts
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(BundleError, match="not a kiln bundle; kiln would replace it"):
        write_bundle(mine, [record], {artifact.key: artifact})
    assert (mine / "thesis.tex").read_text() == "years of work"
    note = tmp_path / "notes"
    note.write_text("mine")
    with pytest.raises(BundleError, match="exists and is not a directory"):
        write_bundle(note, [record], {artifact.key: artifact})
    assert note.read_text() == "mine"
    bundle = write_bundle(tmp_path / "b", [record], {artifact.key: artifact})
    assert write_bundle(bundle, [record], {artifact.key: artifact}) == bundle  # an old bundle is replaced
    (tmp_path / "empty").mkdir()
    write_bundle(tmp_path / "empty", [record], {artifact.key: artifact})
    assert BundleReader(tmp_path / "empty").manifest.kernels[0].name == "add_kernel"


def _int_cases() -> list[Any]:
    return [1, 16, 17, 0, 2**40, -(2**40), 2**63 + 5]


@pytest.mark.parametrize("n", _int_cases())
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_c_call_key_agrees_with_triton_specialization(
    make_pool: Any, n: int, offset: int, dtype: Any
) -> None:
    """The key kiln computes from real arguments equals the one derived from Triton's request."""
    tuner = kiln.autotune(CONFIGS[:1], key=["n"], target=SM90, database=False)(kernels.axpby_kernel)
    flags = param_flags(tuner.fn.params, tuner.keys)
    base = torch.zeros(64, dtype=dtype)
    x = base[offset:]
    cases = [
        (x, base, n, 3, 0.5, True, 7, False),
        (x, base, 17, n, 2.0, False, n, True),
        (base, x, 1, 16, -1.0, True, None, False),
    ]
    for args in cases:
        request, bound = request_for(tuner.fn, CONFIGS[0], args, {}, SM90)
        spec = LaunchSpec.from_request(request)
        expected = call_key_for(
            LaunchSpec(spec.args[: len(args)]), flags[: len(args)], {"n": bound.args["n"]}, torch_dtype
        )
        got = native().call_key(args, flags[: len(args)])
        assert got == expected, (args, spec)


def test_triton_empty_hook_chain_is_not_a_hook() -> None:
    from triton import knobs

    from triton_kiln.triton_compat import triton_launch_hooks_set as _triton_launch_hooks

    assert not _triton_launch_hooks()

    def hook(*_: Any) -> None:
        return None

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert _triton_launch_hooks()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)

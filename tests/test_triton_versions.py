"""The Triton versions kiln supports: the declared range, and what differs between versions.

CI runs this file under each tested Triton (the main run's 3.7.1, and venvs with 3.6.0 and 3.5.1;
see ``.ci/run`` and docs/TRITON_VERSIONS.md). The stage-hook tests compile real kernels for sm_90
through Triton's own pipeline; the install test resolves kiln with torch 2.13 against the
public index (skipped when PyPI cannot be reached).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import triton

from support import kernels
from support.basics import SM90
from triton_kiln import triton_compat

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_INDEX = "https://pypi.org/simple"


def _triton_requirement() -> Any:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    requirements = pytest.importorskip("packaging.requirements", reason="needs the 'packaging' package")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [requirements.Requirement(dep) for dep in project["dependencies"]]
    triton_reqs = [req for req in found if req.name == "triton"]
    assert len(triton_reqs) == 1, project["dependencies"]
    return triton_reqs[0]


def test_declared_range_covers_every_tested_version_and_the_running_one() -> None:
    req = _triton_requirement()
    for version in triton_compat.SUPPORTED_TRITON:
        assert req.specifier.contains(version), (version, str(req.specifier))
    running = triton.__version__.split("+")[0]
    assert req.specifier.contains(running), f"running Triton {running} is outside {req.specifier}"
    # torch 2.13 from the public index pins triton==3.7.1; the range must admit it.
    assert req.specifier.contains("3.7.1")


def test_version_tuple_reads_local_builds() -> None:
    assert triton_compat.triton_version_tuple() == tuple(
        int(p) for p in triton.__version__.split("+")[0].split(".")[:3]
    )


def _compile_add(block: int) -> Any:
    src = triton_compat.ASTSource(
        kernels.add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": block},
    )
    return triton.compile(src, target=SM90, options={"num_warps": 4})


def test_stage_hook_edits_a_real_compile_and_can_be_removed() -> None:
    calls: list[tuple[int, str]] = []

    def edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
        make_cubin = stages["cubin"]

        def cubin(src: Any, metadata: dict[str, Any]) -> Any:
            calls.append((int(capability), str(metadata.get("name", ""))))
            return make_cubin(src, metadata)

        stages["cubin"] = cubin

    remove = triton_compat.install_stages_hook(edit, "kiln-test-edit")
    try:
        compiled = _compile_add(64)
    finally:
        remove()
    assert calls == [(90, "add_kernel")]
    assert compiled.asm["cubin"][:4] == b"\x7fELF"
    _compile_add(128)  # another variant (no Triton cache hit): the removed edit must not run
    assert calls == [(90, "add_kernel")]


def test_chained_hooks_all_run_in_order() -> None:
    order: list[str] = []

    def edit_for(label: str) -> triton_compat.StagesEditor:
        def edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
            order.append(label)

        return edit

    keyed = triton_compat.stages_hook_is_keyed()
    installed = triton.knobs.runtime.add_stages_inspection_hook if keyed else None
    base_key = installed()[0] if installed is not None else ""  # hooks other modules installed
    remove_first = triton_compat.install_stages_hook(edit_for("first"), "kiln-test-first")
    remove_second = triton_compat.install_stages_hook(edit_for("second"), "kiln-test-second")
    try:
        _compile_add(32)
        if keyed:
            key, digest = triton.knobs.runtime.add_stages_inspection_hook()
            assert key == f"{base_key}kiln-test-firstkiln-test-second"
            assert len(digest) == 64
    finally:
        remove_second()
        remove_first()
    assert order == ["first", "second"]


def test_stage_hook_key_reaches_tritons_cache_key_only_where_triton_asks_for_it() -> None:
    """Triton >= 3.7 folds the hook's key into its cache hash; 3.5 and 3.6 do not."""
    plain = _compile_add(256)

    def edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
        return None

    remove = triton_compat.install_stages_hook(edit, "kiln-test-key")
    try:
        hooked = _compile_add(256)
    finally:
        remove()
    assert (plain.hash != hooked.hash) == triton_compat.stages_hook_is_keyed()
    assert plain.asm["cubin"] == hooked.asm["cubin"]  # the edit changed nothing in the binary


def test_compile_hash_is_tritons_with_a_stage_hook_installed() -> None:
    """kiln puts binaries where Triton's JIT looks (``compile_hash``): on Triton >= 3.7 that
    slot's name includes the installed stage hook's key (tests and the demo install hooks)."""
    src = triton_compat.ASTSource(
        kernels.add_kernel,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 512},
    )
    backend = triton_compat.make_backend(SM90)

    def edit(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
        return None

    remove = triton_compat.install_stages_hook(edit, "kiln-test-slot")
    try:
        assert triton_compat.compile_hash(src, backend, {"num_warps": 4}) == _compile_add(512).hash
    finally:
        remove()
    assert triton_compat.compile_hash(src, backend, {"num_warps": 4}) == _compile_add(512).hash


def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kiln_and_torch_2_13_resolve_from_the_public_index(tmp_path: Path) -> None:
    """A checkout of kiln (its dependencies) with ``torch==2.13.0`` resolves against pypi.org
    alone (no local indexes): ``pip install --dry-run ... <checkout> torch==2.13.0``. kiln comes
    from the checkout, everything else from the index; kiln itself is not on the index.

    ``--isolated`` drops this machine's pip configuration (its local indexes serve a CPU torch
    build), ``--ignore-installed`` stops the installed torch/triton from satisfying the
    resolver, ``--dry-run`` resolves without installing.
    """
    if not _pypi_reachable():
        pytest.skip("pypi.org:443 cannot be reached (offline machine); CI runs this with network")
    report = tmp_path / "report.json"
    cmd = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--isolated", "--ignore-installed",
        "--no-cache-dir", "--quiet", "--index-url", PUBLIC_INDEX, "--report", str(report),
        str(ROOT), "torch==2.13.0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540, check=False)
    assert proc.returncode == 0, f"pip could not resolve:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert "triton-kiln" in chosen, chosen
    assert chosen.get("torch") == "2.13.0", chosen
    assert chosen.get("triton") == "3.7.1", chosen
    urls = [item["download_info"]["url"] for item in json.loads(report.read_text())["install"]]
    assert all(u.startswith(("https://files.pythonhosted.org/", "file://")) for u in urls), urls

"""The conformance corpus's fixed sample (``bench/corpus.py --sample``), on CPU.

A few kernels of every pinned library (``bench/corpus_calls.py``; install them with
``tests/corpus-requirements.txt``) are imported after ``kiln.install()``, compiled by Triton's own
``triton.compile`` and by kiln's ``CompilePool`` for ``GPUTarget("cuda", 90, 32)``, and must give
the same cubin, byte for byte (or fail in Triton itself, which the sample does not pick). A
library that is not installed is skipped with the command that installs it. The whole corpus is
``python bench/corpus.py``; its committed table is checked here too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl

import triton_kiln as kiln

BENCH = Path(__file__).resolve().parents[1] / "bench"
RESULT = BENCH / "results" / "corpus-cpu2.json"
INSTALL = "pip install --no-deps -r tests/corpus-requirements.txt"


if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402 - bench/corpus.py
import corpus_calls as calls  # noqa: E402 - bench/corpus_calls.py


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    libs = [lib for lib in calls.LIBRARIES if corpus.installed_version(lib) is not None]
    if not libs:
        pytest.skip(f"none of the corpus's libraries is installed ({INSTALL})")
    try:
        report: dict[str, Any] = corpus.run_corpus(
            libs, sample=calls.SAMPLE, jobs=2, cache_dir=tmp_path_factory.mktemp("kiln-cache")
        )
    finally:  # the corpus imports the libraries under kiln.install(): give Triton its names back
        kiln.uninstall()
    return report


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("library", [lib.name for lib in calls.LIBRARIES])
def test_sample_compiles_to_tritons_own_binary(sample_report: dict[str, Any], library: str) -> None:
    lib = calls.library(library)
    if corpus.installed_version(lib) is None:
        pytest.skip(f"{library}=={lib.version} is not installed ({INSTALL})")
    rows = {r["kernel"]: r for r in sample_report["rows"] if r["library"] == library}
    assert set(rows) == set(calls.SAMPLE[library]), (
        f"sample kernels not found: {set(calls.SAMPLE[library]) - set(rows)}"
    )
    failures = {name: r.get("kiln_error") for name, r in rows.items() if r["status"] == "kiln_fails"}
    assert not failures, f"kiln's binary is not Triton's: {failures}"
    # The sample is chosen among kernels Triton compiles: each is a real comparison.
    assert all(r["status"] == "identical" for r in rows.values()), {n: r["status"] for n, r in rows.items()}


def test_a_different_binary_or_a_kiln_failure_is_kilns_failure() -> None:
    triton_ok = {"ok": True, "sha256": "a"}
    assert corpus.classify(triton_ok, {"ok": True, "sha256": "a"}) == "identical"
    assert corpus.classify(triton_ok, {"ok": True, "sha256": "b"}) == "kiln_fails"
    assert corpus.classify(triton_ok, {"ok": False, "error": "NameError"}) == "kiln_fails"
    assert corpus.classify({"ok": False, "error": "x"}, {"ok": True, "sha256": "a"}) == "triton_fails"


def test_another_cubin_over_the_same_ptx_counts_only_when_triton_itself_varies() -> None:
    """ptxas is not deterministic for some kernels: then no compile reproduces a cubin, and kiln's
    is its own compile of the same thing only if its PTX is Triton's and Triton's second compile
    gave another cubin too. Anything else stays kiln's failure."""
    triton_ok = {"ok": True, "sha256": "a", "ptx_sha256": "p"}
    kiln_other = {"ok": True, "sha256": "b", "ptx_sha256": "p"}
    assert corpus.unstable_cubin(triton_ok, kiln_other)
    assert (
        corpus.classify(triton_ok, kiln_other, {"ok": True, "sha256": "c", "ptx_sha256": "p"}) == "identical"
    )
    assert (
        corpus.classify(triton_ok, kiln_other, {"ok": True, "sha256": "a", "ptx_sha256": "p"}) == "kiln_fails"
    )
    assert corpus.classify(triton_ok, kiln_other, None) == "kiln_fails"
    other_ptx = {"ok": True, "sha256": "b", "ptx_sha256": "q"}
    assert not corpus.unstable_cubin(triton_ok, other_ptx)
    assert (
        corpus.classify(triton_ok, other_ptx, {"ok": True, "sha256": "c", "ptx_sha256": "p"}) == "kiln_fails"
    )


@triton.jit
def _stores_to(p, n):
    tl.store(p + tl.arange(0, 16), n)


@triton.jit
def _uses_pointers(x_ptr, y, z, n_elements, stride, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * stride + tl.arange(0, BLOCK)
    base = y + offs
    v = tl.load(x_ptr + offs, mask=offs < n_elements) * scale
    tl.store(base, v)
    _stores_to(z, n_elements)


def test_pointers_are_found_from_how_the_body_uses_them() -> None:
    """Loads, stores through an assigned pointer, and a pointer passed on to a JIT helper."""
    assert corpus.pointer_params(_uses_pointers) == {"x_ptr", "y", "z"}
    call = corpus.derive_call(
        corpus.Found("x", "m", "a", "m._uses_pointers", _uses_pointers), calls.Library("x", "0", ("m",))
    )
    assert call.signature == {
        "x_ptr": "*fp32",
        "y": "*fp32",
        "z": "*fp32",
        "n_elements": "i32",
        "stride": "i32",
        "scale": "fp32",
    }
    assert call.constexprs == {"BLOCK": 64}


def test_committed_table_has_every_library_and_no_kiln_failure() -> None:
    report = json.loads(RESULT.read_text())
    names = {x["name"] for x in report["libraries"]}
    assert {"liger-kernel", "fla-core"} <= names
    assert len(names) >= 7
    versions = {x["name"]: x["version"] for x in report["libraries"]}
    assert versions["liger-kernel"] == "0.8.5"
    assert versions["fla-core"] == "0.6.0"
    rows = report["rows"]
    assert report["kernels"] == len(rows)
    for status in ("identical", "triton_fails", "kiln_fails"):
        assert report[status] == sum(r["status"] == status for r in rows)
    assert report["identical"] + report["triton_fails"] + report["kiln_fails"] == report["kernels"]
    assert all(r["triton_error"] for r in rows if r["status"] == "triton_fails")
    assert report["kiln_fails"] == 0, [
        (r["kernel"], r.get("kiln_error")) for r in rows if r["status"] == "kiln_fails"
    ]

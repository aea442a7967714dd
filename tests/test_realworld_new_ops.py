"""``bench/realworld.py``'s ops from the newer libraries, without a GPU.

The bench has ops from the libraries beyond Liger-Kernel and FLA, among them one whose
kernel needs ``triton.set_allocator`` for device-side descriptors (FlagGems' Hopper ``mm``) and
one whose kernels take constexpr defaults named from another module (FLA's DPLR forward). For
each op whose library is installed: every autotuned kernel it launches is, under
``kiln.install()``, kiln's class and compiles through kiln's pool to Triton's own sm_90 binary
(``bench/realworld_compile_check.py``), and ``--dry-run`` imports it with kiln routed. FlagGems'
``LibTuner`` derives from kiln's class and drives its own search from its own ``run``: kiln serves
the ``_bench`` calls of that search (``tests/support/flaggems_libtuner_drive.py`` runs FlagGems' real
``LibTuner.run`` for ``mm_kernel_general``, the GPU stood in for). Every library of the corpus
(``tests/corpus-requirements.txt``) has an op, or a line in ``bench/realworld_ops.py``'s docstring
saying why it has none; every op's row has the fields a complete row needs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import realworld_child  # noqa: E402
import realworld_ops  # noqa: E402

NEW_LIBRARIES = {
    "flag_gems": "flaggems_mm_lmhead",
    "torchao": "torchao_scaled_int8_mm",
    "gemlite": "gemlite_a16w8_gemm",
    "rotary_embedding_torch": "rotary_flash_attn_fwdbwd",
}
LIBRARY_OF = {
    "flaggems_mm_lmhead": "flag_gems",
    "torchao_scaled_int8_mm": "torchao",
    "gemlite_a16w8_gemm": "gemlite",
    "fla_chunk_dplr_fwd": "fla",
    "rotary_flash_attn_fwdbwd": "rotary_embedding_torch",
}


def _needs(op: str) -> None:
    library = LIBRARY_OF[op]
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed")
    if op == "flaggems_mm_lmhead" and importlib.util.find_spec("sqlalchemy") is None:
        pytest.skip("FlagGems needs sqlalchemy")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


_checked: dict[str, list[dict[str, Any]]] = {}


def compile_check(op: str) -> list[dict[str, Any]]:
    """bench/realworld_compile_check.py for one op (one config per kernel), its JSON lines."""
    if op not in _checked:
        proc = subprocess.run(
            [sys.executable, str(BENCH / "realworld_compile_check.py"), "--configs", "1", "--kernels", op],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=600,
            check=False,
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert lines, proc.stderr[-3000:]
        _checked[op] = lines
    return _checked[op]


def test_ops_from_the_new_libraries_with_an_allocator_op_and_an_imported_default_op() -> None:
    modules = {op.name: op.modules for op in realworld_ops.OPS.values()}
    for library, op in NEW_LIBRARIES.items():
        assert op in modules
        assert all(m.split(".")[0] == library for m in modules[op])
    assert "fla_chunk_dplr_fwd" in modules  # prepare_wy_repr_fwd_kernel_chunk64: = IS_GATHER_SUPPORTED
    assert not any(realworld_ops.OPS[op].default for op in [*NEW_LIBRARIES.values(), "fla_chunk_dplr_fwd"])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("op", sorted(LIBRARY_OF))
def test_every_autotuned_kernel_of_the_op_is_kilns_and_compiles_to_tritons_binary(op: str) -> None:
    _needs(op)
    lines = compile_check(op)
    head, kernels = lines[0], lines[1:]
    assert head.get("error") is None, head
    assert head["autotuned_launches"] == len(kernels) >= 1
    for kernel in kernels:
        assert kernel.get("error") is None, kernel
        assert kernel["kiln_class"], kernel
        assert kernel["configs"], kernel
        assert all(c["same_binary_as_triton"] for c in kernel["configs"]), kernel
        assert kernel["ok"], kernel


def test_flaggems_mm_needs_global_scratch_from_the_allocator() -> None:
    _needs("flaggems_mm_lmhead")
    (kernel,) = compile_check("flaggems_mm_lmhead")[1:]
    assert kernel["kernel"].endswith("mm_kernel_general")
    assert all(c["global_scratch_size"] > 0 for c in kernel["configs"])  # device-side descriptors


def test_dplr_binds_the_imported_constexpr_default() -> None:
    _needs("fla_chunk_dplr_fwd")
    kernels = {k["kernel"].rsplit(".", 1)[-1]: k for k in compile_check("fla_chunk_dplr_fwd")[1:]}
    wy = kernels["prepare_wy_repr_fwd_kernel_chunk64"]
    assert all(c["defaults_bound"] == {"GATHER_SUPPORTED": True} for c in wy["configs"])
    assert all(k["tuned_by_kiln"] for k in kernels.values())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_flaggems_libtuner_is_tuned_by_kiln() -> None:
    """FlagGems' own LibTuner.run (its policy, its SQL cache) for mm_kernel_general: every
    ``_bench`` call reaches kiln, all 22 configs were submitted to kiln's pool before the first
    was timed, and FlagGems launches the fastest (by the stand-in's timings)."""
    _needs("flaggems_mm_lmhead")
    (kernel,) = compile_check("flaggems_mm_lmhead")[1:]
    assert kernel["tuned_by_kiln"]
    assert kernel["search"] == "library"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "flaggems_libtuner_drive.py"), "--configs", "22"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=550,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-3000:]
    (drive,) = lines
    assert drive["kiln_class"]
    assert drive["role"] == "library"
    assert drive["configs_declared"] == 22
    assert len(drive["timed"]) == 22  # FlagGems' default policy times every config, through kiln
    assert {t[1] for t in drive["timed"]} == {22}  # all submitted to the pool before the first timing
    assert drive["pool_submitted"] == drive["pool_compiled"] == 22
    assert set(drive["searched"].values()) == {"ok"}
    assert drive["best_config"] == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}
    (launch,) = drive["launched"]
    assert launch["BLOCK_N"] == 256
    assert launch["GROUP_M"] == 8
    assert drive["search_ended"]
    assert (
        "LibTuner drives its own search (flag_gems.utils.libentry.LibTuner.run overrides run)" in proc.stderr
    )
    assert "is routed through kiln's autotuner" not in proc.stderr


def test_the_inventory_tells_a_run_that_bypasses_kiln_from_one_that_calls_it() -> None:
    import triton_kiln as kiln

    class Replaces(kiln.Autotuner):  # type: ignore[misc]
        def run(self, *args: Any, **kwargs: Any) -> Any:
            return self.fn.run(*args, **kwargs)

    class Extends(kiln.Autotuner):  # type: ignore[misc]
        def run(self, *args: Any, **kwargs: Any) -> Any:
            return super().run(*args, **kwargs)

    class Below(Extends):
        pass

    class Searches(kiln.Autotuner):  # type: ignore[misc]
        def run(self, *args: Any, **kwargs: Any) -> Any:
            best = min(self.configs, key=lambda c: self._bench(*args, config=c, **kwargs))
            return self.fn.run(*args, **kwargs, **best.all_kwargs())

    replaced = realworld_child._bypass(object.__new__(Replaces))
    assert replaced is not None
    assert "Replaces.run" in replaced
    assert realworld_child._bypass(object.__new__(Extends)) is None
    assert realworld_child._bypass(object.__new__(Below)) is None
    assert realworld_child._is_kiln(object.__new__(Below))
    assert not realworld_child._is_kiln(object.__new__(Replaces))
    assert not isinstance(object.__new__(Replaces), kiln.Autotuner)  # put back on Triton's class
    assert realworld_child._is_kiln(object.__new__(Searches))  # its _bench is kiln's
    assert realworld_child._search(object.__new__(Searches)) == "library"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dry_run_imports_the_new_ops_with_kiln_routed(tmp_path: Path) -> None:
    ops = [op for op, library in LIBRARY_OF.items() if importlib.util.find_spec(library) is not None]
    if "flaggems_mm_lmhead" in ops and importlib.util.find_spec("sqlalchemy") is None:
        ops.remove("flaggems_mm_lmhead")
    if not ops:
        pytest.skip("none of the libraries is installed")
    out = tmp_path / "dry.json"
    cmd = [sys.executable, str(BENCH / "realworld.py"), "--dry-run", "--arms", "kiln", "--ops", ",".join(ops)]
    proc = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, env=_env(), timeout=850, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in json.loads(out.read_text())["ops"]:
        arm = row["arms"]["kiln"]
        assert row["errors"] == {}, row["errors"]
        assert arm["kiln_install"] == "kiln.install()"
        assert arm["kernels_found_on_kiln"] >= 1
        # FlagGems' LibTuner drives its own search and kiln serves its _bench: nothing bypasses
        assert arm["kernels_found_kiln_class_bypassed"] == []


CORPUS_REQUIREMENTS = ROOT / "tests" / "corpus-requirements.txt"
# the import name of each corpus distribution whose name is not its import name
IMPORT_NAMES = {"fla-core": "fla", "liger-kernel": "liger_kernel"}


def _corpus_distributions() -> list[str]:
    lines = CORPUS_REQUIREMENTS.read_text().splitlines()
    return [line.split("==")[0].strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_corpus_library_has_an_op_or_a_line_saying_why_not() -> None:
    docstring = realworld_ops.__doc__ or ""
    roots = {m.split(".")[0] for op in realworld_ops.OPS.values() for m in op.modules}
    without = docstring[docstring.index("have no op here") :]
    for distribution in _corpus_distributions():
        module = IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))
        if module in roots:
            continue
        assert distribution in without, f"{distribution}: no op in the bench and no line saying why"


def test_the_rotary_op_is_the_corpus_helper_with_autotuned_kernels_and_not_a_default() -> None:
    op = realworld_ops.OPS["rotary_flash_attn_fwdbwd"]
    assert not op.default
    assert op.modules == ("rotary_embedding_torch.flash_attn_with_rotary",)
    assert "D64 fp16" in op.shape
    assert "rotary_embedding_torch" in realworld_child.LIBRARY_PREFIXES  # its autotuners are inventoried


@pytest.mark.timeout(300)
def test_a_dry_run_of_the_rotary_op_routes_both_of_its_autotuners_through_kiln(tmp_path: Path) -> None:
    _needs("rotary_flash_attn_fwdbwd")
    out = tmp_path / "dry.json"
    cmd = [sys.executable, str(BENCH / "realworld.py"), "--dry-run", "--inventory", "--arms", "triton,kiln"]
    cmd += ["--ops", "rotary_flash_attn_fwdbwd", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=280, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["ops"]
    assert row["errors"] == {}, row["errors"]
    assert row["shape"] == realworld_ops.OPS["rotary_flash_attn_fwdbwd"].shape
    module = "rotary_embedding_torch.flash_attn_with_rotary"
    wanted = {f"{module}._flash_rotary_fwd_kernel": 2, f"{module}._flash_rotary_bwd_kernel": 2}
    kiln, triton = row["arms"]["kiln"], row["arms"]["triton"]
    assert kiln["kiln_install"] == "kiln.install()"
    assert {k["name"]: k["configs"] for k in kiln["kernels_inventory"]} == wanted
    assert all(k["kiln"] and k["search"] == "kiln" for k in kiln["kernels_inventory"])
    assert {k["name"]: k["configs"] for k in triton["kernels_inventory"]} == wanted
    assert not any(k["kiln_class"] for k in triton["kernels_inventory"])  # the stock arm stays stock

"""The fault hook of bench/inductor_faults.py, on real Triton compiles for sm_90 (no GPU needed):
installed by ``sitecustomize`` in a fresh interpreter, it aborts the marked compile only, adds
exactly one store to address 0 in ``ima`` mode, does nothing without ``BENCH_FAULT``, and the
parent's bookkeeping (environment, fault log) says where it fired."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl

from support.basics import SM90, is_cubin
from triton_kiln import CompileRequest, WorkerCrashedError

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
BENCH = ROOT / "bench"
HOOK_DIR = BENCH / "inductor_fault_hook"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(HOOK_DIR))

import bench_fault  # noqa: E402  (bench/ is not a package)

import inductor_faults  # noqa: E402

# Compiles, in order, for sm_90: an unmarked kernel, the marked name with other warps, then the
# marked name with the marked warps and stages; prints each compile and writes each cubin.
PROBE = textwrap.dedent(
    """
    import sys
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def triton_mm(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)

    @triton.jit
    def triton_poi_other(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)

    for fn, warps, stages in ((triton_poi_other, 2, 1), (triton_mm, 4, 3), (triton_mm, 2, 1)):
        src = triton.compiler.ASTSource(fn, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 128})
        opts = {"num_warps": warps, "num_stages": stages}
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        name = f"{fn.__name__}-w{warps}-s{stages}"
        open(f"{sys.argv[1]}/{name}.cubin", "wb").write(kernel.asm["cubin"])
        print("compiled", name, flush=True)
    """
)


def _probe(
    tmp_path: Path, fault: str | None, tag: str
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    out = tmp_path / tag
    out.mkdir()
    log = tmp_path / f"{tag}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_FAULT")}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), str(ROOT / "src")])
    env["TRITON_CACHE_DIR"] = str(tmp_path / f"{tag}-cache")
    if fault is not None:
        env.update(
            BENCH_FAULT=fault,
            BENCH_FAULT_NAMES="triton_mm,triton_tem_fused_mm",
            BENCH_FAULT_WARPS="2",
            BENCH_FAULT_STAGES="1",
            BENCH_FAULT_LOG=str(log),
        )
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return proc, out, log


@pytest.mark.timeout(300)
def test_abort_fault_kills_the_marked_compile_only(tmp_path: Path) -> None:
    proc, _out, log = _probe(tmp_path, "abort", "abort")
    assert proc.returncode == -signal.SIGABRT, proc.stderr[-2000:]
    assert "compiled triton_poi_other-w2-s1" in proc.stdout  # same warps, other name: compiled
    assert "compiled triton_mm-w4-s3" in proc.stdout  # same name, other config: compiled
    assert "triton_mm-w2-s1" not in proc.stdout
    assert bench_fault.ASSERTION in proc.stderr
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert (line["kernel"], line["num_warps"], line["num_stages"], line["fault"]) == (
        "triton_mm",
        2,
        1,
        "abort",
    )


def _sass(cubin: Path) -> list[str]:
    """The instructions of a cubin (cuobjdump's SASS, addresses and encodings dropped)."""
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cuobjdump.exists():
        pytest.skip(f"no cuobjdump at {cuobjdump} to read the SASS")
    sass = subprocess.run([str(cuobjdump), "-sass", str(cubin)], capture_output=True, text=True, check=True)
    lines = [
        line.split("*/", 1)[1].split("/*")[0].strip() for line in sass.stdout.splitlines() if "*/" in line
    ]
    return [line for line in lines if line]


def _stores(cubin: Path) -> list[str]:
    return [line for line in _sass(cubin) if line.startswith("STG")]


@pytest.mark.timeout(300)
def test_ima_fault_adds_one_store_to_address_zero(tmp_path: Path) -> None:
    plain, plain_out, _ = _probe(tmp_path, None, "plain")
    faulty, faulty_out, log = _probe(tmp_path, "ima", "ima")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert faulty.returncode == 0, faulty.stderr[-2000:]  # ptxas accepts the patched PTX
    marked = "triton_mm-w2-s1.cubin"
    added = _stores(faulty_out / marked)
    assert len(added) == len(_stores(plain_out / marked)) + 1
    assert any("RZ" in line and "STRONG.SYS" in line for line in added)  # volatile store of zero
    for other in ("triton_mm-w4-s3.cubin", "triton_poi_other-w2-s1.cubin"):
        assert _sass(faulty_out / other) == _sass(plain_out / other)
    assert len(log.read_text().splitlines()) == 1


def test_no_variable_no_hook_and_the_shadowed_sitecustomize_still_runs(tmp_path: Path) -> None:
    shadowed = tmp_path / "shadowed"
    shadowed.mkdir()
    marker = tmp_path / "marker"
    (shadowed / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_FAULT")}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), str(shadowed), str(ROOT / "src")])
    code = "import sys; print('bench_fault' in sys.modules, 'triton' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split() == ["False", "False"], proc.stderr
    assert marker.read_text() == "ran"


def test_add_bad_store_needs_an_entry() -> None:
    with pytest.raises(ValueError, match=r"no \.entry body"):
        bench_fault.add_bad_store(".version 8.4\n.target sm_90\n")
    with pytest.raises(ValueError, match="BENCH_FAULT_NAMES is empty"):
        bench_fault.FaultSpec({"BENCH_FAULT": "abort"})
    spec = bench_fault.FaultSpec({"BENCH_FAULT": "abort", "BENCH_FAULT_NAMES": "triton_red_fused"})
    assert spec.hits("triton_red_fused_sum_0", 8, 1)  # no warps or stages given: any
    assert not spec.hits("triton_poi_fused_0", 8, 1)


def test_case_env_and_fault_log(tmp_path: Path) -> None:
    args = inductor_faults.parse_args(["--cases", "codegen_reduction_abort", "--reduction-warps", "16"])
    case = inductor_faults.CASES["codegen_reduction_abort"]
    env = inductor_faults.case_env(case, args, tmp_path / "caches", tmp_path / "fault.log")
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(HOOK_DIR), str(ROOT / "src")]
    assert (env["BENCH_FAULT"], env["BENCH_FAULT_WARPS"], env["BENCH_FAULT_STAGES"]) == ("abort", "16", "")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "caches" / "inductor")
    log = tmp_path / "fault.log"
    spec = bench_fault.FaultSpec({**env, "BENCH_FAULT_LOG": str(log)})
    spec.record("triton_red_fused_sum_0", 16, 1)
    summary = inductor_faults.fault_summary(log, model_pid=os.getpid())
    assert summary == {
        "fault_fired": 1,
        "in_model_process": 1,
        "in_other_processes": 0,
        "kernels": ["triton_red_fused_sum_0 w16 s1"],
    }
    assert inductor_faults.fault_summary(tmp_path / "absent.log", None)["fault_fired"] == 0


@triton.jit
def triton_mm(x_ptr, BLOCK: tl.constexpr):  # named as Inductor names its mm template choices
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@triton.jit
def triton_poi_probe(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 2.0)


@pytest.mark.timeout(180)
def test_kiln_pool_workers_get_the_hook_from_the_environment(
    make_pool: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The kiln arm's compiles run in kiln's zygote and workers: spawned interpreters that get the
    hook from ``sitecustomize`` through the environment alone, as the fault runs set it."""
    log = tmp_path / "fault.log"
    paths = [str(HOOK_DIR), str(ROOT / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("BENCH_FAULT", "abort")
    monkeypatch.setenv("BENCH_FAULT_NAMES", "triton_mm")
    monkeypatch.setenv("BENCH_FAULT_WARPS", "2")
    monkeypatch.setenv("BENCH_FAULT_LOG", str(log))
    pool = make_pool(workers=2)

    def request(kernel: Any, num_warps: int) -> CompileRequest:
        return CompileRequest(kernel, {"x_ptr": "*fp32"}, {"BLOCK": 128}, {"num_warps": num_warps}, SM90)

    marked = pool.submit(request(triton_mm, 2))
    same_name = pool.submit(request(triton_mm, 4))
    same_warps = pool.submit(request(triton_poi_probe, 2))
    exc = marked.exception(timeout=120)
    assert isinstance(exc, WorkerCrashedError), repr(exc)
    assert exc.signal_name == "SIGABRT"
    assert bench_fault.ASSERTION in str(exc)
    assert is_cubin(same_name.result(timeout=120).binary)
    assert is_cubin(same_warps.result(timeout=120).binary)
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["kernel"] == "triton_mm"
    assert line["pid"] != os.getpid()  # in a worker: nothing compiled here


# In a fresh interpreter on the fault run's environment: start Inductor's own compile pool (the
# stock arm's) and ask one of its workers which faults it installed.
_INDUCTOR_POOL_PROBE = textwrap.dedent(
    """
    import json
    import bench_fault
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    pool = SubprocPool(1)
    try:
        worker = pool.submit(bench_fault.installed).result(timeout=120)
    finally:
        pool.shutdown()
    print(json.dumps({"parent": bench_fault.installed(), "worker": worker}))
    """
)


@pytest.mark.timeout(240)
def test_inductor_compile_workers_get_the_hook(tmp_path: Path) -> None:
    """The stock arm's compiles run in Inductor's ``SubprocPool``: its sidecar and workers get the
    hook too (their ``PYTHONPATH`` is the parent's ``sys.path``, the hook directory first)."""
    pytest.importorskip("torch._inductor.compile_worker.subproc_pool")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_FAULT")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(HOOK_DIR), str(ROOT / "src")]),
        BENCH_FAULT="ima",
        BENCH_FAULT_NAMES="triton_mm",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _INDUCTOR_POOL_PROBE],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"parent": ["ima"], "worker": ["ima"]}

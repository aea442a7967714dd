"""The compile farm without a cluster: Ray stays optional, replies are verified before use."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.basics import add_request
from triton_kiln.errors import ArtifactError, CompileTimeoutError, JobInfo
from triton_kiln.farm import wire

KILN = Path(__file__).resolve().parents[1] / "src" / "triton_kiln"


def test_only_the_farms_ray_module_imports_ray() -> None:
    importers = []
    for path in sorted(KILN.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.append(str(path.relative_to(KILN)))
    assert sorted(set(importers)) == ["farm/ray_api.py"]


def test_kiln_and_its_farm_import_without_ray() -> None:
    code = (
        "import sys\n"
        "import triton_kiln, triton_kiln.cli, triton_kiln.farm\n"
        "from triton_kiln.farm import RayCompilePool\n"
        "from triton_kiln.cli import main\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok", done.stderr


def test_without_ray_the_pool_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton_kiln.farm import RayCompilePool
    from triton_kiln.farm.errors import FarmError

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(FarmError, match=r"pip install 'triton-kiln\[ray\]'"):
        RayCompilePool("127.0.0.1:1")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from triton_kiln import CompilePool

    with CompilePool(workers=1, cache_dir=tmp_path_factory.mktemp("cache")) as pool:
        return pool.compile(add_request(64))


def _reply(artifact: Any, **changes: Any) -> dict[str, Any]:
    reply = wire.artifact_reply(artifact, "node-a")
    reply.update(changes)
    return reply


JOB = JobInfo("add_kernel")


@pytest.mark.timeout(120)
def test_a_verified_reply_is_the_artifact(artifact: Any) -> None:
    back = wire.read_reply(_reply(artifact), artifact.key, JOB)
    assert back == artifact


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("tampered binary", "checksum mismatch"),
        ("truncated binary", "checksum mismatch"),
        ("other key", "is for key"),
        ("metadata without num_warps", "num_warps"),
        ("not a mapping", "not a reply"),
    ],
)
def test_a_bad_reply_is_rejected(artifact: Any, change: str, reason: str) -> None:
    reply: Any
    if change == "tampered binary":
        middle = len(artifact.binary) // 2
        flipped = bytes([artifact.binary[middle] ^ 0xFF])
        reply = _reply(artifact, binary=artifact.binary[:middle] + flipped + artifact.binary[middle + 1 :])
    elif change == "truncated binary":
        reply = _reply(artifact, binary=artifact.binary[: len(artifact.binary) // 2])
    elif change == "other key":
        reply = _reply(artifact, key="0" * 64)
    elif change == "metadata without num_warps":
        metadata = {k: v for k, v in artifact.metadata.items() if k != "num_warps"}
        reply = _reply(artifact, metadata_json=json.dumps(metadata).encode())
    else:
        reply = [artifact.binary]
    back = wire.read_reply(reply, artifact.key, JOB)
    assert isinstance(back, ArtifactError), back
    assert reason in str(back)


def test_an_error_reply_is_kilns_typed_error_about_the_callers_job() -> None:
    # The node knew the job as its sealed request describes it (odd values as their reprs); the
    # caller's error describes the caller's own request.
    told = JobInfo("k", (("BLOCK", "Odd(64)"),))
    exc = CompileTimeoutError(told, 4.2, (), -9, detail="the limit is 4 s")
    mine = JobInfo("k", (("BLOCK", 64),))
    back = wire.read_reply(wire.error_reply(exc, 4.2, "node-a"), "0" * 64, mine)
    assert isinstance(back, CompileTimeoutError)
    assert str(back) == str(CompileTimeoutError(mine, 4.2, (), -9, detail="the limit is 4 s"))
    assert back.job == mine
    assert back.returncode == -9


@pytest.mark.timeout(120)
def test_a_sealed_request_is_opened_only_in_a_kiln_worker(tmp_path: Path) -> None:
    # What the node actor does with a request: its constexpr segfaults whoever unpickles it, so
    # were it unpickled in this process, this test's process would die.
    from support import faults
    from support.basics import SM90
    from triton_kiln import CompilePool, CompileRequest, WorkerCrashedError
    from triton_kiln.pool.sealed import SealedRequest

    request = CompileRequest(
        faults.slow_kernel, {"x_ptr": "*fp32"}, {"BLOCK": faults.Detonator("segv")}, target=SM90
    )
    sealed = SealedRequest.of(request)
    assert sealed.key == request.key
    assert sealed.job.constexprs == (("BLOCK", "Detonator('segv')"),)  # plain data only
    assert sealed.module is None  # the kernel travels as source
    with CompilePool(workers=1, cache_dir=tmp_path / "cache") as pool:
        exc = pool.submit(sealed).exception(timeout=100)
        assert isinstance(exc, WorkerCrashedError), repr(exc)
        assert exc.signal_name == "SIGSEGV"
        again = SealedRequest.of(add_request(128))
        assert pool.submit(again).result(timeout=100).key == again.key
        assert pool.submit(again).result().key == again.key  # a memory hit, as for a request
        assert pool.stats.memory_hits == 1

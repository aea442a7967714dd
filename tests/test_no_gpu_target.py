"""``@kiln.autotune(..., target=...)`` called where no GPU of that kind is: a kiln error that says
to compile instead (``triton_kiln.precompile``, ``kiln compile``), raised before any run is
recorded; compiling for the target still works there. Real decorated kernels, real tuning
databases, torch's CPU tensors, no stand-in bencher."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import triton

import triton_kiln as kiln
from support.kernels import scale_kernel
from triton_kiln import triton_compat
from triton_kiln.tuning import TuningDatabase

torch = pytest.importorskip("torch")

CONFIGS = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]
LOCAL = triton_compat.local_target()


def other_kind() -> str:
    """A target this machine has no GPU for: cuda:90 with no GPU, else another backend's."""
    if LOCAL is None:
        return "cuda:90"
    return "hip:gfx942" if LOCAL.backend == "cuda" else "cuda:90"


def decorated(tmp_path: Path, target: str, pool: kiln.CompilePool | None = None) -> kiln.Autotuner:
    database = str(tmp_path / "tuning.db")
    return kiln.autotune(configs=CONFIGS, key=["n"], target=target, database=database, pool=pool)(
        scale_kernel
    )


@pytest.mark.parametrize("call", ["launch", "run"])
def test_a_call_with_no_gpu_for_the_target_raises_and_records_nothing(tmp_path: Path, call: str) -> None:
    target = other_kind()
    kernel = decorated(tmp_path, target)
    x, out = torch.ones(256), torch.empty(256)
    launch = kernel[(1,)] if call == "launch" else partial(kernel.run, grid=(1,))
    with pytest.raises(kiln.NoGPUError) as caught:
        launch(x, out, 256)
    message = str(caught.value)
    assert f"target='{target}'" in message, message
    assert "triton_kiln.precompile(scale_kernel" in message, message
    assert f"kiln compile MODULE:scale_kernel --target {target}" in message, message
    assert "nothing was tuned or recorded" in message, message
    assert isinstance(caught.value, kiln.TargetError)  # what a missing target raises too
    with TuningDatabase(tmp_path / "tuning.db") as db:
        assert db.runs() == []  # no unfinished run for `kiln report` to show
    assert kernel.cache == {}


def test_a_single_config_kernel_with_no_gpu_for_the_target_raises_kilns_error(tmp_path: Path) -> None:
    """One config is launched without tuning (as Triton does): the launch needs the GPU, and says so
    in kiln's words rather than the driver's."""
    target = other_kind()
    database = str(tmp_path / "tuning.db")
    kernel = kiln.autotune(configs=CONFIGS[:1], key=["n"], target=target, database=database)(scale_kernel)
    x, out = torch.ones(256), torch.empty(256)
    with pytest.raises(kiln.NoGPUError) as caught:
        kernel[(1,)](x, out, 256)
    message = str(caught.value)
    assert f"target='{target}'" in message, message
    assert "launches its one config" in message, message
    assert "triton_kiln.precompile(scale_kernel" in message, message


def test_precompile_for_the_target_works_where_tuning_cannot(
    tmp_path: Path, make_pool: Callable[..., kiln.CompilePool]
) -> None:
    if LOCAL is not None:
        pytest.skip("this machine has a GPU: the case is a machine without one")
    kernel = decorated(tmp_path, "cuda:90", pool=make_pool())
    futures = kiln.precompile(kernel, torch.float32, torch.float32, 256)
    artifacts = [f.result(timeout=300) for f in futures]
    assert [(a.name, a.binary_ext) for a in artifacts] == [("scale_kernel", "cubin")] * 2

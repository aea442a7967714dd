"""bench/inductor_models.py's model families on the CPU: the ``transformers`` causal LM and the
``timm`` vision transformer build at their test size and run a forward in fp32, the same in every
process, with a float64 reference; without their libraries the build says which wheels to carry;
``bench/inductor.py`` takes them as models.

The forward tests skip where ``transformers`` or ``timm`` (and what their import needs; timm needs
torchvision) are not installed: they are not in requirements-dev.txt (``pip install --no-deps -r
bench/inductor-models-requirements.txt`` brings them)."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import inductor  # noqa: E402  (bench/ is not a package)
import inductor_models  # noqa: E402

torch = pytest.importorskip("torch")

FAMILIES = {"causal_lm": "transformers", "vit": "timm"}


def _build_small(name: str, batch: int = 2) -> tuple[Any, tuple[Any, ...]]:
    try:
        return inductor_models.build(name, "cpu", batch, small=True)
    except inductor_models.ModelPackagesMissing as exc:
        pytest.skip(f"{FAMILIES[name]} cannot be imported here: {exc.detail}")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_builds_small_and_runs_a_forward_in_fp32(name: str) -> None:
    model, inputs = _build_small(name)
    assert not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        out = model(*inputs)
    assert torch.is_tensor(out)  # one tensor: what the bench saves and compares
    assert out.dtype == torch.float32
    assert bool(torch.isfinite(out).all())
    if name == "causal_lm":
        shape = inductor_models.CAUSAL_LM_SMALL
        (ids,) = inputs
        assert ids.dtype == torch.int64
        assert tuple(ids.shape) == (2, shape["seq"])
        assert tuple(out.shape) == (2, shape["seq"], shape["vocab"])
        config = model.lm.config
        assert config._attn_implementation == "sdpa"
        assert config.use_cache is False
        assert config.num_hidden_layers == shape["layers"]
    else:
        assert tuple(out.shape) == (2, inductor_models.VIT_SMALL["classes"])


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_the_same_in_every_build_and_has_a_float64_reference(name: str) -> None:
    model, inputs = _build_small(name)
    again, inputs_again = _build_small(name)
    for a, b in zip(inputs, inputs_again, strict=True):
        assert torch.equal(a, b)
    with torch.no_grad():
        out, out_again = model(*inputs), again(*inputs_again)
    assert torch.equal(out, out_again)  # seeded weights and inputs
    ref = inductor_models.fp64_reference(model, inputs)
    assert ref.dtype == torch.float64
    assert ref.shape == out.shape
    assert torch.allclose(ref, out.double(), atol=1e-4, rtol=1e-4)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the reference ran on a copy


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_missing_library_names_the_wheels_to_carry(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    package = FAMILIES[name]
    monkeypatch.setitem(sys.modules, package, None)  # its import fails, installed or not
    with pytest.raises(inductor_models.ModelPackagesMissing) as caught:
        inductor_models.build(name, "cpu", 1, small=True)
    message = str(caught.value)
    assert f"the {name} model needs {package}" in message
    assert inductor_models.MODEL_REQUIREMENTS in message
    assert ".whl_libs/" in message
    assert (ROOT / inductor_models.MODEL_REQUIREMENTS).exists()
    copy = pickle.loads(pickle.dumps(caught.value))  # crosses a process boundary whole
    assert str(copy) == message


def test_the_requirements_pin_every_wheel_and_the_libraries_first() -> None:
    lines = (ROOT / inductor_models.MODEL_REQUIREMENTS).read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
    assert all("==" in pin for pin in pins), pins  # --no-deps downloads: every wheel named, pinned
    names = [pin.split("==")[0].lower().replace("_", "-") for pin in pins]
    assert len(names) == len(set(names))  # one version of each: two stop the install
    assert {"transformers", "timm", "huggingface-hub", "safetensors", "tokenizers"} <= set(names)
    assert not {"torch", "torchvision", "numpy"} & set(names)  # the GPU machine's own


def test_the_full_sizes_are_consistent() -> None:
    lm = inductor_models.CAUSAL_LM_SHAPE
    assert lm["hidden"] % lm["heads"] == 0
    assert lm["heads"] % lm["kv_heads"] == 0
    assert inductor_models.default_batch("causal_lm") == lm["batch"]
    assert inductor_models.default_batch("vit") == inductor_models.VIT_SHAPE["batch"]
    assert inductor_models.VIT_SHAPE["name"] == "vit_base_patch16_224"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_bench_inductor_takes_each_family(name: str, tmp_path: Path) -> None:
    args = inductor.parse_args(["--model", name, "--mode", "max-autotune-no-cudagraphs", "--runs", "1"])
    assert args.models == [name]
    assert args.modes == ["max-autotune-no-cudagraphs"]
    assert name in inductor_models.MODELS  # the child's --model choices
    cmd = inductor.child_command("kiln", "cold", name, args.modes[0], tmp_path, args, iters=1)
    assert cmd[cmd.index("--model") + 1] == name
    assert name in inductor.parse_args([]).models  # --model all runs it
    assert {"transformers", "timm"} <= set(inductor.meta(args))  # versions in the result's meta

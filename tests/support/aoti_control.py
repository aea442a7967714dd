"""The model kiln's AOTInductor tests package (tests/test_inductor_gpu.py), and the control of
those tests: the same model packaged, loaded and run by stock AOTInductor, kiln not installed,
in a process of its own; exit status 0 when its output matches eager's.

``python -m support.aoti_control DIR`` (the package is written under DIR; needs a CUDA GPU)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch


class Block(torch.nn.Module):
    """A transformer-like block: layernorm, attention-ish softmax, MLP (Triton-generated kernels)."""

    def __init__(self, d: int = 256) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x: Any) -> Any:
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 16.0, dim=-1)
        x = x + att @ v
        return x + self.mlp(torch.relu(x) * 2 + 1)


def package_and_check(directory: Path) -> None:
    """Export :class:`Block`, package it with ``aoti_compile_and_package`` under ``directory``,
    load the package and check its output against eager's."""
    model = Block().cuda().eval()
    x = torch.randn(4, 64, 256, device="cuda")
    with torch.no_grad():
        program = torch.export.export(model, (x,))
        path = torch._inductor.aoti_compile_and_package(program, package_path=str(directory / "block.pt2"))
        got = torch._inductor.aoti_load_package(path)(x)
        torch.testing.assert_close(got, model(x), atol=1e-3, rtol=1e-3)


if __name__ == "__main__":
    torch.manual_seed(0)
    package_and_check(Path(sys.argv[1]))

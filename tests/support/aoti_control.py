"""Stock AOTInductor, kiln not installed, in a process of its own: the control of kiln's
AOTInductor tests (tests/test_inductor_gpu.py). A small block is exported, packaged, loaded and
run; exit status 0 when its output matches eager's.

``python -m support.aoti_control DIR`` (the package is written under DIR; needs a CUDA GPU)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(directory: Path) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.LayerNorm(256), torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    model = model.cuda().eval()
    x = torch.randn(4, 64, 256, device="cuda")
    with torch.no_grad():
        program = torch.export.export(model, (x,))
        path = torch._inductor.aoti_compile_and_package(program, package_path=str(directory / "control.pt2"))
        got = torch._inductor.aoti_load_package(path)(x)
        torch.testing.assert_close(got, model(x), atol=1e-3, rtol=1e-3)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

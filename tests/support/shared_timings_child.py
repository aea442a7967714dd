"""One process of ``tests/test_inductor_shared_timings.py``: ``torch.compile`` of a small MLP in
max-autotune on the CPU (Inductor's C++ GEMM template: its choices are timed, as a GPU's Triton
template choices are) with ``triton_kiln.inductor`` installed, on the caches and remote cache its
environment names. Prints one JSON line: Inductor's autotune counter, kiln's shared-timings
counts, and a checksum of the output."""

from __future__ import annotations

import json

import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks


def main() -> None:
    inductor_config.freezing = True
    inductor_config.max_autotune_gemm_backends = "CPP,ATEN"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).eval()
    x = torch.randn(64, 256)
    kiln_inductor.install()
    try:
        with torch.no_grad():
            out = torch.compile(model, mode="max-autotune-no-cudagraphs")(x)
        shared = inductor_hooks.current_shared_timings()
        report = {
            "autotunes": counters["inductor"]["select_algorithm_autotune"],
            "shared": None
            if shared is None
            else {"from_remote": shared.stats.from_remote, "timed": shared.stats.timed},
            "published": None if shared is None else shared.remote.published,
            "error": float((out - model(x)).abs().max()),
        }
    finally:
        kiln_inductor.uninstall()
    print(json.dumps(report))


if __name__ == "__main__":
    main()

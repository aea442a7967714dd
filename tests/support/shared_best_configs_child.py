"""One process of ``tests/test_inductor_shared_best_configs.py``: with ``triton_kiln.inductor``
installed on the caches and remote cache its environment names, loads the pointwise fixture's
kernel as Inductor loads a generated kernel (its ``inductor_meta`` as Inductor wrote it, the
remote autotune cache unset), once per backend hash given in the first argument (a comma-separated
list; a hash stands for a GPU with its CUDA toolchain and Triton), and, with ``save`` as the second
argument, saves the first load's last config as Inductor does when the kernel's autotune ends.
Prints one JSON line: the configs each load kept and kiln's counts."""

from __future__ import annotations

import json
import sys

import torch._inductor.config as inductor_config
from torch._inductor.codecache import PyCodeCache
from torch._inductor.runtime import triton_helpers

import triton_kiln.inductor as kiln_inductor
import triton_kiln.inductor.hooks as inductor_hooks
from support.inductor_support import source

# the pointwise fixture's own backend hash
FIXTURE_HASH = "B91C4F1B0CA9D0C0F2A1E2D8B7E6D9D7A3F1E0C2B4A5968778695A4B3C2D1E0F"


def main() -> None:
    hashes, save = sys.argv[1].split(","), sys.argv[2:] == ["save"]
    triton_helpers.set_driver_to_gpu = lambda: None  # no GPU here: every compile targets sm_90
    kiln_inductor.install(sidecar=False)
    try:
        name, text = source("pointwise")
        assert "'autotune_remote_cache': None" in text
        kept: list[list[str]] = []
        for backend_hash in hashes:
            kernel = getattr(PyCodeCache.load(text.replace(FIXTURE_HASH, backend_hash)), name)
            kept.append([str(config) for config in kernel.configs])
            if save and len(kept) == 1:
                kernel.save_cache_hook(kernel.configs[-1], 3_000_000)  # as autotune_to_one_config does
        shared = inductor_hooks.current_shared_best_configs()
        report = {
            "setting": inductor_config.autotune_remote_cache,
            "configs": kept,
            "saved": kept[0][-1] if save else None,
            "shared": None if shared is None else vars(shared.stats),
        }
    finally:
        kiln_inductor.uninstall()
    print(json.dumps(report))


if __name__ == "__main__":
    main()

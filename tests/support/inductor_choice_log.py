"""A fresh process for tests/test_inductor_choices_gpu.py: one max-autotune compile of a small
bf16 MLP, stock Inductor or with ``triton_kiln.inductor.install()``, every template autotune's
choices and Inductor's counters written as JSON.

``python -m support.inductor_choice_log ARM OUT [cached]`` (ARM ``stock`` or ``kiln``), caches
from the environment (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``, ``KILN_CACHE_DIR``).
Inductor's caches are off unless ``cached`` is given; with it, a second process on the same
directories is a warm process, and the JSON adds Inductor's cache counters (FX graph and
AOTAutograd hits, misses and bypasses).

Stock Inductor runs as it does before its process pool has warmed up
(``_stock_before_its_pool_warms_up``). Each autotune's timings are replaced, after Inductor
measured them, by a value that depends only on the choice (its kind, template and description),
so both arms choose by the same timings and any difference in what they consider, drop or
choose is the arms', not the GPU's noise. A choice whose compile or benchmark failed keeps its
infinite timing.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from typing import Any


def choice_key(choice: Any) -> str:
    """What names a choice in both processes: its class, its name without Inductor's running
    number, and its description (the template's block sizes, warps and stages)."""
    name = re.sub(r"_\d+$", "", str(getattr(choice, "name", "")))
    return f"{type(choice).__name__}|{name}|{getattr(choice, 'description', '')}"


def fixed_timing(key: str) -> float:
    return 1.0 + int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100_000 / 100_000


def _stock_before_its_pool_warms_up() -> None:
    """Stock Inductor hands template choices to its process pool only once the pool has warmed
    up, and until then runs each choice's own ``precompile()`` in a thread (a choice that cannot
    load fails there). Which of the two a stock autotune takes depends on when its pool got
    ready; this pins the second, the one a process's first autotunes meet, so the comparison
    does not depend on that timing."""
    import threading

    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    handing_out = threading.local()
    make_precompile_fn = AlgorithmSelectorCache.make_precompile_fn
    use_process_pool = AsyncCompile.__dict__["use_process_pool"].__func__

    def pinned_make_precompile_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        handing_out.active = True
        try:
            return make_precompile_fn(self, *args, **kwargs)
        finally:
            handing_out.active = False

    def pinned_use_process_pool(cls: Any) -> bool:
        return False if getattr(handing_out, "active", False) else bool(use_process_pool(cls))

    AlgorithmSelectorCache.make_precompile_fn = pinned_make_precompile_fn  # type: ignore[method-assign]
    AsyncCompile.use_process_pool = classmethod(pinned_use_process_pool)  # type: ignore[method-assign,assignment]


def main(arm: str, out: str, cached: bool = False) -> None:
    import torch
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    if arm == "kiln":
        import triton_kiln.inductor

        triton_kiln.inductor.install()
    else:
        _stock_before_its_pool_warms_up()
    autotunes: list[dict[str, Any]] = []
    measured = AlgorithmSelectorCache.benchmark

    def benchmark(self: Any, choices: Any, *args: Any, **kwargs: Any) -> Any:
        timings = measured(self, choices, *args, **kwargs)
        fixed = {c: (t if not math.isfinite(t) else fixed_timing(choice_key(c))) for c, t in timings.items()}
        finite = {choice_key(c): t for c, t in fixed.items() if math.isfinite(t)}
        autotunes.append(
            {
                "considered": sorted(choice_key(c) for c in choices),
                "failed": sorted(choice_key(c) for c, t in fixed.items() if not math.isfinite(t)),
                "chosen": min(finite, key=lambda k: finite[k]) if finite else None,
            }
        )
        return fixed

    AlgorithmSelectorCache.benchmark = benchmark  # type: ignore[method-assign]
    inductor_config.force_disable_caches = not cached
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2816, bias=False),
        torch.nn.SiLU(),
        torch.nn.Linear(2816, 1024),
    ).to(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        y = torch.compile(model, mode="max-autotune-no-cudagraphs")(x)
        err = (y.float() - model(x).float()).abs().max().item()
    kept = (
        "select_algorithm_autotune",
        "select_algorithm_precompile",
        "select_algorithm_num_precompiles",
        "select_algorithm_num_precompilation_exceptions",
    )
    with open(out, "w") as f:
        json.dump(
            {
                "arm": arm,
                "counters": {k: counters["inductor"][k] for k in kept},
                "cache_counters": {
                    k: v for k, v in counters["inductor"].items() if "cache" in k or "autograd" in k
                }
                | {k: v for k, v in counters["aot_autograd"].items() if "cache" in k},
                "autotunes": sorted(autotunes, key=lambda a: a["considered"]),
                "max_abs_error": err,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], cached=sys.argv[3:] == ["cached"])

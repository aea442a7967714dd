"""kiln inside Helion on a GPU: a full Helion autotune with one config aborting in Triton's
compiler finishes through kiln and picks a healthy config; an aborting reference config is a
clean error. (``bench/helion_autotune.py`` shows the same runs against Helion's fork precompile.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")

import test_helion_kernels as hk
import triton_kiln as kiln
import triton_kiln.helion
from support import helion_faults
from triton_kiln import CompilePool
from triton_kiln.helion.errors import BaselineCompileError

pytestmark = pytest.mark.gpu


def _cuda_args(name: str) -> tuple[object, ...]:
    return tuple(t.cuda() for t in hk.inputs(name, scale=2))


def test_autotune_through_kiln_skips_an_aborting_config(make_pool: Callable[..., CompilePool]) -> None:
    pool = make_pool(workers=8, preload=[helion_faults.PRELOAD])
    previous = kiln.helion.configure(pool=pool)
    try:
        args = _cuda_args("crashy_add")
        settings = {
            "autotuner_fn": kiln.helion.autotuner_fn,
            "autotune_effort": "quick",
            "autotune_max_generations": 1,
            "autotune_random_seed": 5,
            "autotune_progress_bar": False,
        }
        crash = hk.make("crashy_add", **settings).bind(args).config_spec.default_config()
        crash.config["num_warps"] = helion_faults.ABORT_NUM_WARPS
        bound = hk.make("crashy_add", autotune_seed_configs=[crash], **settings).bind(args)
        config = bound.autotune(args, force=True)
        assert config.config["num_warps"] != helion_faults.ABORT_NUM_WARPS
        assert pool.stats.worker_deaths >= 1  # the seeded config really aborted, in a worker
        out = bound(*args)
        assert float((out.float() - hk.eager("add")(*args).float()).abs().max()) < 1e-2
    finally:
        kiln.helion.configure(pool=previous.pool, target=previous.target)


def test_aborting_baseline_is_a_clean_error(make_pool: Callable[..., CompilePool]) -> None:
    pool = make_pool(workers=4, preload=[helion_faults.PRELOAD])
    previous = kiln.helion.configure(pool=pool)
    try:
        args = _cuda_args("crashall_add")
        bound = hk.make("crashall_add", autotuner_fn=kiln.helion.autotuner_fn, autotune_effort="quick").bind(
            args
        )
        with pytest.raises(BaselineCompileError, match="SIGABRT"):
            bound.autotune(args, force=True)
    finally:
        kiln.helion.configure(pool=previous.pool, target=previous.target)

"""kiln inside Helion on a GPU: a full Helion autotune with one config aborting in Triton's
compiler finishes through kiln and picks a healthy config; an aborting reference config is a
clean error; through kiln's loop (benchmarks in kiln's sandbox, streamed) a config that aborts in
the compiler, one that makes an illegal memory access and one that hangs are each skipped with
its reason in one autotune, and this process's CUDA context stays alive; the loop picks a config
whose runtime is close to the one Helion's own fork mode picks. (``bench/helion_autotune.py``
shows the same runs against Helion's fork and spawn modes.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")

import test_helion_kernels as hk
import triton_kiln as kiln
import triton_kiln.helion
from support import helion_faults
from triton_kiln import CompilePool
from triton_kiln.helion.errors import BaselineCompileError
from triton_kiln.helion.sandbox_jobs import make_sandbox, warm_up
from triton_kiln.sandbox.call_client import CallSandbox, spawned_alive
from triton_kiln.sandbox.call_messages import CallOutcome

pytestmark = pytest.mark.gpu


def _cuda_args(name: str) -> tuple[object, ...]:
    return tuple(t.cuda() for t in hk.inputs(name, scale=2))


def test_autotune_through_kiln_skips_an_aborting_config(make_pool: Callable[..., CompilePool]) -> None:
    """kiln's compiles with Helion's own benchmark worker (``KILN_HELION_SANDBOX=0``; the loop's
    faults are the next tests')."""
    from triton_kiln import settings as kiln_settings

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
        with kiln_settings.scope(helion_sandbox=False):
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


class RecordingSandbox(CallSandbox):
    """kiln's benchmark sandbox for Helion, keeping each failed call's reason."""

    def __init__(self) -> None:
        super().__init__(timeout_s=make_sandbox().timeout_s, warmup=warm_up)
        self.failures: list[str] = []

    def call(self, fn: Callable[[], Any], **kwargs: Any) -> CallOutcome:
        outcome = super().call(fn, **kwargs)
        if outcome.failure is not None:
            self.failures.append(str(outcome.failure))
        return outcome


@pytest.fixture
def kilns_loop() -> Iterator[None]:
    """kiln's loop on (``KILN_HELION_SANDBOX``): Helion's benchmark jobs in kiln's sandbox."""
    from triton_kiln import settings as kiln_settings

    with kiln_settings.scope(helion_sandbox=True):
        yield


def _context_alive() -> None:
    import torch

    torch.cuda.synchronize()
    assert torch.ones(4, device="cuda").add_(1).sum().item() == 8.0


def test_kilns_loop_skips_an_abort_an_illegal_memory_access_and_a_hang(
    make_pool: Callable[..., CompilePool], kilns_loop: None
) -> None:
    pool = make_pool(workers=8, preload=[helion_faults.PRELOAD])
    sandbox = RecordingSandbox()
    previous = kiln.helion.configure(pool=pool, sandbox=sandbox)
    try:
        args = _cuda_args("faulty_add")
        settings: dict[str, Any] = {
            "autotuner_fn": kiln.helion.autotuner_fn,
            "autotune_effort": "quick",
            "autotune_max_generations": 1,
            "autotune_random_seed": 5,
            "autotune_progress_bar": False,
            "autotune_benchmark_timeout": 10,
        }
        seeds = []
        for warps, stages in helion_faults.FAULTY_CONFIGS:
            seed = hk.make("faulty_add", **settings).bind(args).config_spec.default_config()
            seed.config.update(num_warps=warps, num_stages=stages)
            seeds.append(seed)
        bound = hk.make("faulty_add", autotune_seed_configs=seeds, **settings).bind(args)
        config = bound.autotune(args, force=True)
        picked = (config.config["num_warps"], config.config.get("num_stages"))
        assert picked not in helion_faults.FAULTY_CONFIGS
        assert pool.stats.worker_deaths >= 1  # the abort config died in a compile worker
        reasons = "\n".join(sandbox.failures)
        assert "illegal memory access" in reasons, reasons  # the IMA config, in the sandbox
        assert "did not finish in time" in reasons, reasons  # the hang, killed after its timeout
        assert sandbox.restarts >= 2  # each replaced; this process never ran them
        _context_alive()
        out = bound(*args)
        assert float((out.float() - hk.eager("add")(*args).float()).abs().max()) < 1e-2
        _context_alive()
    finally:
        kiln.helion.configure(pool=previous.pool, target=previous.target, sandbox=previous.sandbox)
        sandbox.close()
        assert spawned_alive(sandbox.spawned_pids) == []


def _tuned_output_error(name: str, settings: dict[str, Any]) -> float:
    """Tune ``name`` with ``settings``, run the picked config, and return its largest difference
    from eager PyTorch's output, relative to the output's largest magnitude."""
    args = _cuda_args(name)
    bound = hk.make(name, **settings).bind(args)
    bound.autotune(args, force=True)
    out, expected = bound(*args).float(), hk.eager(name)(*args).float()
    return float((out - expected).abs().max() / expected.abs().max().clamp_min(1e-6))


# How fast the picked configs run, kiln's loop against Helion's fork mode and its own final
# verification, is measured side by side by bench/helion_autotune.py (medians over repeats);
# one timed run per arm here would only test the GPU's noise.
@pytest.mark.parametrize("name", ["softmax", "matmul"])
def test_kilns_loop_tunes_to_a_config_whose_output_matches_eager(
    make_pool: Callable[..., CompilePool], name: str, kilns_loop: None
) -> None:
    settings: dict[str, Any] = {
        "autotuner_fn": kiln.helion.autotuner_fn,
        "autotune_effort": "quick",
        "autotune_max_generations": 1,
        "autotune_random_seed": 11,
        "autotune_progress_bar": False,
    }
    previous = kiln.helion.configure(pool=make_pool(workers=8))
    try:
        error = _tuned_output_error(name, settings)
    finally:
        kiln.helion.configure(pool=previous.pool, target=previous.target, sandbox=previous.sandbox)
    assert error < 1e-2, (name, error)
    _context_alive()


def test_kilns_final_round_verifies_the_finalists_only_where_asked(
    make_pool: Callable[..., CompilePool], monkeypatch: pytest.MonkeyPatch, kilns_loop: None
) -> None:
    """The same search through kiln's loop (effort quick: Helion's final verification, no final
    selection), verified by Helion's own interleaved windows, then by kiln's final round
    (``KILN_HELION_FINAL_ROUND``) with kiln's screening of the search's timings
    (``KILN_HELION_SCREEN_MS``, as the bench's kiln-screen arm); each pick's output matches
    eager PyTorch's."""
    from triton_kiln import settings as kiln_settings
    from triton_kiln.helion import compat, finalists

    settings: dict[str, Any] = {
        "autotuner_fn": kiln.helion.autotuner_fn,
        "autotune_effort": "quick",
        "autotune_max_generations": 1,
        "autotune_random_seed": 11,
        "autotune_progress_bar": False,
    }
    races: list[bool] = []
    race = finalists.race

    def counted(*args: Any, **kwargs: Any) -> bool:
        races.append(race(*args, **kwargs))
        return races[-1]

    windows: list[int] = []  # the screened search timings' windows (ms)
    screened = compat.screened

    def seen(job: Any, rep_ms: int) -> Any:
        short = screened(job, rep_ms)
        if short is not None:
            windows.append(short.rep)
        return short

    monkeypatch.setattr(finalists, "race", counted)
    monkeypatch.setattr(compat, "screened", seen)
    previous = kiln.helion.configure(pool=make_pool(workers=8))
    try:
        with kiln_settings.scope(helion_final_round=False):
            helions_error = _tuned_output_error("softmax", settings)
        assert races == []  # the round off: Helion's own final verification and windows
        assert windows == []
        with kiln_settings.scope(helion_final_round=True, helion_screen_ms=10):
            kilns_error = _tuned_output_error("softmax", settings)
    finally:
        kiln.helion.configure(pool=previous.pool, target=previous.target, sandbox=previous.sandbox)
    assert races == [True]  # kiln's final round verified the finalists
    assert set(windows) == {10}  # the search's streamed timings were screened, and some were
    assert helions_error < 1e-2, helions_error
    assert kilns_error < 1e-2, kilns_error
    _context_alive()

"""What a tuning run is given: its plan (what to tune and how) and its services (what it may use).

The :class:`~triton_kiln.autotuner.Autotuner` builds both once, when it is made, and hands them
to every part that works for it; no part reads the autotuner's own attributes::

    Autotuner.__init__ --> TuningPlan   configs' owner's names, key, checks, timing lengths, switches
                       --> Services     pool, database, target, device, bencher, candidate builder,
                                        the kernel's autotuner as triton.autotune defines it
          |
          v
    session.py (one run) -> bench.py, screening.py, final_round.py, node_share.py, node_tuning.py
    library_search.py (a library's own search) -> bench.py, screening.py
    launch_tables.py (what was launched)

A plan is data and never changes. A service is a callable where its answer can change between
runs (the process-wide pool, a database chosen by the settings, the GPU found on first need, a
test's stand-in for the GPU). :class:`TunedKernel` names the few public attributes of Triton's
``Autotuner`` a run reads (hooks, ``do_bench``, the call in progress) and fills (``cache``,
``configs_timings``, ``last_run``...), as Helion's ``_AutotunableKernel`` names what a search
needs from a kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from triton_kiln.artifacts.artifact import CompiledArtifact
    from triton_kiln.autotuner.compile_requests import Candidate
    from triton_kiln.pool import CompilePool
    from triton_kiln.settings import Settings
    from triton_kiln.triton_compat import GPUTarget


@dataclass(frozen=True)
class Timing:
    """How long configs are timed (docs/TIMING.md).

    ``warmup_ms``/``rep_ms``: do_bench's lengths (Triton's deprecated ``warmup``/``rep`` when
    given, ``lengths_given``); ``screen_ms``: the rough first pass that picks contenders. The
    final round takes the screened configs within ``final_margin`` of the fastest (between
    ``final_top_k`` of them), in ``final_passes`` passes sharing one ``rep``; one more than
    ``final_drop_margin`` behind after a pass leaves it (:mod:`.final_round`)."""

    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    lengths_given: bool = False
    screen_ms: tuple[float, float] = (2.0, 10.0)
    final_margin: float = 0.10
    final_top_k: tuple[int, int] = (2, 5)
    final_passes: int = 3
    final_drop_margin: float = 0.02


@dataclass(frozen=True)
class Checks:
    """Whether configs' outputs are checked (``outputs``), against the user's ``reference``
    function when one is given, with ``tolerances`` (``(atol, rtol)``; ``None``: by dtype)."""

    outputs: bool = True
    reference: Callable[[dict[str, Any]], Any] | None = None
    tolerances: tuple[float, float] | None = None


@dataclass(frozen=True)
class TuningPlan:
    """What to tune and how, for every run of one autotuner.

    ``user_hooks``: the user gave a ``do_bench`` (or ``use_cuda_graph``), a ``pre_hook`` or a
    ``post_hook``, which run in the benchmark loop, so benchmarks run in the caller's process;
    ``user_timing``: of those, the ones that decide how a config is timed (``do_bench``,
    ``use_cuda_graph``): hooks alone leave the timing's lengths to kiln;
    ``sandbox``: benchmarks in the GPU sandbox are wanted (``sandbox=`` or ``KILN_SANDBOX``);
    ``own_device``: it tunes on this machine's GPU (no ``target=``), so a run's first miss
    starts the sandbox and the pool (:mod:`.prewarm`)."""

    name: str
    jit_fn: Any
    arg_names: tuple[str, ...]
    keys: tuple[str, ...]
    timing: Timing
    checks: Checks
    sandbox: bool
    user_hooks: bool
    user_timing: bool
    own_device: bool
    settings: Settings


@dataclass(frozen=True)
class LocalDevice:
    """The GPU a process tunes on: its kind (``name``, ``capability``: what a run is keyed by) and
    which physical GPU it is (``uuid``; ``""`` when unknown). Tests stand in a fake one, with the
    bencher."""

    name: str
    capability: str
    uuid: str = ""


@dataclass(frozen=True)
class Phase:
    """How long to time one config, and whether to check its outputs."""

    warmup_ms: float
    rep_ms: float
    check: bool
    samples: bool = False  # send back every timed run (the final round pools its passes' runs)


class Bencher(Protocol):
    """Benchmarks the configs of one tuning run."""

    owns_timing: bool  # kiln chooses how long a config is timed (no user do_bench or lengths)

    def bench(
        self, candidate: Candidate, artifact: CompiledArtifact, grid: tuple[int, ...], phase: Phase
    ) -> Any:
        """One config's :class:`~triton_kiln.sandbox.BenchOutcome` (failures are outcomes too)."""
        ...

    def user_reference(self) -> dict[str, Any] | None:
        """Outputs of the user's ``reference`` function, if one applies (else ``None``)."""
        ...

    def finish(self) -> None: ...


BencherFactory = Callable[[Any, Sequence[Any], Mapping[str, Any]], Bencher]
"""A stand-in for the GPU (tests): ``(autotuner, args, kwargs) -> Bencher``."""


class TunedKernel(Protocol):
    """The public face of Triton's ``Autotuner`` that a run reads and fills: the call in
    progress (``nargs``), the user's hooks and ``do_bench``, the configs and their pruning, and
    the attributes ``triton.autotune`` leaves after a tuning."""

    configs: list[Any]
    configs_top_k: Any
    nargs: dict[str, Any] | None
    reset_to_zero: list[str]
    restore_value: list[str]
    cache: Any
    configs_timings: Any
    best_config: Any
    last_run: Any
    loaded_from: str | None
    tuned: dict[tuple[Any, ...], Any]

    def pre_hook(self, kwargs: dict[str, Any], reset_only: bool = False) -> Any: ...

    def post_hook(self, kwargs: dict[str, Any], exception: BaseException | None) -> Any: ...

    def do_bench(self, fn: Callable[[], Any], quantiles: Any) -> Any: ...

    def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]: ...


@dataclass(frozen=True)
class Services:
    """What a run may use, each asked for when it is needed.

    ``pool``: the compile pool (the autotuner's, else the process's); ``shared_pool``: whether
    that is the process-wide one; ``database``: the tuning database (``None``: off); ``target``:
    the GPU target to compile for (:class:`~triton_kiln.errors.TargetError` without one);
    ``device``: a stand-in GPU identity (``None``: this machine's, :mod:`.gpu`); ``stand_in``: a
    test's bencher factory in the GPU's place (``None``: the real one, :mod:`.bench`);
    ``candidate``: a config specialized for a call (:class:`.compile_requests.Candidate`, the
    kernel's heuristics applied); ``kernel``: the autotuner, through :class:`TunedKernel`."""

    kernel: TunedKernel
    pool: Callable[[], CompilePool]
    shared_pool: Callable[[], bool]
    database: Callable[[], Any]
    target: Callable[[], GPUTarget]
    device: Callable[[], LocalDevice | None]
    stand_in: Callable[[], BencherFactory | None]
    candidate: Callable[[Any, Sequence[Any], Mapping[str, Any]], Candidate]

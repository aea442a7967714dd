"""One arm of ``bench/realworld.py`` for one op, in a process of its own (started by it).

::

    realworld.py (parent)                          this process (one op, one arm)
      fresh TRITON_CACHE_DIR / KILN_CACHE_DIR  -->   kiln arms: route triton.autotune to kiln
      argv: --arm --op --dir [--choices]             import the library's modules
                                                     build seeded inputs, time the first call
                                                     time the op (do_bench medians)
      reads DIR/result.json, DIR/outputs.pt   <--    write outputs, choices, kiln's reports

Arms: ``triton`` (stock ``triton.autotune``; it and ``kiln`` write ``choices.json``, each
autotuned kernel's chosen config per tuning key), ``triton_parallel`` (stock ``triton.autotune``
with each tuning's configs compiled in a process pool before Triton benchmarks them,
``bench/parallel_precompile.py``; ``triton_kiln`` cannot be imported in it), ``kiln`` and
``kiln_second`` (``triton.autotune`` routed to kiln before the library is imported:
``kiln.install()`` when kiln has it, else by assigning ``kiln.autotune`` to ``triton.autotune``,
``triton.runtime.autotune`` and ``triton.runtime.autotuner.autotune``), and ``kiln_forced`` (as
``kiln``, with every autotuned kernel's configs cut down to Triton's choices from ``--choices``,
so only the launch path differs from Triton's), and ``harness`` (stock ``triton.autotune``, no
tuning: the ``kiln`` and ``triton`` arms' choices, ``--kiln-choices`` and ``--choices``, timed
alternately in this one process: per kernel launch under the tuner's own ``_bench``, and per op
with ``triton.testing.do_bench``; see ``bench/choice_harness.py``). In the assignment mode a
kernel that ``kiln.autotune`` refuses at import (``@triton.autotune`` over ``@triton.heuristics``
today) is left on Triton's autotuner and listed with the reason, unless ``--strict``.

``result.json`` is written whatever happens: a failure is data (``error``, ``stage``).
``--dry-run`` needs no GPU: routing, imports and the kernel inventory only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import choice_harness
import parallel_precompile
import realworld_ops

LIBRARY_PREFIXES = ("liger_kernel", "fla", "flag_gems", "torchao", "gemlite", "rotary_embedding_torch")
# FlagGems imports its arch's ops as top-level modules (``hopper.ops.mm``, from a directory it puts
# on sys.path): a module counts as the libraries' if its file lies in one of their packages.
LIBRARY_DIRS = tuple(f"/{name}/" for name in LIBRARY_PREFIXES)
KILN_ARMS = ("kiln", "kiln_second", "kiln_record", "kiln_forced")
HARNESS = "harness"  # both arms' choices timed in one process, stock triton.autotune
PARALLEL = "triton_parallel"  # stock triton.autotune, each tuning's configs compiled in a pool first


def config_json(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as plain data (kwargs that are not plain values as their repr)."""
    plain = (int, float, str, bool, type(None))
    data = {
        "kwargs": {k: (v if isinstance(v, plain) else repr(v)) for k, v in config.kwargs.items()},
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas,
        "maxnreg": config.maxnreg,
    }
    return json.loads(json.dumps(data))


def route_to_kiln(strict: bool, fallbacks: list[dict[str, str]]) -> str:
    """Make ``triton.autotune`` build kiln's autotuner; returns how it was done."""
    import triton_kiln as kiln

    install = getattr(kiln, "install", None)
    if install is not None:
        install()
        return "kiln.install()"
    import triton
    import triton.runtime
    import triton.runtime.autotuner as autotuner_mod

    kiln_autotune = kiln.autotune
    triton_autotune = autotuner_mod.autotune
    replacement = kiln_autotune if strict else _lenient(kiln_autotune, triton_autotune, fallbacks)
    triton.autotune = replacement
    triton.runtime.autotune = replacement
    autotuner_mod.autotune = replacement
    return "monkeypatch (strict)" if strict else "monkeypatch, refused kernels left on triton.autotune"


def _lenient(
    kiln_autotune: Callable[..., Any], triton_autotune: Callable[..., Any], fallbacks: list[dict[str, str]]
) -> Callable[..., Any]:
    @functools.wraps(kiln_autotune)  # keeps the signature: FLA inspects it for cache_results
    def autotune(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        to_kiln = kiln_autotune(*args, **kwargs)
        to_triton = triton_autotune(*args, **kwargs)

        def decorator(fn: Any) -> Any:
            try:
                return to_kiln(fn)
            except Exception as exc:
                base = fn
                while not callable(getattr(base, "__code__", None)) and hasattr(base, "fn"):
                    base = base.fn
                name = f"{getattr(base, '__module__', '?')}.{getattr(base, '__qualname__', repr(base))}"
                fallbacks.append({"kernel": name, "reason": f"{type(exc).__name__}: {exc}"})
                return to_triton(fn)

        return decorator

    return autotune


def _autotuners() -> Iterator[Any]:
    """Every Triton ``Autotuner`` (kiln's included) reachable from the libraries' modules."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if module is None or not _library_module(name, module):
            continue
        for value in list(vars(module).values()):
            obj = value
            while isinstance(obj, KernelInterface):
                if isinstance(obj, Autotuner) and id(obj) not in seen:
                    seen.add(id(obj))
                    yield obj
                obj = getattr(obj, "fn", None)


def _library_module(name: str, module: Any) -> bool:
    if name.split(".", maxsplit=1)[0] in LIBRARY_PREFIXES:
        return True
    path = str(getattr(module, "__file__", None) or "")
    return any(part in path for part in LIBRARY_DIRS)


def _name(tuner: Any) -> str:
    return f"{tuner.base_fn.__module__}.{tuner.base_fn.__qualname__}"


def _kiln_class(tuner: Any) -> bool:
    """An instance of kiln's autotuner class (a library's subclass routed through kiln counts).
    Where kiln was never imported no tuner can be kiln's, and the stock arms stay free of it."""
    kiln = sys.modules.get("triton_kiln")
    return kiln is not None and isinstance(tuner, kiln.Autotuner)


def _bypass(tuner: Any) -> str | None:
    """Why an autotuner's own ``run`` reaches nothing of kiln's, or None when kiln tunes it.

    kiln decides from the class's code (:func:`triton_kiln.autotuner.library_search.role`): a
    ``run`` calling ``super().run`` is kiln's tuning (FLA's ``CachedAutotuner``); a ``run`` that
    drives its own search through ``self._bench`` (FlagGems' ``LibTuner``: its own key, database
    and policy) is served by kiln's ``_bench`` (kiln compiles every config in its pool and times
    each one the library asks for); a ``run`` that calls neither is put back on Triton's class
    at definition (or, below a class that is kiln's, left as kiln's class that kiln never tunes).
    """
    from triton.runtime.autotuner import Autotuner as TritonAutotuner

    import triton_kiln as kiln
    from triton_kiln.autotuner.library_search import role

    base = kiln.Autotuner if isinstance(tuner, kiln.Autotuner) else TritonAutotuner
    found = role(type(tuner), base)
    if found.driver == "none":
        return (
            f"{found.owner}.run overrides the autotuner's without calling super().run or "
            "self._bench: its own tuning runs, not kiln's"
        )
    return None


def _search(tuner: Any) -> str | None:
    """``library`` when the library's own ``run`` drives the search (kiln serves its ``_bench``)."""
    if not _kiln_class(tuner):
        return None
    import triton_kiln as kiln
    from triton_kiln.autotuner.library_search import role

    return role(type(tuner), kiln.Autotuner).driver


def _is_kiln(tuner: Any) -> bool:
    """Tuned by kiln: kiln's class, and kiln's ``run`` is the one called."""
    return _kiln_class(tuner) and _bypass(tuner) is None


def _kernel_record(tuner: Any) -> dict[str, Any]:
    cls = type(tuner)
    return {
        "name": _name(tuner),
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "configs": len(tuner.configs),
        "kiln": _is_kiln(tuner),
        "kiln_class": _kiln_class(tuner),
        "bypass": _bypass(tuner) if _kiln_class(tuner) else None,
        "search": _search(tuner),
    }


def _invoked(tuners: list[Any]) -> list[Any]:
    return [t for t in tuners if "best_config" in vars(t)]


def _restrict(tuners: list[Any], choices: dict[str, list[Any]]) -> dict[str, Any]:
    """Cut each kernel's configs down to Triton's choices (the original Config objects)."""
    done: dict[str, Any] = {}
    for tuner in tuners:
        wanted = [c for _key, c in choices.get(_name(tuner), [])]
        if not wanted:
            continue
        chosen = []
        for config in tuner.configs:
            if config_json(config) in wanted and config not in chosen:
                chosen.append(config)
        if chosen:
            tuner.configs = chosen
            done[_name(tuner)] = len(chosen)
        else:
            done[_name(tuner)] = "none of Triton's choices is among this kernel's configs"
    return done


def _kiln_reports(tuners: list[Any]) -> tuple[dict[str, int], dict[str, Any]]:
    """Status counts over every kiln tuning run, and each run's report (:func:`to_json`: its
    ``run`` with each config's result and the time split, and a ``summary``). A library's own
    search through kiln's ``_bench`` (FlagGems' ``LibTuner``) has no tuning run: it gets a report
    of the same shape from :func:`_library_search_report`, so its row has a split and a limit."""
    from triton_kiln.tuning import to_json

    statuses: Counter[str] = Counter()
    runs: dict[str, Any] = {}
    for tuner in tuners:
        if not _is_kiln(tuner):
            continue
        summaries = []
        for key, results in getattr(tuner, "searched", {}).items():  # a library's own search (_bench)
            statuses.update(r.status for r in results.values())
            summaries.append(_library_search_report(_name(tuner), key, results))
        tuned = dict(getattr(tuner, "tuned", {}) or {})
        if not tuned and getattr(tuner, "last_run", None) is not None:
            tuned = {"last": tuner.last_run}
        for run in tuned.values():
            statuses.update(r.status for r in run.results)
            summary = to_json(run)
            summary["loaded_from"] = getattr(tuner, "loaded_from", None)
            summaries.append(summary)
        if summaries:
            runs[_name(tuner)] = summaries
    return dict(statuses), runs


def _library_search_report(kernel: str, key: Any, results: dict[str, Any]) -> dict[str, Any]:
    """A library's own search (kiln compiled every config in its pool; the library asked for the
    timings one config at a time and chose), shaped as a tuning run's report: each config's
    result (``compile_s`` gives the limit its compile part) and ``split`` ``None``: kiln keeps no
    split of a search it does not drive, and the library's timings have no final round."""
    done = list(results.values())
    ok = [r for r in done if r.status == "ok"]
    return {
        "search": "library",
        "run": {
            "kernel": kernel,
            "key_repr": repr(key),
            "results": [r.to_json() for r in done],
            "split": None,
        },
        "summary": {
            "configs": len(done),
            "ok": len(ok),
            "failed": len(done) - len(ok),
            "best_runtime_ms": min((r.runtime_ms for r in ok if r.runtime_ms is not None), default=None),
        },
        "loaded_from": None,
    }


def _chosen(tuner: Any) -> list[list[Any]]:
    """Each tuning key's chosen config; a store with no ``items`` (FlagGems' SQL ``ConfigCache``)
    gives the last launched one (``best_config``) under the key ``"best_config"``."""
    items = getattr(tuner.cache, "items", None)
    if callable(items):
        return [[repr(k), config_json(c)] for k, c in items()]
    return [["best_config", config_json(tuner.best_config)]]


def _bench_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    import triton.testing

    runs = [
        float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")) for _ in range(repeats)
    ]
    return statistics.median(runs), runs


def run_harness(args: argparse.Namespace, tuners: list[Any], op: Any, result: dict[str, Any]) -> None:
    """Both arms' chosen configs timed in this process: per kernel launch under the tuner's own
    ``_bench`` (the numbers that decide; ``bench/choice_harness.py``), and the op's whole call
    alternately with ``do_bench`` (``*_op_level``: host overhead included)."""
    import torch

    chosen = {
        "kiln": json.loads(Path(args.kiln_choices).read_text()),
        "triton": json.loads(Path(args.choices).read_text()),
    }
    originals: dict[int, list[Any]] = {}
    torch.manual_seed(0)
    case = op.build()
    result["stage"] = "harness capture"
    applied = {"kiln": choice_harness.apply_choices(tuners, chosen["kiln"], _name, config_json, originals)}
    capture = choice_harness.Capture(_name)
    with capture.during(tuners) as launches:
        case.run()  # the kiln arm's choices: nothing is tuned; every launch is recorded
        torch.cuda.synchronize()
    result["stage"] = "harness per kernel"
    rows = choice_harness.time_kernel_choices(
        launches,
        chosen,
        lambda tuner: originals.get(id(tuner), tuner.configs),
        config_json,
        choice_harness.tuner_bench_ms,
        rounds=max(5, args.repeats),
    )
    torch.cuda.synchronize()
    result["kernel_rows"] = rows
    result.update(choice_harness.sum_rows(rows))

    result["stage"] = "harness op level"

    def setup(arm: str) -> Any:
        def apply() -> None:
            applied[arm] = choice_harness.apply_choices(tuners, chosen[arm], _name, config_json, originals)
            case.run()  # compiles the arm's configs (once: Triton's JIT keeps them)
            torch.cuda.synchronize()

        return apply

    timed = choice_harness.time_alternately(
        {arm: setup(arm) for arm in chosen}, case.run, lambda fn: _bench_ms(fn, 1)[0], args.repeats
    )
    result["applied"] = applied
    result["kiln_choice_ms_triton_harness_op_level"] = timed["kiln"]["ms"]
    result["triton_choice_ms_triton_harness_op_level"] = timed["triton"]["ms"]
    result["harness_runs_op_level"] = timed


class JitClock:
    """The time this thread spends in Triton's JIT compile entry (``JITFunction._do_compile``,
    kiln's routing wrapper included where kiln is installed), outermost calls only: plain
    ``@triton.jit`` compiles the op waits for, and in Triton's own arms each autotuned config's
    compile too. Other threads' calls are not counted."""

    def __init__(self) -> None:
        self.compiles = 0
        self.seconds = 0.0
        self._thread = threading.get_ident()
        self._depth = 0

    @contextlib.contextmanager
    def timing(self) -> Iterator[JitClock]:
        from triton.runtime.jit import JITFunction

        original = JITFunction._do_compile

        @functools.wraps(original)
        def timed(fn: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread or self._depth:
                return original(fn, *args, **kwargs)
            self._depth += 1
            started = time.perf_counter()
            try:
                return original(fn, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.compiles += 1
                self._depth -= 1

        JITFunction._do_compile = timed
        try:
            yield self
        finally:
            JITFunction._do_compile = original

    def report(self) -> dict[str, Any]:
        return {"compiles": self.compiles, "seconds": self.seconds}


def run_arm(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.arm != PARALLEL:
        _run_arm(args, result)
        return
    parallel_precompile.refuse(parallel_precompile.REFUSED)  # stock Triton: an import of kiln fails
    with parallel_precompile.installed() as plan:
        try:
            _run_arm(args, result)
        finally:
            result["parallel_precompile"] = plan.stats()
            result["kiln_imported"] = sys.modules.get("triton_kiln") is not None


def _run_arm(args: argparse.Namespace, result: dict[str, Any]) -> None:
    op = realworld_ops.OPS[args.op]
    fallbacks: list[dict[str, str]] = []
    result["stage"] = "route"
    installed_at = time.perf_counter()
    if args.arm in KILN_ARMS:
        result["program_log"] = _program_log()
        result["kiln_install"] = route_to_kiln(args.strict, fallbacks)
    result["stage"] = "import"
    if args.dry_run and op.dry_run_setup is not None:
        import torch

        if not torch.cuda.is_available():
            op.dry_run_setup()
            result["dry_run_setup"] = op.dry_run_setup.__name__
    started = time.perf_counter()
    import importlib

    try:
        for module in op.modules:
            importlib.import_module(module)
    finally:
        result["refused_by_kiln"] = fallbacks
    result["import_s"] = time.perf_counter() - started
    tuners = list(_autotuners())
    result["kernels_found"] = len(tuners)
    result["kernels_found_on_kiln"] = sum(_is_kiln(t) for t in tuners)
    bypassed = {_bypass(t) for t in tuners if _kiln_class(t)}
    result["kernels_found_kiln_class_bypassed"] = sorted(b for b in bypassed if b is not None)
    if args.dry_run:
        result["dry_run"] = True
        result["kernels_inventory"] = [_kernel_record(t) for t in tuners if args.inventory]
        return

    import torch

    result["device"] = torch.cuda.get_device_name()
    if args.arm == "kiln_forced":
        choices = json.loads(Path(args.choices).read_text())
        result["restricted"] = _restrict(tuners, choices)
    if args.arm == HARNESS:
        run_harness(args, tuners, op, result)
        return
    result["stage"] = "inputs"
    torch.manual_seed(0)
    case = op.build()
    torch.cuda.synchronize()
    result["stage"] = "first call"
    started = time.perf_counter()
    if args.arm in KILN_ARMS:
        result["program_replay"] = _replay_state(installed_at, started)
    with JitClock().timing() as jit:
        case.run()
        torch.cuda.synchronize()
    result["first_s"] = time.perf_counter() - started
    result["first_call_jit"] = jit.report()
    invoked = _invoked(tuners)
    result["kernels"] = [_kernel_record(t) for t in invoked]
    result["configs"] = sum(len(t.configs) for t in invoked)
    result["left_on_triton"] = [
        {
            "kernel": _name(t),
            "class": _kernel_record(t)["class"],
            "reason": (_bypass(t) if _kiln_class(t) else None) or "not kiln's class",
        }
        for t in invoked
        if not _is_kiln(t)
    ]
    if args.arm in ("triton", "kiln"):
        choices = {_name(t): _chosen(t) for t in invoked}
        (args.dir / "choices.json").write_text(json.dumps(choices, indent=1))
    if args.arm in KILN_ARMS:
        result["kiln_statuses"], result["kiln_runs"] = _kiln_reports(invoked)
    result["stage"] = "op time"
    result["op_ms"], result["op_ms_runs"] = _bench_ms(case.run, args.repeats)
    result["stage"] = "outputs"
    outputs = case.run()
    torch.cuda.synchronize()
    torch.save({k: v.detach().cpu() for k, v in outputs.items()}, args.dir / "outputs.pt")


def _program_log() -> list[list[Any]]:
    """The program record's log lines from now (``install()``) on, each ``[seconds since now,
    thread, message]``; the list fills as they come. The replay's INFO line says what started
    before the first call, which begins at ``program_replay.install_to_call_s``."""
    import logging

    lines: list[list[Any]] = []
    began = time.time()

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append([round(record.created - began, 3), record.threadName, record.getMessage()])

    logger = logging.getLogger("kiln.program")
    logger.addHandler(Keep(logging.DEBUG))
    logger.setLevel(logging.DEBUG)
    return lines


def _replay_state(installed_at: float, call_at: float) -> dict[str, Any] | None:
    """What the program record's replay had done when the first call began (``None``: none ran)."""
    try:
        from triton_kiln import program
    except ImportError:  # a kiln from before the program record (the kiln_baseline arm's)
        return None

    replay = program.current_replay()
    if replay is None:
        return None
    return {
        "started": replay.started,
        "skipped": dict(replay.skipped),
        "done_before_call": sum(f.done() for f in replay.futures),
        "finished_submitting": replay.done.is_set(),
        "install_to_call_s": call_at - installed_at,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", required=True, choices=["triton", PARALLEL, *KILN_ARMS, HARNESS])
    parser.add_argument("--op", required=True, choices=sorted(realworld_ops.OPS))
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--choices", default=None)
    parser.add_argument("--kiln-choices", default=None, help="harness arm: the kiln arm's choices.json")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--inventory", action="store_true", help="with --dry-run: list every autotuner found")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "arm": args.arm,
        "op": args.op,
        "python": platform.python_version(),
        "pid": os.getpid(),
    }
    code = 0
    try:
        run_arm(args, result)
        result["stage"] = "done"
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        result["traceback_tail"] = traceback.format_exc()[-3000:]
        code = 1
    (args.dir / "result.json").write_text(json.dumps(result, indent=1, default=repr))
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())

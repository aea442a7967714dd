"""Host microseconds per call of each calling convention: ``kiln.autotune`` vs ``triton.autotune``.

Part of ``bench/launch.py`` (its ``conventions`` key; ``--conventions-only`` runs it alone). Issue
10 asks that, after tuning, every way libraries call an autotuned kernel costs kiln no more host
time than Triton's own autotuner + JIT for the same call, and that a positional tuple-grid call
stays at or below a torch op. Each row calls the same kernel the same way through both:

* one kernel, ``conv_kernel(x, out, bias=None-able, n, SCALE: constexpr = 2, BLOCK)``, tuned on
  ``n`` over two configs that share ``BLOCK`` (so a tuple grid covers the data whichever wins);
  it accumulates (``out += SCALE * x + bias``) so every launch shows in ``out``;
* ``@triton.heuristics`` over and under the autotuner (the heuristic computes ``SCALE``);
* a copy kernel taking host ``TensorDescriptor`` arguments whose block shape each config's
  ``pre_hook`` sets, as Liger does (``out_desc.store(out_desc.load + in_desc.load)``).

Method (the same as ``launch.py``'s part 1): every arm is called once (this tunes it) and warmed,
outputs are zeroed, one call of every arm is compared (Triton's output must equal ``SCALE * x +
bias``, kiln's must equal Triton's exactly); then batches of calls are timed on the host with the
GPU kept busy, interleaved across arms, medians reported. At the end every output must equal its
arm's number of calls times one call's increment: a launch that was dropped or went wrong shows.
Each kiln row also reports how many of 3 calls after warm-up took kiln's full (Python) path.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

N = 1024
GRID = (1,)  # conv_kernel: BLOCK is N in every config
DESC_BLOCK = 256  # a TMA box dimension is at most 256
DESC_GRID = (N // DESC_BLOCK,)
FULL_PATH_PROBES = 3


@triton.jit
def conv_kernel(x_ptr, out_ptr, bias_ptr, n, SCALE: tl.constexpr = 2, BLOCK: tl.constexpr = 64):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    y = tl.load(x_ptr + offsets, mask=mask) * SCALE
    if bias_ptr is not None:
        y += tl.load(bias_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.load(out_ptr + offsets, mask=mask) + y, mask=mask)


@triton.jit
def desc_kernel(in_desc, out_desc, n, BLOCK: tl.constexpr):
    offset = tl.program_id(0) * BLOCK
    out_desc.store([offset], out_desc.load([offset]) + in_desc.load([offset]))


def scale_heuristic(args: Mapping[str, Any]) -> int:
    """``SCALE`` for the heuristics rows: 2 for the even ``n`` used here (the default's value)."""
    return 2 if args["n"] % 2 == 0 else 1


def set_desc_block(nargs: dict[str, Any]) -> None:
    """A config ``pre_hook`` as Liger writes it: the descriptors' block shape is the config's."""
    for name in ("in_desc", "out_desc"):
        nargs[name].block_shape = [nargs["BLOCK"]]


def meta_grid(meta: Mapping[str, Any]) -> tuple[int]:
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


@dataclass
class Operands:
    """One arm's arguments; ``out`` (and ``out_desc``) belong to that arm alone."""

    x: Any
    bias: Any
    out: Any
    n: int
    in_desc: Any = None
    out_desc: Any = None


Call = Callable[[], Any]


@dataclass(frozen=True)
class Convention:
    name: str
    kernel: str  # which kernel of `build_kernel` it calls (one of KERNEL_KINDS)
    make: Callable[[Any, Operands], Call]  # (tuned kernel, operands) -> a call with no arguments
    code: str  # the call, as the JSON shows it
    scale: int = 2  # one call adds scale * x (+ bias when `bias`) to out
    bias: bool = True
    target: str = "triton"  # the bound on kiln: "triton" (<= Triton) or "torch_op"


def _positional(k: Any, o: Operands) -> Call:
    x, out, bias, n = o.x, o.out, o.bias, o.n
    return lambda: k[GRID](x, out, bias, n, 2)


def _keywords(k: Any, o: Operands) -> Call:
    x, out, bias, n = o.x, o.out, o.bias, o.n
    return lambda: k[GRID](x_ptr=x, out_ptr=out, bias_ptr=bias, n=n, SCALE=2)


def _defaults(k: Any, o: Operands) -> Call:
    x, out, bias, n = o.x, o.out, o.bias, o.n
    return lambda: k[GRID](x, out, bias, n)


def _none_argument(k: Any, o: Operands) -> Call:
    x, out, n = o.x, o.out, o.n
    return lambda: k[GRID](x, out, None, n)


def _constexpr_at_call(k: Any, o: Operands) -> Call:
    x, out, bias, n = o.x, o.out, o.bias, o.n
    return lambda: k[GRID](x, out, bias, n, SCALE=3)


def _grid_function(k: Any, o: Operands) -> Call:
    x, out, bias, n = o.x, o.out, o.bias, o.n
    return lambda: k[meta_grid](x, out, bias, n)


def _run_grid(k: Any, o: Operands) -> Call:
    x, out, bias, n = o.x, o.out, o.bias, o.n
    return lambda: k.run(x, out, bias, n, grid=GRID, warmup=False)


def _descriptor(k: Any, o: Operands) -> Call:
    in_desc, out_desc, n = o.in_desc, o.out_desc, o.n
    return lambda: k[DESC_GRID](in_desc, out_desc, n)


CONVENTIONS: tuple[Convention, ...] = (
    Convention("positional tuple grid", "plain", _positional, "k[g](x, out, bias, n, 2)", target="torch_op"),
    Convention("keywords", "plain", _keywords, "k[g](x_ptr=x, out_ptr=out, bias_ptr=bias, n=n, SCALE=2)"),
    Convention("defaults left out", "plain", _defaults, "k[g](x, out, bias, n)"),
    Convention("None argument", "plain", _none_argument, "k[g](x, out, None, n)", bias=False),
    Convention(
        "constexpr at call time", "plain", _constexpr_at_call, "k[g](x, out, bias, n, SCALE=3)", scale=3
    ),
    Convention("grid function", "plain", _grid_function, "k[meta_grid](x, out, bias, n)"),
    Convention("run(grid=...)", "plain", _run_grid, "k.run(x, out, bias, n, grid=g, warmup=False)"),
    Convention("heuristics over autotune", "heuristics_over", _defaults, "k[g](x, out, bias, n)"),
    Convention("heuristics under autotune", "heuristics_under", _defaults, "k[g](x, out, bias, n)"),
    Convention(
        "host TensorDescriptor",
        "descriptor",
        _descriptor,
        "k[g](in_desc, out_desc, n); each config's pre_hook sets the block shape",
        scale=1,
        bias=False,
    ),
)

KERNEL_KINDS = ("plain", "heuristics_over", "heuristics_under", "descriptor")


@dataclass
class Built:
    """A tuned kernel as called (``kernel``) and the autotuner inside it (``tuner``)."""

    kernel: Any
    tuner: Any


def build_kernel(kind: str, autotune: Callable[..., Any], config: Callable[..., Any]) -> Built:
    """One kernel of ``KERNEL_KINDS``, decorated by ``autotune`` (Triton's or kiln's)."""
    configs = [config({"BLOCK": N}, num_warps=w) for w in (2, 4)]
    heuristics = triton.heuristics({"SCALE": scale_heuristic})
    if kind == "plain":
        tuner = autotune(configs, key=["n"])(conv_kernel)
        return Built(tuner, tuner)
    if kind == "heuristics_over":  # triton.heuristics(...)(autotune(...)(jit))
        tuner = autotune(configs, key=["n"])(conv_kernel)
        return Built(heuristics(tuner), tuner)
    if kind == "heuristics_under":  # autotune(...)(triton.heuristics(...)(jit))
        tuner = autotune(configs, key=["n"])(heuristics(conv_kernel))
        return Built(tuner, tuner)
    if kind == "descriptor":
        desc_configs = [config({"BLOCK": DESC_BLOCK}, num_warps=w, pre_hook=set_desc_block) for w in (2, 4)]
        tuner = autotune(desc_configs, key=["n"])(desc_kernel)
        return Built(tuner, tuner)
    raise ValueError(f"unknown kernel kind {kind!r}; expected one of {KERNEL_KINDS}")


def increment(convention: Convention, x: Any, bias: Any) -> Any:
    """What one call of ``convention`` adds to its output."""
    step = x * convention.scale
    return step + bias if convention.bias else step


def count_full_paths(tuner: Any, call: Call, times: int) -> int | None:
    """How many of ``times`` calls entered kiln's full path (``Autotuner._run``); None if no such path."""
    original = getattr(tuner, "_run", None)
    if original is None:
        return None
    count = 0

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return original(*args, **kwargs)

    tuner._run = counting
    try:
        for _ in range(times):
            call()
    finally:
        del tuner._run
    return count


def quantiles(values: list[float]) -> list[float]:
    """[p20, p80] of the batches (both the one value when there is one batch)."""
    if len(values) < 2:
        return [values[0], values[0]] if values else []
    cuts = statistics.quantiles(values, n=5)
    return [cuts[0], cuts[-1]]


def meets_target(row: Mapping[str, Any], torch_us: float) -> bool | None:
    """The goal for a row: kiln <= a torch op (positional) or <= Triton (the rest)."""
    kiln_us, triton_us = row.get("kiln_us"), row.get("triton_us")
    if kiln_us is None or triton_us is None:
        return None
    if row["target"] == "torch_op":
        return bool(kiln_us <= torch_us)
    return bool(kiln_us <= triton_us)


def conventions_table(section: Mapping[str, Any]) -> str:
    """The ``conventions`` result as a text table (convention, triton us, kiln us, kiln/triton)."""
    torch_us = section["torch_op_us"]
    head = f"{'convention':<28}{'triton us':>11}{'kiln us':>10}{'kiln/triton':>13}  {'full path':<11}target"
    lines = [head, "-" * len(head)]
    for name, row in section["rows"].items():
        if "error" in row:
            lines.append(f"{name:<28}  error: {row['error']}")
            continue
        full = row.get("kiln_full_path_calls")
        full_text = "?" if full is None else f"{full}/{FULL_PATH_PROBES}"
        goal = "<= torch op" if row["target"] == "torch_op" else "<= triton"
        verdict = {True: "ok", False: "MISSED", None: "?"}[row.get("meets_target")]
        checks = "" if row.get("outputs_match") and row.get("launches_verified") else "  OUTPUT MISMATCH"
        lines.append(
            f"{name:<28}{row['triton_us']:>11.2f}{row['kiln_us']:>10.2f}{row['kiln_over_triton']:>12.2f}x"
            f"  {full_text:<11}{goal} {verdict}{checks}"
        )
    lines.append(f"{'torch op (out.add_(1))':<28}{torch_us:>11.2f}")
    lines.append("target: positional kiln <= torch op; every other row kiln/triton <= 1.00")
    return "\n".join(lines)


def section_failed(section: Mapping[str, Any]) -> list[str]:
    """Rows that errored or whose outputs or launch counts were wrong (not the timing targets)."""
    return [
        name
        for name, row in section["rows"].items()
        if "error" in row or not (row.get("outputs_match") and row.get("launches_verified"))
    ]


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def bench_conventions(batches: int, batch: int, time_batch: Callable[[Call, int], float]) -> dict[str, Any]:
    """Time every convention through ``triton.autotune`` and ``kiln.autotune`` (needs a GPU).

    ``time_batch(call, n)`` is ``launch.py``'s: host microseconds per call over ``n`` calls.
    A convention that fails to tune or launch in either autotuner gets an ``error`` and no timing.
    """
    import traceback

    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    import triton_kiln as kiln

    x = (torch.arange(N, device="cuda") % 7).float()
    bias = (torch.arange(N, device="cuda") % 5).float() - 2
    frameworks: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
        "triton": (triton.autotune, triton.Config),
        "kiln": (kiln.autotune, kiln.Config),
    }
    built: dict[tuple[str, str], Built | Exception] = {}
    for fw, (autotune, config) in frameworks.items():
        for kind in KERNEL_KINDS:
            try:
                built[fw, kind] = build_kernel(kind, autotune, config)
            except Exception as exc:  # reported in the rows that use this kernel
                traceback.print_exc()
                built[fw, kind] = exc

    arms: dict[tuple[str, str], Call] = {}
    outs: dict[tuple[str, str], Any] = {}
    steps: dict[tuple[str, str], Any] = {}  # what one call adds to the arm's output
    kiln_tuners: dict[str, Any] = {}
    rows: dict[str, dict[str, Any]] = {}
    for conv in CONVENTIONS:
        row: dict[str, Any] = {"call": conv.code, "target": conv.target}
        rows[conv.name] = row
        try:
            for fw in frameworks:
                kernel = built[fw, conv.kernel]
                if isinstance(kernel, Exception):
                    raise kernel
                out = torch.zeros(N, device="cuda")
                operands = Operands(x, bias, out, N)
                if conv.kernel == "descriptor":  # placeholder block shapes: the config's pre_hook sets them
                    operands.in_desc = TensorDescriptor.from_tensor(x, [1])
                    operands.out_desc = TensorDescriptor.from_tensor(out, [1])
                call = conv.make(kernel.kernel, operands)
                for _ in range(3):  # the first tunes for this call's key or compiles its variant
                    call()
                torch.cuda.synchronize()
                arms[conv.name, fw] = call
                outs[conv.name, fw] = out
                steps[conv.name, fw] = increment(conv, x, bias)
                if fw == "kiln":
                    kiln_tuners[conv.name] = kernel.tuner
        except Exception as exc:
            traceback.print_exc()
            row["error"] = _first_line(exc)
            for fw in frameworks:
                for table in (arms, outs, steps):
                    table.pop((conv.name, fw), None)
            torch.cuda.synchronize()

    torch_out = torch.zeros(N, device="cuda")
    arms["torch op", "torch"] = lambda: torch_out.add_(1)
    outs["torch op", "torch"] = torch_out
    steps["torch op", "torch"] = torch.ones_like(torch_out)

    torch.cuda.synchronize()
    for out in outs.values():
        out.zero_()
    calls = dict.fromkeys(arms, 0)
    for key, call in arms.items():  # compare one call of each arm
        call()
        calls[key] += 1
    torch.cuda.synchronize()
    for conv in CONVENTIONS:
        if (conv.name, "kiln") in arms:
            triton_out, kiln_out = outs[conv.name, "triton"], outs[conv.name, "kiln"]
            rows[conv.name]["outputs_match"] = bool(
                torch.equal(triton_out, steps[conv.name, "triton"]) and torch.equal(kiln_out, triton_out)
            )
            kiln_key = (conv.name, "kiln")
            rows[conv.name]["kiln_full_path_calls"] = count_full_paths(
                kiln_tuners[conv.name], arms[kiln_key], FULL_PATH_PROBES
            )
            calls[kiln_key] += FULL_PATH_PROBES

    for key, call in arms.items():  # warm every path
        time_batch(call, 50)
        calls[key] += 50
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in arms}
    for _ in range(batches):
        for key, call in arms.items():
            samples[key].append(time_batch(call, batch))
            calls[key] += batch
    torch.cuda.synchronize()

    verified = {key: bool(torch.equal(outs[key], steps[key] * calls[key])) for key in arms}
    medians = {key: statistics.median(values) for key, values in samples.items()}
    torch_us = medians["torch op", "torch"]
    for conv in CONVENTIONS:
        row = rows[conv.name]
        if "error" in row:
            continue
        t_key, k_key = (conv.name, "triton"), (conv.name, "kiln")
        row.update(
            triton_us=medians[t_key],
            kiln_us=medians[k_key],
            kiln_over_triton=medians[k_key] / medians[t_key],
            triton_p20_p80=quantiles(samples[t_key]),
            kiln_p20_p80=quantiles(samples[k_key]),
            launches_verified=verified[t_key] and verified[k_key],
            launches_triton_kiln=[calls[t_key], calls[k_key]],
        )
        row["meets_target"] = meets_target(row, torch_us)
    return {
        "rows": rows,
        "torch_op_us": torch_us,
        "torch_op_p20_p80": quantiles(samples["torch op", "torch"]),
        "torch_op_launches_verified": verified["torch op", "torch"],
        "n": N,
        "batches": batches,
        "batch": batch,
    }

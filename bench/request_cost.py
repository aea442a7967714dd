"""Host cost per call of kiln's full path on real library calls, measured without a GPU.

Run from the repository root (CPU only; Liger-Kernel 0.8.5 and fla-core 0.6.0 installed)::

    PYTHONPATH=src python bench/request_cost.py [--json out.json]

After tuning, a call the C fast path cannot key (keyword arguments, ``None`` arguments,
descriptors, ...) goes through ``Autotuner.run``; per call it computes the tuning key and then
``_launch`` -> ``_candidate`` -> ``request_for``: Triton's binder, ``_pack_args``, a new
``CompileRequest`` (validation, kernel spec lookup) and its ``key`` (a sha256 over JSON). This
times those steps on the real call shapes of four library kernels (CPU tensors stand in for
CUDA ones; binding and specialization only read pointers and dtypes) against what Triton's JIT
does per call before its launch (binder + ``compute_cache_key``), for an sm_90 target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from triton_kiln.autotuner.specialize import _binder, request_for, tuning_key
from triton_kiln.triton_compat import GPUTarget

TARGET = GPUTarget("cuda", 90, 32)
Call = tuple[Any, Any, tuple[Any, ...], dict[str, Any], list[str]]  # jit fn, config, args, kwargs, key


def _jit(kernel: Any) -> Any:
    while not isinstance(kernel, triton.runtime.JITFunction):
        kernel = kernel.fn
    return kernel


def _bf16(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, dtype=torch.bfloat16)


def moe_up_proj() -> Call:
    from liger_kernel.ops.fused_moe_kernels import _fused_up_proj_swiglu_kernel as kernel

    tk, hidden, inter, experts = 8192, 2048, 1024, 16
    x, w = _bf16(4096, hidden), _bf16(experts, 2 * inter, hidden)
    pre, post = _bf16(tk, 2 * inter), _bf16(tk, inter)
    idx = [torch.empty(n, dtype=torch.int32) for n in (tk, experts + 1, 200, 200)]
    kwargs = {
        "H_dim": hidden,
        "I_dim": inter,
        "stride_x_T": x.stride(0),
        "stride_x_H": x.stride(1),
        "stride_w_E": w.stride(0),
        "stride_w_N": w.stride(1),
        "stride_w_K": w.stride(2),
        "stride_pre_TK": pre.stride(0),
        "stride_pre_N": pre.stride(1),
        "stride_post_TK": post.stride(0),
        "stride_post_N": post.stride(1),
        "BLOCK_M": 64,
    }
    return _jit(kernel), kernel.configs[0], (x, w, *idx, pre, post), kwargs, list(kernel.keys)


def dyt_fwd() -> Call:
    from liger_kernel.ops.dyt import _dyt_fwd_kernel as kernel

    x, y = _bf16(4096, 4096), _bf16(4096, 4096)
    alpha, gamma, beta = (torch.empty(n, dtype=torch.float32) for n in (1, 4096, 4096))
    return _jit(kernel), kernel.configs[0], (x, y, alpha, gamma, beta, True, 4096), {}, list(kernel.keys)


def swiglu_descriptors() -> Call:
    from liger_kernel.ops.mlp import _swiglu_kernel_forward as kernel
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, seq, dim, hidden = 2, 2048, 2048, 5632
    tensors = [_bf16(batch, seq, dim), _bf16(hidden, dim), _bf16(hidden, dim)]
    tensors += [_bf16(batch, seq, hidden) for _ in range(3)]
    descs = [TensorDescriptor.from_tensor(t, [1] * t.dim()) for t in tensors]
    config = kernel.configs[0]
    config.pre_hook({**dict(zip(kernel.arg_names, descs, strict=False)), **config.kwargs})
    args = (*descs, seq, dim, hidden, 40)
    return _jit(kernel), config, args, {"gate_multiplier": 1.0}, list(kernel.keys)


def parallel_simple_gla() -> Call:
    from fla.ops.simple_gla.parallel import parallel_simple_gla_fwd_kernel as kernel

    batch, seq, heads, d = 4, 2048, 8, 128
    q, k, v = (_bf16(batch, seq, heads, d) for _ in range(3))
    g, o = torch.empty(batch, seq, heads), _bf16(1, batch, seq, heads, d)
    kwargs = {
        "q": q,
        "k": k,
        "v": v,
        "g": g,
        "o": o,
        "attn": None,
        "scale": 0.088,
        "cu_seqlens": None,
        "chunk_indices": None,
    }
    kwargs |= {"T": seq, "B": batch, "H": heads, "K": d, "V": d, "BT": 128, "BS": 32, "BK": 128, "BV": 128}
    kwargs |= {
        "NV": 1,
        "OUTPUT_ATTENTIONS": False,
        "USE_G": True,
        "IS_VARLEN": False,
    }  # its heuristics' values
    autotuner = kernel.fn  # Heuristics over Autotuner over JIT
    return _jit(kernel), autotuner.configs[0], (), kwargs, list(autotuner.keys)


CALLS: dict[str, Callable[[], Call]] = {
    "liger_moe_up_proj (keywords)": moe_up_proj,
    "liger_dyt_fwd (positional)": dyt_fwd,
    "liger_swiglu_fwd (descriptors, keyword constexpr)": swiglu_descriptors,
    "fla_parallel_simple_gla_fwd (keywords, None args)": parallel_simple_gla,
}


def per_call_us(fn: Callable[[], Any], rounds: int = 7, number: int = 200) -> float:
    fn()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - started) / number * 1e6)
    return statistics.median(times)


def measure(name: str, make: Callable[[], Call]) -> dict[str, Any]:
    from triton.runtime.jit import compute_cache_key

    jit, config, args, kwargs, keys = make()
    call_kwargs = {**kwargs, **config.all_kwargs()}
    _backend, binder = _binder(jit, TARGET)

    def triton_jit() -> None:
        _bound, specialization, options = binder(*args, **call_kwargs)
        compute_cache_key({}, specialization, options)

    def kiln_key() -> None:
        tuning_key(jit.arg_names, keys, args, kwargs)

    def kiln_request() -> None:
        request_for(jit, config, args, kwargs, TARGET)

    request, _bound = request_for(jit, config, args, kwargs, TARGET)

    def kiln_request_key() -> None:
        request.__dict__.pop("_key", None)  # CompileRequest caches its key; a new one per call does not
        _ = request.key

    def kiln_full() -> None:
        kiln_key()
        request, _bound = request_for(jit, config, args, kwargs, TARGET)
        _ = request.key

    return {
        "call": name,
        "triton_jit_bind_and_key_us": per_call_us(triton_jit),
        "kiln_tuning_key_us": per_call_us(kiln_key),
        "kiln_request_for_us": per_call_us(kiln_request),
        "kiln_request_key_us": per_call_us(kiln_request_key),
        "kiln_full_path_before_launch_us": per_call_us(kiln_full),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = [measure(name, make) for name, make in CALLS.items()]
    head = ("triton JIT", "tuning key", "request_for", "request.key", "kiln full")
    print(f"{'us per call':52}" + "".join(f"{h:>13}" for h in head))
    for r in rows:
        values = [v for k, v in r.items() if k != "call"]
        print(f"{r['call']:52}" + "".join(f"{v:13.1f}" for v in values))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

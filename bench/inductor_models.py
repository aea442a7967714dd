"""Models, inputs and Inductor's own measurements, shared by ``bench/inductor_child.py`` and
``bench/inductor_faults_child.py`` (imported in the child processes only; imports torch).

Models (weights from ``torch.manual_seed(0)``, inputs from a seeded generator, so every process
builds the same ones):

* ``resnet50``: torchvision's ResNet-50 (``weights=None``), eval, bf16, ``[batch, 3, 224, 224]``;
* ``block``: one pre-norm transformer block (LayerNorm, QKV projection, causal ``flex_attention``
  (an Inductor Triton template, not cuDNN or FlashAttention), output projection, LayerNorm, MLP
  with tanh GELU), bf16, ``[batch, seq, dim]``: its attention, norms, GELU and residuals are
  Triton kernels Inductor generates; the four linears are cuBLAS in default mode and Triton
  templates (or cuBLAS, whichever wins) under max-autotune;
* ``causal_lm``: a ``transformers`` ``LlamaForCausalLM`` built from a config (random weights, no
  download), eval, bf16, forward only (``use_cache=False``, SDPA attention), ``input_ids`` of
  ``[batch, seq]``, returning the logits (:data:`CAUSAL_LM_SHAPE`);
* ``vit``: ``timm``'s ``vit_base_patch16_224`` (``pretrained=False``), eval, bf16,
  ``[batch, 3, 224, 224]`` (:data:`VIT_SHAPE`);
* ``tiny``: Linear, LayerNorm, GELU, Linear; for ``--smoke`` on any device (fp32 on CPU).

``causal_lm`` and ``vit`` import ``transformers`` and ``timm`` in their builders only; without
them (or what their import needs) the build fails with :class:`ModelPackagesMissing`, which
names the wheels to carry (``bench/inductor-models-requirements.txt``). ``build(..., small=True)``
makes either at a test size, fp32 on the CPU (``tests/test_bench_inductor_models.py``).

Why these sizes. Max-autotune times each distinct matmul (and convolution) shape once per
process, so a compile's autotune work follows the number of distinct shapes, and its tracing and
code generation the number of layers:

* ``causal_lm`` takes TinyLlama-1.1B's shapes (hidden 2048, MLP 5632, 32 heads, 4 key-value
  heads, vocab 32000) with 4 of its 22 layers, batch 2 of 512 tokens (1024 tokens, a prefill):
  five distinct GEMMs (query/output, key/value, gate/up, down, the LM head) as in the full model,
  with a graph small enough that both arms' cold and warm processes fit one device command. SDPA
  (``attn_implementation="sdpa"``) is what ``transformers`` uses by default and what
  ``torch.compile`` traces without graph breaks: Inductor keeps it as ATen's fused attention (on
  an H100 in bf16, FlashAttention), so the Triton work is the GEMM templates, RMSNorm, rotary
  embedding, SiLU-gating and residual kernels. ``eager`` attention would add batched matmuls and a
  softmax that Inductor may match back to SDPA anyway.
* ``vit``: ViT-B/16 at 224 pixels whole (12 layers, 86M parameters), batch 32 as ResNet-50's:
  five distinct GEMMs (QKV, projection, MLP up and down, the head) and the patch embedding's
  convolution; timm's attention is SDPA too.

:func:`inductor_split` snapshots what the installed torch records about a compile:
``torch._dynamo.utils.compilation_time_metrics`` (every ``dynamo_timed`` key: how often, seconds
in all; keys nest, e.g. ``_compile.compile_inner`` holds ``compile_fx_inner``),
``calculate_time_spent()`` (the phases, by phase name), ``counters`` (e.g. ``inductor``:
``select_algorithm_autotune``, ``select_algorithm_num_precompiles``, ``benchmarking.*``), and
the numbers in ``torch._inductor.metrics``; each part present only where this torch has it.
"""

from __future__ import annotations

import copy
import os
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

MODELS = ("resnet50", "block", "causal_lm", "vit", "tiny")
BLOCK_SHAPE = {"batch": 8, "seq": 1024, "dim": 1024, "heads": 16, "hidden": 4096}
CAUSAL_LM_SHAPE = {
    "batch": 2,
    "seq": 512,
    "vocab": 32000,
    "hidden": 2048,
    "intermediate": 5632,
    "layers": 4,
    "heads": 32,
    "kv_heads": 4,
}
"""``causal_lm``'s size (see the module docstring: TinyLlama-1.1B's shapes, 4 of its layers)."""
CAUSAL_LM_SMALL = {
    "batch": 2,
    "seq": 16,
    "vocab": 512,
    "hidden": 64,
    "intermediate": 128,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
}
VIT_SHAPE = {"batch": 32, "name": "vit_base_patch16_224", "image": 224}
"""``vit``'s size (timm's model name and its image size)."""
VIT_SMALL = {**VIT_SHAPE, "name": "vit_tiny_patch16_224", "image": 32, "depth": 2, "classes": 10}
MODEL_REQUIREMENTS = "bench/inductor-models-requirements.txt"


class ModelPackagesMissing(ImportError):
    """A model's library (``transformers``, ``timm``) or something its import needs is not
    installed: the message names the model, the import that failed and the wheels to carry."""

    def __init__(self, model: str, package: str, detail: str) -> None:
        super().__init__(
            f"the {model} model needs {package}, and importing it failed: {detail}. "
            f"On the GPU machine, carry the wheels of {MODEL_REQUIREMENTS} in .whl_libs/ "
            "(bench/README.md, 'The model families' wheels', has the download command); "
            f"elsewhere: pip install --no-deps -r {MODEL_REQUIREMENTS}"
        )
        self.model = model
        self.package = package
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.model, self.package, self.detail))


def device_name() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _resnet50(device: str, batch: int) -> tuple[Any, tuple[Any, ...]]:
    import torch
    import torchvision

    model = torchvision.models.resnet50(weights=None).eval().to(device=device, dtype=torch.bfloat16)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(batch, 3, 224, 224, generator=gen).to(device=device, dtype=torch.bfloat16)
    return model, (x,)


def _block(device: str, batch: int, attention: str) -> tuple[Any, tuple[Any, ...]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    shape = dict(BLOCK_SHAPE, batch=batch)
    heads, dim = shape["heads"], shape["dim"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, shape["hidden"])
            self.fc2 = nn.Linear(shape["hidden"], dim)

        def forward(self, x: Any, mask: Any) -> Any:
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)
            if attention == "flex":
                from torch.nn.attention.flex_attention import flex_attention

                a = flex_attention(q, k, v, block_mask=mask)
            else:  # written out: Inductor may still pattern-match it to SDPA
                scores = (q @ k.transpose(-2, -1)) * (d // heads) ** -0.5
                a = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    model = Block().eval().to(device=device, dtype=torch.bfloat16)
    seq = shape["seq"]
    if attention == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        def causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return q_idx >= kv_idx

        mask = create_block_mask(causal, B=None, H=None, Q_LEN=seq, KV_LEN=seq, device=device)
    else:
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(batch, seq, dim, generator=gen).to(device=device, dtype=torch.bfloat16)
    return model, (x, mask)


def _dtype(device: str) -> Any:
    """bf16 on the GPU, fp32 elsewhere (Inductor's CPU backend and the CPU tests)."""
    import torch

    return torch.bfloat16 if device == "cuda" else torch.float32


def _causal_lm(device: str, batch: int, small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        raise ModelPackagesMissing("causal_lm", "transformers", f"{type(exc).__name__}: {exc}") from exc
    shape = CAUSAL_LM_SMALL if small else CAUSAL_LM_SHAPE
    config = LlamaConfig(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=shape["seq"],
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )

    class CausalLMLogits(nn.Module):
        """One forward of the causal LM as an inference step calls it, the logits only (the
        bench saves and compares one tensor)."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = LlamaForCausalLM(config)

        def forward(self, input_ids: Any) -> Any:
            return self.lm(input_ids=input_ids, use_cache=False).logits

    with torch.device(device):  # the random init where the model runs: 300M values take seconds on a CPU
        model = CausalLMLogits()
    model = model.eval().to(dtype=_dtype(device))
    gen = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, shape["vocab"], (batch, shape["seq"]), generator=gen).to(device=device)
    return model, (ids,)


def _vit(device: str, batch: int, small: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch

    try:
        import timm
    except ImportError as exc:
        raise ModelPackagesMissing("vit", "timm", f"{type(exc).__name__}: {exc}") from exc
    shape = VIT_SMALL if small else VIT_SHAPE
    options: dict[str, Any] = {"img_size": shape["image"]}
    if small:
        options.update(depth=shape["depth"], num_classes=shape["classes"])
    model = timm.create_model(shape["name"], pretrained=False, **options)
    model = model.eval().to(device=device, dtype=_dtype(device))
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(batch, 3, shape["image"], shape["image"], generator=gen)
    return model, (x.to(device=device, dtype=_dtype(device)),)


def _tiny(device: str, batch: int) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = nn.Sequential(nn.Linear(64, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 64))
    model = model.eval().to(device=device, dtype=dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)
    return model, (torch.randn(batch, 64, generator=gen).to(device=device, dtype=dtype),)


def build(
    name: str, device: str, batch: int, attention: str = "flex", *, small: bool = False
) -> tuple[Any, tuple[Any, ...]]:
    """The model (eval, on ``device``) and its inputs; the same in every process. ``small``: the
    test size of ``causal_lm`` and ``vit`` (:data:`CAUSAL_LM_SMALL`, :data:`VIT_SMALL`)."""
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        return _resnet50(device, batch)
    if name == "block":
        return _block(device, batch, attention)
    if name == "causal_lm":
        return _causal_lm(device, batch, small)
    if name == "vit":
        return _vit(device, batch, small)
    if name == "tiny":
        return _tiny(device, batch)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def default_batch(name: str) -> int:
    return {
        "resnet50": 32,
        "block": BLOCK_SHAPE["batch"],
        "causal_lm": CAUSAL_LM_SHAPE["batch"],
        "vit": VIT_SHAPE["batch"],
        "tiny": 32,
    }[name]


def fp64_reference(model: Any, inputs: tuple[Any, ...]) -> Any:
    """The model run eagerly in float64 (what Inductor's accuracy check measures errors against)."""
    import torch

    ref_model = copy.deepcopy(model).double()
    ref_inputs = tuple(x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)
    with torch.no_grad():
        out = ref_model(*ref_inputs)
    del ref_model
    return out


def import_inductor() -> None:
    """Import what ``torch.compile`` imports on every path, a cached graph's included: Dynamo,
    Inductor's code cache, async compile and Triton heuristics (what ``kiln.inductor.install()``
    needs too)."""
    import torch._dynamo
    import torch._inductor.async_compile
    import torch._inductor.codecache
    import torch._inductor.graph  # compile_fx imports it at its top; kiln's install() patches it
    import torch._inductor.runtime.compile_tasks
    import torch._inductor.runtime.triton_heuristics  # noqa: F401


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def runtime_ms(fn: Callable[[], Any], device: str, iters: int, warmup: int) -> tuple[float, list[float]]:
    """Median wall milliseconds of one call, synchronized after each (launch overhead included)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), times


def block_runtime_ms(fn: Callable[[], Any], device: str, blocks: int, block_iters: int) -> list[float]:
    """Milliseconds per call of ``blocks`` blocks of ``block_iters`` calls run back to back (no
    sync inside a block): on CUDA, CUDA events recorded on the stream around each block (the GPU's
    own clock: kernel time, and the gaps where the GPU waited for the host to launch, which is
    what a launch-bound model costs); elsewhere the wall clock around the block."""
    per_call: list[float] = []
    if device == "cuda":
        import torch

        for _ in range(blocks):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(block_iters):
                fn()
            end.record()
            end.synchronize()
            per_call.append(start.elapsed_time(end) / block_iters)
        return per_call
    for _ in range(blocks):
        started = time.perf_counter()
        for _ in range(block_iters):
            fn()
        per_call.append((time.perf_counter() - started) * 1e3 / block_iters)
    return per_call


def launch_diagnostics(fn: Callable[[], Any], device: str, calls: int = 20) -> dict[str, Any]:
    """Where a call's time goes, for comparing arms whose ``runtime_ms`` differ (CUDA only):

    * ``launchers``: Inductor's kernels' launchers by what they call (``StaticallyLaunchedCudaKernel``
      is Inductor's static launcher; anything else is Triton's own, slower to launch);
    * ``host_ms_per_call``: the host's time to issue one call, no synchronization (a launch-bound
      model's floor);
    * ``gpu_kernel_ms_per_call``: the GPU kernels' own time per call (torch.profiler), without the
      gaps where the GPU waited for the host.
    """
    if device != "cuda":
        return {}
    import gc

    import torch

    launchers: dict[str, int] = {}
    for obj in live_autotuners():
        for launcher in getattr(obj, "launchers", None) or []:
            runner = getattr(launcher, "__globals__", {}).get("runner")
            owner = getattr(runner, "__self__", runner)
            kind = type(owner).__name__ if owner is not None else "unknown"
            launchers[kind] = launchers.get(kind, 0) + 1
    torch.cuda.synchronize()
    host_ms = _host_ms_per_call(fn, calls)
    torch.cuda.synchronize()
    gc.disable()  # the same, without Python's garbage collector (a cold process holds more objects)
    try:
        host_ms_gc_off = _host_ms_per_call(fn, calls)
    finally:
        gc.enable()
    torch.cuda.synchronize()
    objects = len(gc.get_objects())
    profile_top, kiln_ms = host_profile(fn, calls)
    torch.cuda.synchronize()
    kernel_us = 0.0
    by_kind: dict[str, float] = {}
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        for event in prof.events():
            if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA:
                us = float(getattr(event, "device_time", 0.0) or 0.0)
                kernel_us += us
                kind = kernel_kind(str(getattr(event, "name", "")))
                by_kind[kind] = by_kind.get(kind, 0.0) + us
        gpu_ms: float | None = kernel_us / 1e3 / calls
    except Exception as exc:  # the profiler is a diagnostic: never the run's failure
        gpu_ms = None
        launchers["profiler_error"] = 0
        print(f"[inductor_models] profiler: {type(exc).__name__}: {exc}", flush=True)
    return {
        "launchers": launchers,
        "host_ms_per_call": host_ms,
        "host_ms_per_call_gc_off": host_ms_gc_off,
        "gc_objects": objects,
        "gpu_kernel_ms_per_call": gpu_ms,
        # the same time split by who made the kernel: Triton's (Inductor's, which kiln compiles)
        # against the rest (cuDNN, cuBLAS, ATen): a GPU running slower shows in both
        "gpu_kernel_ms_per_call_by_kind": {k: round(v / 1e3 / calls, 6) for k, v in by_kind.items()},
        "host_profile_top": profile_top,
        # the host's time per call in kiln's own code (cProfile, own time): kiln installs nothing
        # on a launch, so this stays ~0; a nonzero figure means kiln's code runs on each call
        "kiln_code_ms_per_call": kiln_ms,
    }


def live_autotuners() -> list[Any]:
    """Every Inductor ``CachingAutotuner`` alive in this process (the compiled model's kernels,
    and any other kernel object still referenced)."""
    import gc

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    found = []
    for obj in gc.get_objects():
        try:
            if isinstance(obj, CachingAutotuner):
                found.append(obj)
        except ReferenceError:  # a weak proxy whose object is gone
            continue
    return found


def kernel_kind(name: str) -> str:
    """``triton`` for a kernel Inductor generated with Triton (its names start ``triton_``),
    ``other`` for the rest (cuDNN's convolutions, cuBLAS, ATen's own kernels)."""
    return "triton" if name.startswith("triton_") else "other"


def _host_ms_per_call(fn: Callable[[], Any], calls: int) -> float:
    """Milliseconds the host takes to issue one of ``calls`` calls, no synchronization."""
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) * 1e3 / calls


def host_profile(
    fn: Callable[[], Any], calls: int, top: int = 14
) -> tuple[list[tuple[str, float, float]], float]:
    """cProfile over ``calls`` calls: the ``top`` functions by own time, as (function, own ms per
    call, cumulative ms per call): where the host's time per call goes (cProfile's overhead
    included, alike in both arms); and the own time per call of every function in kiln's
    package (``triton_kiln/``), in ms."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    kiln_s = 0.0
    for (filename, line, name), (_, _, tottime, cumtime, _) in stats.items():
        label = f"{os.path.basename(filename)}:{line}:{name}"
        rows.append((label, tottime * 1e3 / calls, cumtime * 1e3 / calls))
        if f"{os.sep}triton_kiln{os.sep}" in filename:
            kiln_s += tottime
    rows.sort(key=lambda row: row[1], reverse=True)
    top_rows = [(label, round(own, 4), round(cum, 4)) for label, own, cum in rows[:top]]
    return top_rows, round(kiln_s * 1e3 / calls, 4)


def runtime_stats(
    fn: Callable[[], Any], device: str, iters: int, warmup: int, blocks: int, block_iters: int
) -> dict[str, Any]:
    """Both runtime measures, the host's load and this process's threads around them.

    ``runtime_ms`` (the headline): the median over blocks of :func:`block_runtime_ms`. It is a
    median of ``blocks`` means of ``block_iters`` calls each, so one slow call (a host hiccup, a
    page fault) moves it by 1/``block_iters``; it counts the GPU's time between the block's first
    and last kernel, host launch gaps included, and no per-call synchronization.
    ``runtime_wall_ms``: the median of ``iters`` calls each synchronized (host launch, the GPU's
    run and the synchronization's wake-up latency: noisier, kept as it was measured before).
    """
    loadavg_before = os.getloadavg()
    threads_before = thread_cpu_s()
    wall, wall_times = runtime_ms(fn, device, iters, warmup)
    block_times = block_runtime_ms(fn, device, blocks, block_iters)
    threads_after = thread_cpu_s()
    return {
        "runtime_ms": statistics.median(block_times),
        "runtime_blocks_ms": block_times,
        "runtime_block_iters": block_iters,
        "runtime_clock": "cuda_events" if device == "cuda" else "wall",
        "runtime_wall_ms": wall,
        "runtime_wall_iters": len(wall_times),
        "runtime_wall_p10_p90_ms": _p10_p90(wall_times),
        "loadavg_before": list(loadavg_before),
        "loadavg_after": list(os.getloadavg()),
        # CPU seconds each thread of this process spent during the measurement (by thread name):
        # a background thread that wakes up while the model runs shows here
        "threads_cpu_during_runtime_s": cpu_since(threads_before, threads_after),
    }


def cpu_since(before: dict[str, float], after: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds each thread spent between two :func:`thread_cpu_s` snapshots (threads that
    started since count from zero; only those that spent any)."""
    after = thread_cpu_s() if after is None else after
    spent = {name: round(total - before.get(name, 0.0), 6) for name, total in after.items()}
    return {name: value for name, value in spent.items() if value > 0}


def thread_families(spent: dict[str, float]) -> dict[str, float]:
    """``spent`` summed by thread family: the name without its ``[tid]`` and trailing number
    (``kiln-inductor_3[812]`` -> ``kiln-inductor``)."""
    families: dict[str, float] = {}
    for name, value in spent.items():
        family = re.sub(r"[_-]?\d*$", "", name.split("[")[0]) or name
        families[family] = round(families.get(family, 0.0) + value, 6)
    return families


def _p10_p90(times: list[float]) -> list[float]:
    ordered = sorted(times)
    if not ordered:
        return []
    return [ordered[len(ordered) // 10], ordered[min(len(ordered) - 1, (len(ordered) * 9) // 10)]]


def process_cpu_s(pid: int | None) -> float | None:
    """User plus system CPU seconds of process ``pid`` so far; ``None`` without one (or gone)."""
    if pid is None:
        return None
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def descendants_cpu_s() -> dict[int, float]:
    """CPU seconds (user + system) of each process below this one now (every level: Inductor's
    compile pool and its sidecar, kiln's sidecar, zygotes and workers), by pid."""
    import psutil

    found: dict[int, float] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        found[child.pid] = times.user + times.system
    return found


class FirstCallWork:
    """What a first call's compile asked of the machine, for its limit (``limit_s`` of
    :meth:`stop`): the CPU seconds of the processes below this one (compile work: what they spent
    since :meth:`start`, a process started since counting from zero) and of this process's
    threads other than the main one, and the wall time of Inductor's GPU benchmarks in this
    process (``InductorBenchmarker.benchmark_gpu``, outermost calls per thread: the choices'
    timings; with ``--kiln-sandbox`` kiln times them in its sandbox, whose wall is not counted)."""

    def __init__(self) -> None:
        self.benchmark_s = 0.0
        self.benchmarks = 0
        self._children: dict[int, float] = {}
        self._threads: dict[str, float] = {}
        self._undo: Callable[[], None] | None = None

    def start(self) -> None:
        import threading

        self._children = descendants_cpu_s()
        self._threads = thread_cpu_s()
        try:
            from torch._inductor.runtime import benchmarking
        except ImportError:
            return
        owner = benchmarking.InductorBenchmarker
        original = owner.benchmark_gpu
        local = threading.local()
        lock = threading.Lock()

        def benchmark_gpu(bencher: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", False):
                return original(bencher, *args, **kwargs)
            local.inside = True
            started = time.perf_counter()
            try:
                return original(bencher, *args, **kwargs)
            finally:
                local.inside = False
                with lock:
                    self.benchmark_s += time.perf_counter() - started
                    self.benchmarks += 1

        owner.benchmark_gpu = benchmark_gpu

        def undo() -> None:
            owner.benchmark_gpu = original

        self._undo = undo

    def stop(self, cores: int) -> dict[str, Any]:
        """The first call's work since :meth:`start` and its ``limit_s``: the compile work over
        ``cores``, plus the benchmarks' wall time. The main thread's own lowering and code
        generation, which no pool spreads, is outside it (``main_thread_cpu_s`` says how much)."""
        if self._undo is not None:
            self._undo()
            self._undo = None
        now = descendants_cpu_s()
        children = sum(max(0.0, cpu - self._children.get(pid, 0.0)) for pid, cpu in now.items())
        spent = cpu_since(self._threads)
        main = sum(v for name, v in spent.items() if name.startswith("MainThread"))
        threads = sum(spent.values()) - main
        work = children + threads
        return {
            "children_cpu_s": children,
            "threads_cpu_s": threads,
            "main_thread_cpu_s": main,
            "benchmark_gpu_s": self.benchmark_s,
            "benchmarks": self.benchmarks,
            "cores": cores,
            "limit_s": work / max(1, cores) + self.benchmark_s,
        }


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) of each OS thread of this process, by ``name[tid]``: the
    Python thread's name where it is one, else the OS's (``/proc/self/task``; empty without it)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    ticks = _clock_ticks()
    found: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        name = names.get(int(tid)) or stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = _stat_fields(stat)
        found[f"{name}[{tid}]"] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return found


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(stat: str) -> list[str]:
    """A ``/proc/.../stat`` line's fields after the command name (``state`` is field 0 here)."""
    return stat[stat.rindex(")") + 2 :].split()


def _plain(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


def record_coordinate_descent() -> tuple[list[dict[str, Any]], Callable[[], None]]:
    """Record each coordinate-descent tuning Inductor runs in this process (kernel, seconds,
    start and end configs), whoever installed what: the list fills as the model compiles and
    runs. A warm process re-running one is a result the cold process did not leave in the
    autotune cache (``found_by_coordesc``). Returns the list and a function that stops the
    recording: Inductor calls the method on every launch of a template kernel, so the recorder
    must be gone before the model's runtime is measured (it cost 0.4 ms a call of ResNet-50 in
    max-autotune, in both arms)."""
    from torch._inductor.runtime import triton_heuristics

    cls = triton_heuristics.CachingAutotuner
    inner = cls.coordinate_descent_tuning
    seen: list[dict[str, Any]] = []

    def coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        found = inner(self, launcher, *args, **kwargs)
        meta = getattr(self, "inductor_meta", {}) or {}
        seen.append(
            {
                "kernel": meta.get("kernel_name") or getattr(getattr(self, "fn", None), "__name__", "?"),
                "seconds": round(time.perf_counter() - started, 4),
                "from": _plain(dict(getattr(launcher.config, "kwargs", {}))),
                "to": _plain(dict(getattr(getattr(found, "config", None), "kwargs", {}) or {})),
                "save_hook": getattr(self, "save_cache_hook", None) is not None,
            }
        )
        return found

    cls.coordinate_descent_tuning = coordinate_descent_tuning

    def stop() -> None:
        cls.coordinate_descent_tuning = inner

    return seen, stop


CACHE_LOGGERS = ("torch._inductor.codecache", "torch._functorch._aot_autograd.autograd_cache")


def record_cache_events(limit: int = 50) -> tuple[list[str], Callable[[], None]]:
    """Record, at most ``limit`` of them, the messages Inductor's FX graph cache and AOTAutograd's
    cache log at INFO that say why a graph was not served (a bypass, with its reason, or a
    miss): a warm process that lowers a graph again shows here why. Returns the list and a
    function that stops the recording and puts the loggers' levels back."""
    import logging

    seen: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if len(seen) < limit and any(word in message.lower() for word in ("bypass", "miss")):
                seen.append(f"{record.name}: {message[:300]}")

    handler = Recorder(logging.INFO)
    loggers = [logging.getLogger(name) for name in CACHE_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)

    def stop() -> None:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)

    return seen, stop


def compact_coordinate_descent(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with the tunings of one kernel that started and ended at the same config
    folded into one record with a ``count`` (seconds summed): a max-autotune cold process records
    thousands of no-op tunings of template benchmark kernels (``Placeholder.DESCRIPTIVE_NAME``,
    no tunable fields, 0.1 ms each), which would otherwise fill megabytes of JSON."""
    folded: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        key = (record.get("kernel"), record.get("from"), record.get("to"), record.get("save_hook"))
        held = folded.get(key)
        if held is None:
            folded[key] = {**record, "count": record.get("count", 1)}
        else:
            held["count"] += record.get("count", 1)
            held["seconds"] = round(held["seconds"] + record["seconds"], 4)
    return list(folded.values())


def inductor_split(first_call_s: float | None = None) -> dict[str, Any]:
    """What this process's torch recorded about its compiles so far (see the module docstring)."""
    split: dict[str, Any] = {}
    try:
        from torch._dynamo import utils as dynamo_utils
    except ImportError as exc:  # a torch without dynamo: nothing to record
        return {"error": f"ImportError: {exc}"}
    metrics = getattr(dynamo_utils, "compilation_time_metrics", None)
    if isinstance(metrics, dict):
        split["phases"] = {
            str(k): {"count": len(v), "total_s": float(sum(v)), "max_s": float(max(v, default=0.0))}
            for k, v in metrics.items()
            if v
        }
    spent = getattr(dynamo_utils, "calculate_time_spent", None)
    if callable(spent):
        split["time_spent"] = {str(k): float(v) for k, v in spent().items()}
    counters = getattr(dynamo_utils, "counters", None)
    if counters is not None:
        split["counters"] = {
            str(group): {str(k): _plain(v) for k, v in values.items()}
            for group, values in counters.items()
            if values
        }
    try:
        from torch._inductor import metrics as inductor_metrics

        split["inductor_metrics"] = {
            k: v
            for k, v in vars(inductor_metrics).items()
            if not k.startswith("_") and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
    except ImportError:
        pass
    if first_call_s is not None:
        split["first_call_s"] = first_call_s
        frame = split.get("time_spent", {}).get("entire_frame_compile")
        if isinstance(frame, float):
            # what the first call spent outside Dynamo's compile: running the compiled graph and
            # the codegen kernels' runtime autotuning (benchmarks, coordinate descent) on first use
            split["outside_frame_compile_s"] = first_call_s - frame
    return split


def inductor_settings() -> dict[str, Any]:
    """The Inductor settings that shape a compile's cost, as this process sees them."""
    from torch._inductor import config

    names = (
        "compile_threads",
        "max_autotune",
        "max_autotune_pointwise",
        "max_autotune_gemm",
        "coordinate_descent_tuning",
        "autotune_in_subproc",
        "fx_graph_cache",
        "autotune_local_cache",
        "worker_start_method",
        "max_autotune_gemm_backends",
    )
    return {n: _plain(getattr(config, n)) for n in names if hasattr(config, n)}


def main_thread_counters() -> dict[str, float]:
    """This (the calling) thread's kernel counters: user and system CPU seconds, minor and major
    page faults, voluntary and involuntary context switches, and the CPU it is on
    (``/proc/thread-self``; empty without it). Two snapshots' difference says whether a slower
    phase did more work, waited, faulted pages in, or was moved between CPUs."""
    ticks = _clock_ticks()
    try:
        with open("/proc/thread-self/stat") as handle:
            stat = handle.read()
        with open("/proc/thread-self/status") as handle:
            status = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
    except OSError:
        return {}
    fields = _stat_fields(stat)
    return {
        "utime_s": int(fields[11]) / ticks,
        "stime_s": int(fields[12]) / ticks,
        "minflt": float(fields[7]),
        "majflt": float(fields[9]),
        "nvcsw": float(status.get("voluntary_ctxt_switches", "0").strip()),
        "nivcsw": float(status.get("nonvoluntary_ctxt_switches", "0").strip()),
        "cpu": float(fields[36]),
    }


def counters_since(before: dict[str, float]) -> dict[str, float]:
    """:func:`main_thread_counters` now less ``before`` (the CPU: where it was, where it is)."""
    after = main_thread_counters()
    spent = {k: round(after[k] - before[k], 6) for k in after if k in before and k != "cpu"}
    if "cpu" in before and "cpu" in after:
        spent["cpu_before"], spent["cpu_after"] = before["cpu"], after["cpu"]
    return spent


def speed_probe_s(rounds: int = 5) -> float:
    """The best of ``rounds`` timings of a fixed pure-Python workload (dicts, lists, attribute
    lookups: what Dynamo's tracing does), ~20 ms each: how fast this process runs Python right
    now. On the H100 machine the same warm process's phases swing 1.5x from one process to the
    next, for stock and kiln alike; this is recorded beside them to tell the machine's speed
    from an arm's work."""
    import time

    class Box:
        def __init__(self, value: int) -> None:
            self.value = value

    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        table: dict[int, Box] = {}
        for i in range(20000):
            table[i] = Box(i)
        total = sum(box.value for box in table.values() if box.value % 3)
        items = sorted(table.items(), key=lambda kv: -kv[0])[:10]
        best = min(best, time.perf_counter() - started)
        del table, items, total
    return best


def children_cpu_s() -> float:
    """CPU seconds (user + system) this process's child processes, every level, have spent so
    far (those alive now)."""
    import psutil

    return sum(process_cpu_s(child.pid) or 0.0 for child in psutil.Process().children(recursive=True))


def wait_children_quiet(
    timeout_s: float = 90.0, window_s: float = 0.5, quiet_cpu_s: float = 0.05, windows: int = 2
) -> dict[str, Any]:
    """Wait until this process's child processes (every level: Inductor's SubprocPool and its
    workers, kiln's sidecar, zygote and workers) spend under ``quiet_cpu_s`` CPU seconds in each of
    ``windows`` consecutive windows of ``window_s``, or ``timeout_s`` passes. A warm process
    starts its compile pools as a cold one does (Inductor's ``warm_pool()``), and their start-up
    (imports) runs on other cores while the model runs; the paired runtime waits it out in both
    arms alike. Returns what it saw: seconds waited, whether it settled, the children."""
    import psutil

    me = psutil.Process()
    started = time.perf_counter()
    quiet = 0
    busiest = 0.0
    before = children_cpu_s()
    while time.perf_counter() - started < timeout_s:
        time.sleep(window_s)
        now = children_cpu_s()
        spent, before = max(0.0, now - before), now
        busiest = max(busiest, spent)
        quiet = quiet + 1 if spent < quiet_cpu_s else 0
        if quiet >= windows:
            break
    return {
        "waited_s": round(time.perf_counter() - started, 3),
        "settled": quiet >= windows,
        "children": len(me.children(recursive=True)),
        "busiest_window_cpu_s": round(busiest, 3),
    }

"""The real-library ops of ``bench/realworld.py``: what each imports, its inputs, and its call.

Each op is a :class:`Op`: the library modules to import (after ``triton.autotune`` was swapped,
in the kiln arms), and ``build()``, which makes seeded CUDA inputs and returns a
:class:`Case`: ``run()`` runs the op once on those inputs and returns its outputs by name
(tensors). Every arm builds the same inputs (same seed, same shapes), so outputs compare
across processes. Shapes are real-world but modest, so that the slowest arm (Triton's
sequential first call over ~100 configs) stays within about two minutes per op on an H100.

Kernels each op launches (Liger-Kernel 0.8.5, fla-core 0.6.0, flag-gems 5.0.2, torchao 0.18.0,
GemLite 0.6.0.post2, rotary-embedding-torch 0.9.1), with their configs summed over the op's
autotuned kernels, counted from the source. FLA sizes some config lists by the device it finds
(shared memory, Hopper or not): its counts here are those of an import without a GPU, and an H200
run counted 213 for the DPLR forward where the list below has 138:

* ``liger_dyt_fwdbwd_16384x4096`` (128 MB per bf16 tensor) and
  ``liger_dyt_fwdbwd`` (4096x4096, not in the default set): ``_dyt_fwd_kernel`` and
  ``_dyt_bwd_kernel`` (18 configs each, positional calls, grid function; the backward has
  ``reset_to_zero=["DA"]`` and per-program partial sums);
* ``liger_swiglu_fwd``: ``_swiglu_kernel_forward`` of ``liger_kernel.ops.mlp`` (32 configs, host
  TMA descriptors whose block shapes each config's ``pre_hook`` sets, keyword constexpr);
* ``liger_moe_fwd``: routing kernels (plain JIT), ``_fused_up_proj_swiglu_kernel`` and
  ``_fused_down_proj_kernel`` (32 configs each), ``_token_gather_weighted_sum_kernel`` (40),
  keyword calls with lambda grids;
* ``fla_chunk_gla_fwd``: ``chunk_local_cumsum_vector_kernel`` (6), ``chunk_fwd_kernel_h`` (48),
  ``chunk_gla_fwd_A_kernel_intra_sub_inter``/``_sub_intra`` (24, 8) and ``chunk_gla_fwd_kernel_o``
  (36): 122 configs (heuristics over autotune; all but ``chunk_fwd_kernel_h`` are FLA
  ``CachedAutotuner``\\ s);
* ``fla_parallel_simple_gla_fwd``: ``chunk_local_cumsum_scalar_kernel`` (CachedAutotuner, 4) and
  ``parallel_simple_gla_fwd_kernel`` (heuristics over ``triton.autotune``, a heuristic that
  reads a call-time constexpr, ``None`` arguments; 12): 16 configs;
* ``fla_chunk_gdr_fwd`` (not in the default set): the gated delta rule forward, every kernel a
  ``CachedAutotuner`` (5 kernels, 4 + 6 + 9 + 4 + 3 = 26 configs). Its backward is refused by
  FLA on Hopper with Triton < 3.7.1; the forward runs.
* ``fla_chunk_dplr_fwd`` (not in the default set): the DPLR delta rule forward with
  ``chunk_size=64``, which launches ``prepare_wy_repr_fwd_kernel_chunk64`` (heuristics over
  ``triton.autotune``, 9 configs), whose constexpr default ``GATHER_SUPPORTED =
  IS_GATHER_SUPPORTED`` names a constant imported from ``fla.utils`` (another module), besides the
  DPLR ``chunk_dplr_fwd_*``/``chunk_dplr_bwd`` kernels it shares with RWKV-7 (6 kernels: 27 +
  15 + 9 + 12 + 15 + 60 = 138 configs);
* ``flaggems_mm_lmhead`` (not in the default set): ``flag_gems.mm`` on an H100 is FlagGems'
  Hopper ``mm`` (``hopper/ops/mm.py``); with N = 50257 (a GPT-2 LM head, not a multiple of 8)
  ``general_mm`` takes its non-host-TMA branch: it calls **``triton.set_allocator(alloc_fn)``**
  and launches ``mm_kernel_general`` (22 configs from ``hopper/tune_configs.yaml``), whose body
  builds ``tl.make_tensor_descriptor``\\ s (global scratch on every launch; the pointer branch
  runs at this shape). Its autotuner is FlagGems' ``LibTuner`` (a subclass of
  ``triton.runtime.Autotuner`` that overrides ``run``) under ``LibEntry``: ``kiln.install()``
  makes it derive from kiln's class, but its own ``run`` does the tuning, one config at a time
  through Triton's ``_bench`` (the child reports it as not tuned by kiln). At 4096x4096 bf16 the
  host-TMA kernel ``mm_kernel_general_host_tma`` runs instead (no allocator; ~200 configs);
* ``gemlite_a16w8_gemm`` (not in the default set): GemLite 0.6.0.post2's INT8-weight linear
  (``gemlite.helper.A16W8``, bf16 activations, M = N = K = 4096): ``gemm_INT_kernel``,
  ``triton.autotune`` over ``triton.heuristics`` (``EVEN_M/N/K``), 23 "fast" configs rewritten by
  an ``early_config_prune`` (block sizes adapted to M, stages cut to fit shared memory,
  duplicates dropped), called through a ``torch.library`` custom op. The op first calls
  ``gemlite.reset_config()``: GemLite's bundled H100 table would otherwise hand the pruner one
  config and nothing would be tuned;
* ``torchao_scaled_int8_mm`` (not in the default set): torchao's INT8 training matmul
  ``torchao.prototype.quantized_training.int8_mm.scaled_int8_mm`` (4096^3, B a transposed
  weight): ``_scaled_int8_mm_kernel``, ``triton.autotune`` over ``triton.heuristics``
  (``EVEN_K`` from the config's ``BLOCK_K``), 27 configs, key with strides;
* ``rotary_flash_attn_fwdbwd`` (not in the default set): rotary-embedding-torch's fused flash
  attention with rotary embeddings, its public
  ``rotary_embedding_torch.flash_attn_with_rotary.flash_attn_with_rotary`` (causal, GQA: 16 query
  heads over 4 KV heads, head size 64, the first 32 channels rotated, frequencies from its
  ``RotaryEmbedding``), forward and backward through autograd: ``_flash_rotary_fwd_kernel`` and
  ``_flash_rotary_bwd_kernel`` (``triton.autotune``, 2 configs each: 4; key
  ``N_CTX_Q, N_CTX_K, BLOCK_DMODEL``; the backward has ``reset_to_zero=["DQ", "DK", "DV"]`` and
  accumulates with ``tl.atomic_add``). fp16: with bf16 inputs its backward does not compile (a
  bf16 tile times the int32 rotation sign is promoted to fp32, and a ``tl.dot`` then gets bf16
  and fp32). The library is a dependency of native-sparse-attention-pytorch in the corpus.

Libraries the bench can import (versions it was written against): liger-kernel 0.8.5, fla-core
0.6.0, flag-gems 5.0.2 (needs sqlalchemy 2.0.48, pyyaml, packaging), torchao 0.18.0, gemlite
0.6.0.post2 (sdist only on PyPI; needs numpy, tqdm), rotary-embedding-torch 0.9.1 (needs einops).

The corpus's other libraries (``tests/corpus-requirements.txt``) have no op here, because none of
their Triton kernels is autotuned (read from their installed source):

* bitsandbytes 0.50.2: its Triton backend's kernels (``backends/triton/kernels_4bit.py``,
  ``kernels_8bit_quant.py``, ``kernels_optim.py``) are plain ``@triton.jit``; every
  ``@triton.autotune`` above them is commented out.
* lightning-attn 0.0.5: ``lightning_attn2``, ``lightning_attn2_no_decay`` and ``srmsnorm`` are
  plain ``@triton.jit`` kernels, block sizes fixed by its Python code.
* native-sparse-attention-pytorch 0.2.3: plain ``@triton.jit`` kernels only
  (``triton_native_sparse_attention.py``; a comment there names autotune keys, none is used).
* sageattention 1.0.6: plain ``@triton.jit`` INT8 attention and quantization kernels, with
  ``BLOCK_M``/``BLOCK_N`` and warps set by its Python code.
* triton-kernels 0.1.0 (Kernelize AI's package of that name, not Triton's ``triton_kernels``):
  ``add_vectors``, ``add_vectors2`` and ``rotary_embedding_kernel``, plain ``@triton.jit``.
* hyper-connections 0.4.11 (a helper): ``triton_sinkhorn``'s two kernels, plain ``@triton.jit``.
* einops, einx, frozendict, jaxtyping and local-attention (helpers): no Triton kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Outputs = dict[str, Any]


@dataclass(frozen=True)
class Case:
    run: Callable[[], Outputs]


@dataclass(frozen=True)
class Op:
    name: str
    modules: tuple[str, ...]  # imported after the swap; their autotuned kernels are inventoried
    build: Callable[[], Case]
    shape: str  # the sizes, for the results' rows
    default: bool = True
    env: tuple[tuple[str, str], ...] = ()  # set in every arm's process, before any import
    dry_run_env: tuple[tuple[str, str], ...] = ()  # also set with --dry-run (lets it import without a GPU)
    dry_run_setup: Callable[[], None] | None = None  # with --dry-run and no GPU: before the imports


def _randn(*shape: int, dtype: Any = None) -> Any:
    import torch

    return torch.randn(*shape, device="cuda", dtype=dtype or torch.bfloat16)


def _dyt(m: int = 4096, n: int = 4096) -> Case:
    import torch
    from liger_kernel.ops.dyt import liger_dyt_bwd, liger_dyt_fwd

    x = _randn(m, n)
    dy = _randn(m, n)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.float32)
    gamma = torch.randn(n, device="cuda", dtype=torch.float32)
    beta = torch.randn(n, device="cuda", dtype=torch.float32)

    def run() -> Outputs:
        y = liger_dyt_fwd(x, alpha, gamma, beta)
        dx, da, dg, db = liger_dyt_bwd(dy, x, alpha, gamma, beta)
        return {"y": y, "dx": dx, "dalpha": da, "dgamma": dg, "dbeta": db}

    return Case(run)


def _swiglu() -> Case:
    from liger_kernel.ops.mlp import gemm_swiglu

    batch, seq, dim, hidden = 2, 2048, 2048, 5632
    x = _randn(batch, seq, dim)
    gate = _randn(hidden, dim) * 0.02
    up = _randn(hidden, dim) * 0.02

    def run() -> Outputs:
        agu, _config = gemm_swiglu(x, gate, up, 1.0, store_preact=True)
        return {"agu": agu}

    return Case(run)


def _moe() -> Case:
    import torch
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    tokens, hidden, inter, experts, top_k = 4096, 2048, 1024, 16, 2
    x = _randn(tokens, hidden)
    gate_up = _randn(experts, 2 * inter, hidden) * 0.02
    down = _randn(experts, hidden, inter) * 0.02
    logits = torch.randn(tokens, experts, device="cuda")
    weights, index = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    index = index.to(torch.int32).contiguous()
    weights = weights.to(torch.bfloat16).contiguous()

    def run() -> Outputs:
        with torch.no_grad():
            out = LigerFusedMoEFunction.apply(x, gate_up, down, index, weights)
        return {"out": out}

    return Case(run)


def _gla_inputs(batch: int, seq: int, heads: int, dk: int, dv: int) -> tuple[Any, ...]:
    import torch
    import torch.nn.functional as F

    q = _randn(batch, seq, heads, dk)
    k = _randn(batch, seq, heads, dk)
    v = _randn(batch, seq, heads, dv)
    g = F.logsigmoid(torch.randn(batch, seq, heads, dk, device="cuda", dtype=torch.float32)) / 16
    return q, k, v, g


def _chunk_gla() -> Case:
    import torch
    from fla.ops.gla import chunk_gla

    q, k, v, g = _gla_inputs(4, 2048, 8, 128, 128)

    def run() -> Outputs:
        with torch.no_grad():
            o, _state = chunk_gla(q, k, v, g)
        return {"o": o}

    return Case(run)


def _parallel_simple_gla() -> Case:
    import torch
    import torch.nn.functional as F
    from fla.ops.simple_gla import parallel_simple_gla

    q, k, v, _ = _gla_inputs(4, 2048, 8, 128, 128)
    g = F.logsigmoid(torch.randn(4, 2048, 8, device="cuda", dtype=torch.float32)) / 16

    def run() -> Outputs:
        with torch.no_grad():
            o, _attn = parallel_simple_gla(q, k, v, g)
        return {"o": o}

    return Case(run)


def _chunk_gdr() -> Case:
    import torch
    import torch.nn.functional as F
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    batch, seq, heads, dk, dv = 4, 2048, 8, 128, 128
    q, k, v, _ = _gla_inputs(batch, seq, heads, dk, dv)
    k = F.normalize(k.float(), p=2, dim=-1).to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(batch, seq, heads, device="cuda", dtype=torch.float32)) / 16
    beta = torch.rand(batch, seq, heads, device="cuda", dtype=torch.bfloat16)

    def run() -> Outputs:
        with torch.no_grad():
            o, _state = chunk_gated_delta_rule(q, k, v, g, beta)
        return {"o": o}

    return Case(run)


def _chunk_dplr() -> Case:
    import torch
    import torch.nn.functional as F
    from fla.ops.generalized_delta_rule import chunk_dplr_delta_rule

    batch, seq, heads, dk, dv = 4, 2048, 16, 64, 64  # RWKV-7's head size
    q, k, v, _ = _gla_inputs(batch, seq, heads, dk, dv)
    kk = F.normalize(k.float(), p=2, dim=-1)
    a = (-kk).to(torch.bfloat16)
    b = (kk * torch.rand(batch, seq, heads, 1, device="cuda")).to(torch.bfloat16)
    gk = (F.logsigmoid(torch.randn(batch, seq, heads, dk, device="cuda")) / 16).to(torch.bfloat16)

    def run() -> Outputs:
        with torch.no_grad():
            o, _state = chunk_dplr_delta_rule(q, k, v, a, b, gk, chunk_size=64)
        return {"o": o}

    return Case(run)


def _flaggems_mm() -> Case:
    import flag_gems

    m, k, n = 4096, 768, 50257  # GPT-2's LM head: N is not a multiple of 8, so no host TMA
    a = _randn(m, k)
    b = _randn(k, n) * 0.05

    def run() -> Outputs:
        return {"c": flag_gems.mm(a, b)}

    return Case(run)


def _torchao_int8_mm() -> Case:
    import torch
    from torchao.prototype.quantized_training.int8_mm import scaled_int8_mm

    m, k, n = 4096, 4096, 4096
    x = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
    weight = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
    row_scale = torch.rand(m, device="cuda", dtype=torch.bfloat16) * 1e-4
    col_scale = torch.rand(n, device="cuda", dtype=torch.bfloat16) * 1e-2

    def run() -> Outputs:
        return {"out": scaled_int8_mm(x, weight.T, row_scale, col_scale)}

    return Case(run)


def _gemlite_a16w8() -> Case:
    import gemlite
    import torch

    # GemLite ships tuned tables (configs/h100.json) that its pruner serves before any tuning;
    # dropped here, so the call tunes as it does for a shape or device the table lacks.
    gemlite.reset_config()
    m, k, n = 4096, 4096, 4096
    weight = _randn(n, k) * 0.02
    layer = gemlite.helper.A16W8(device="cuda").from_weights(weight)  # INT8 weights, channel scales
    x = _randn(m, k)

    def run() -> Outputs:
        with torch.no_grad():
            return {"out": layer(x)}

    return Case(run)


def _rotary_flash_attn() -> Case:
    import torch
    from rotary_embedding_torch import RotaryEmbedding
    from rotary_embedding_torch.flash_attn_with_rotary import flash_attn_with_rotary

    # fp16: the backward kernel compiles for fp16 or fp32 only (with bf16 inputs Triton promotes
    # the rotation, a bf16 tile times an int32 sign, to fp32, and its tl.dot gets bf16 and fp32)
    batch, seq, q_heads, kv_heads, dim, rotary_dim = 4, 2048, 16, 4, 64, 32
    half = torch.float16
    q = _randn(batch, q_heads, seq, dim, dtype=half).requires_grad_()
    k = _randn(batch, kv_heads, seq, dim, dtype=half).requires_grad_()
    v = _randn(batch, kv_heads, seq, dim, dtype=half).requires_grad_()
    do = _randn(batch, q_heads, seq, dim, dtype=half)
    freqs = RotaryEmbedding(dim=rotary_dim)(torch.arange(seq)).to("cuda", half)  # (seq, rotary_dim)

    def run() -> Outputs:
        o = flash_attn_with_rotary(q, k, v, rotary_pos_emb=freqs, is_causal=True)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        return {"o": o.detach(), "dq": dq, "dk": dk, "dv": dv}

    return Case(run)


def fake_h100() -> None:
    """What GemLite asks of the device at import (``torch.cuda`` properties, Triton's active
    driver), answered as an H100 would, for ``--dry-run`` and the compile check on a machine with
    no GPU. Nothing here can launch: ``torch.cuda.is_available()`` stays ``False``."""
    from types import SimpleNamespace

    import torch
    import triton
    from triton.backends.compiler import GPUTarget

    props = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=80 << 30,
        shared_memory_per_block_optin=232448,
        L2_cache_size=50 << 20,
    )
    device_info = {
        "max_shared_mem": 232448,
        "multiprocessor_count": 132,
        "max_num_regs": 65536,
        "warpSize": 32,
        "sm_clock_rate": 1980000,
        "mem_clock_rate": 2619000,
        "mem_bus_width": 5120,
    }

    class _Driver:
        utils = SimpleNamespace(get_device_properties=lambda device: dict(device_info))

        def get_current_target(self) -> Any:
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: Any = None) -> int:
            return 0

        def is_active(self) -> bool:
            return True

    torch.cuda.get_device_properties = lambda *a, **k: props
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_name = lambda *a, **k: props.name
    triton.runtime.driver.set_active(_Driver())


# FlagGems picks its vendor by running nvidia-smi and its arch from the device; its tuning database
# is named after the device. With no GPU (--dry-run), these settings let it import as on an H100.
_FLAGGEMS_DRY_RUN = (("GEMS_VENDOR", "nvidia"), ("ARCH", "sm_90"), ("FLAGGEMS_DB_URL", "sqlite://"))


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op(
            "liger_dyt_fwdbwd_16384x4096",
            ("liger_kernel.ops.dyt",),
            lambda: _dyt(16384, 4096),
            "16384x4096 bf16 fwd+bwd",
        ),
        Op("liger_dyt_fwdbwd", ("liger_kernel.ops.dyt",), _dyt, "4096x4096 bf16 fwd+bwd", default=False),
        Op("liger_swiglu_fwd", ("liger_kernel.ops.mlp",), _swiglu, "x 2x2048x2048, W 5632x2048 bf16"),
        Op(
            "liger_moe_fwd",
            ("liger_kernel.ops.fused_moe",),
            _moe,
            "4096 tokens, 2048->1024, 16 experts, top 2",
        ),
        Op("fla_chunk_gla_fwd", ("fla.ops.gla",), _chunk_gla, "B4 T2048 H8 K128 V128 bf16"),
        Op(
            "fla_parallel_simple_gla_fwd",
            ("fla.ops.simple_gla",),
            _parallel_simple_gla,
            "B4 T2048 H8 K128 V128 bf16",
        ),
        Op(
            "fla_chunk_gdr_fwd",
            ("fla.ops.gated_delta_rule",),
            _chunk_gdr,
            "B4 T2048 H8 K128 V128 bf16",
            default=False,
        ),
        Op(
            "fla_chunk_dplr_fwd",
            ("fla.ops.generalized_delta_rule",),
            _chunk_dplr,
            "B4 T2048 H16 K64 V64 bf16, chunk 64",
            default=False,
        ),
        Op(
            "flaggems_mm_lmhead",
            ("flag_gems",),
            _flaggems_mm,
            "4096x768 @ 768x50257 bf16",
            default=False,
            dry_run_env=_FLAGGEMS_DRY_RUN,
        ),
        Op(
            "torchao_scaled_int8_mm",
            ("torchao.prototype.quantized_training.int8_mm",),
            _torchao_int8_mm,
            "4096^3 int8",
            default=False,
        ),
        Op(
            "gemlite_a16w8_gemm",
            ("gemlite", "gemlite.triton_kernels.gemm_kernels"),
            _gemlite_a16w8,
            "4096^3 bf16 x int8",
            default=False,
            dry_run_setup=fake_h100,
        ),
        Op(
            "rotary_flash_attn_fwdbwd",
            ("rotary_embedding_torch.flash_attn_with_rotary",),
            _rotary_flash_attn,
            "B4 T2048 Hq16 Hkv4 D64 fp16, rotary 32, causal, fwd+bwd",
            default=False,
        ),
    )
}
DEFAULT_OPS = [name for name, op in OPS.items() if op.default]

"""The corpus's libraries and how they call their kernels (data for ``bench/corpus.py``).

Each library names its pinned version, the packages whose modules hold its kernels, and the
argument types it passes: a default element type for its tensors, the element types of the
tensors it passes as indices, the names of its float scalars, and per-kernel overrides (a
signature type or a constexpr value, as the library's own call site passes it). Everything
else is derived from the kernel itself (see ``bench/corpus.py``): pointers from how the body
uses them, constexprs from the autotune config, the heuristics and the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Argument names that, in every library here, are tensors of indices or lengths.
INDEX_POINTERS = (
    r"(?i)^(cu_seqlens\w*|chunk_indices\w*|chunk_offsets\w*|offsets\w*|indices\w*|idx\w*|\w*_idx\w*|"
    r"\w*_ids?(_ptr)?|\w*indices_ptr|\w*index_ptr|labels?\w*|target_ptr|y_ptr|\w*_token_ids?\w*|"
    r"\w*expert_ids?\w*|num_tokens_post_padded\w*|sorted_token_ids\w*|block_count\w*|block_offset\w*|"
    r"\w*_counts?_ptr|\w*positions?\w*|seq_?lens?\w*|lengths?\w*|\w*_lens_ptr|kv_block_indices\w*|sel_\w*indices\w*)$"
)
# Scalar arguments that every library here passes as Python floats.
FLOAT_SCALARS = (
    r"(?i)^(scale|sm_scale|softmax_scale|qk_scale|eps|epsilon|alpha|beta|gamma|lr|momentum|weight_decay|"
    r"softcap|logit_softcapping|temperature|label_smoothing|\w*_scale|\w*_eps|lse_square_scale|"
    r"z_loss_scale|offset|init_value|min_val|max_val|threshold|p|dropout_p|beta1|beta2|eps_\w*|"
    r"lambd|clip|bias_correction\w*|step_size|decay|norm|norm_type|ignore_scale|scale_\w*)$"
)


@dataclass(frozen=True)
class Library:
    """One pinned library of the corpus."""

    name: str  # distribution name on the package index
    version: str
    packages: tuple[str, ...]  # import packages whose modules hold the kernels
    pointer_dtype: str = "fp32"  # element type of a tensor argument, unless said otherwise
    index_dtype: str = "i32"
    # Per kernel (qualified name, or bare function name): argument -> signature type or
    # ("constexpr", value).
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Module names (prefixes) left out: tests, benchmarks, modules that need a GPU to import.
    exclude: tuple[str, ...] = ()
    # Constexpr values used when a kernel gives none (name -> value), before the generic guesses.
    constexprs: dict[str, Any] = field(default_factory=dict)
    # Signature types by argument name (regular expression -> type), for every kernel.
    param_types: dict[str, str] = field(default_factory=dict)


LIBRARIES: tuple[Library, ...] = (
    Library(
        name="liger-kernel",
        version="0.8.5",
        packages=("liger_kernel",),
        exclude=("liger_kernel.transformers.trainer", "liger_kernel.chunked_loss"),
        constexprs={"HC": 4},  # mHC: 4 hyper-connection streams, as its module's default
        overrides={
            "liger_cross_entropy_kernel": {"Y_ptr": "*i64"},
            "_jsd_kernel": {"label_ptr": "*i64"},
            "_cross_entropy_kernel": {"Y_ptr": "*i64"},
        },
    ),
    Library(
        name="fla-core",
        version="0.6.0",
        packages=("fla",),
        pointer_dtype="bf16",
        exclude=("fla.models", "fla.layers"),
        overrides={
            # Based's feature maps are 16 wide; its calls use 16-row chunks (fused) or 64/32 tiles
            "fla.ops.based.fused_chunk.": {
                n: ("constexpr", v) for n, v in {"K": 16, "BT": 16, "BK": 16, "BV": 32}.items()
            },
            "fla.ops.based.parallel.": {
                n: ("constexpr", v) for n, v in {"K": 16, "BK": 16, "BV": 32, "BTL": 64, "BTS": 32}.items()
            },
        },
    ),
    Library(
        name="torchao",
        version="0.18.0",
        packages=("torchao",),
        pointer_dtype="bf16",
        exclude=("torchao.testing", "torchao._models", "torchao.experimental"),
    ),
    Library(
        name="bitsandbytes",
        version="0.50.2",
        packages=("bitsandbytes",),
        pointer_dtype="fp16",
        # 4-bit and 8-bit data are uint8, code books, absmax and 32-bit optimizer states fp32
        param_types={
            r"^(a_ptr|out_ptr)$": "*u8",
            r"^(code_ptr|quant_ptr|absmax\d?_ptr|qmap\d?_ptr|state\d?_ptr|unorm_ptr)$": "*fp32",
        },
        overrides={
            "quantize_4bit_blockwise_kernel": {"out_ptr": "*u8"},
            "quantize_fp4_blockwise_kernel": {"out_ptr": "*u8"},
            "quantize_nf4_blockwise_kernel": {"out_ptr": "*u8"},
            "quantize_8bit_blockwise_kernel": {"out_ptr": "*u8"},
            "dequant_8bit_kernel": {"out_ptr": "*fp16"},
            "_optimizer_precondition_1state_32bit": {"OPTIMIZER_ID": ("constexpr", 0)},
            "_optimizer_update_1state_32bit_triton_kernel": {"OPTIMIZER_ID": ("constexpr", 0)},
            "_optimizer_update_1state_8bit_blockwise_triton_kernel": {"OPTIMIZER_ID": ("constexpr", 0)},
        },
        # Adam (bitsandbytes' OPTIMIZER_ID 3), 256-element blocks, 4 per thread, no max_unorm
        constexprs={"OPTIMIZER_ID": 3, "N_PER_TH": 4, "BLOCK_SIZE": 256, "max_unorm": 0.0, "QUANT_BLOCK": 64},
    ),
    Library(name="lightning-attn", version="0.0.5", packages=("lightning_attn",), pointer_dtype="bf16"),
    Library(
        name="native-sparse-attention-pytorch",
        version="0.2.3",
        packages=("native_sparse_attention_pytorch",),
        pointer_dtype="fp16",
        # its call: BLOCK=16, 64-token selection blocks, 4 query heads per kv head
        constexprs={
            "BLOCK": 16,
            "SEL_BLOCK": 64,
            "QUERY_HEAD_GROUPS": 4,
            "NUM_SEL_KV_BLOCKS": 2,
            "NUM_BLOCKS_PER_SEL": 4,
            "INCLUDE_BLOCK_CAUSAL": True,
            "SLIDING": False,
            "BLOCK_DV_USE_DOT": False,
            "BLOCK_DK_USE_DOT": False,
        },
        param_types={r"^kv_block_mask$": "*i1"},
    ),
    Library(
        name="sageattention",
        version="1.0.6",
        packages=("sageattention",),
        pointer_dtype="fp16",
        # int8 q/k with fp32 scales, head dim 128, causal stage 3 (its call for causal kernels)
        param_types={r"^(Q|K|Output)$": "*i8", r"^(Q_scale|K_scale|Scale)$": "*fp32"},
        constexprs={"STAGE": 3, "HEAD_DIM": 128, "BLOCK_M": 128, "BLOCK_N": 64, "num_kv_groups": 1, "H": 32},
    ),
    Library(name="triton-kernels", version="0.1.0", packages=("triton_kernels",)),
)

# The fixed sample that CI compiles: a few kernels of every library (bare function names).
SAMPLE: dict[str, tuple[str, ...]] = {
    "liger-kernel": (
        "liger_kernel.ops.fused_moe_kernels._token_gather_weighted_sum_kernel",  # autotuned
        "liger_kernel.ops.fused_neighborhood_attention._neighborhood_mask_kernel",
    ),
    "fla-core": (
        "fla.modules.norm.l2norm.l2norm_bwd_kernel_row",  # autotuned
        "fla.modules.fused_linear_cross_entropy.ops.elementwise_mul_kernel",
    ),
    "torchao": (
        "torchao.prototype.float8nocompile.kernels.fp8_dynamic_tensorwise._to_fp8_row_major",  # autotuned
        "torchao.prototype.attention.quantization.triton_qkv_quantization.single_reduce_kernel",
    ),
    "bitsandbytes": (
        "bitsandbytes.backends.triton.kernels_4bit.dequant_nf4_kernel",
        "bitsandbytes.backends.triton.kernels_optim._optimizer_update_2state_8bit_blockwise_triton_kernel",
    ),
    "lightning-attn": (
        "lightning_attn.ops.triton.srmsnorm.srms_norm_fw",
        "lightning_attn.ops.triton.lightning_attn2_no_decay._fwd_kernel",
    ),
    "native-sparse-attention-pytorch": (
        "native_sparse_attention_pytorch.triton_native_sparse_attention.backward_preprocess_do_o_dot",
        "native_sparse_attention_pytorch.triton_native_sparse_attention.forward_kernel",  # heuristics
    ),
    "sageattention": (
        "sageattention.attn_qk_int8_per_block_h96._attn_fwd",
        "sageattention.quant_per_block.quant_per_block_int8_kernel",
    ),
    "triton-kernels": ("triton_kernels.rotary_embedding.rotary_embedding_kernel",),
}


def library(name: str) -> Library:
    for lib in LIBRARIES:
        if lib.name == name:
            return lib
    raise KeyError(f"no library {name!r} in the corpus; it has {[x.name for x in LIBRARIES]}")

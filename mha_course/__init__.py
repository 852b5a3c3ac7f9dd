"""mha_course: the helper package of the multi-head attention course.

Each chapter leaves its code here; later chapters import it instead of pasting it again.
"""

from .device import describe_device, get_device
from .gqa import kv_cache_bytes, kv_group_of_query_heads, mean_pool_heads, mha_to_gqa
from .kv_cache import KVCache
from .masks import causal_mask, combine_masks, padding_mask, to_additive, torch_mha_mask_to_sdpa
from .mha import MultiHeadAttention, merge_heads, split_heads
from .mla import LatentKVCache, MultiHeadLatentAttention
from .numpy_attention import dot_product_attention, softmax
from .paged import (
    BlockPool,
    PagedKVCache,
    continuous_batching,
    paged_attention,
    paged_forward,
    slots_needed,
)
from .plotting import plot_attention, plot_heads
from .positions import LearnedPositionEmbedding, alibi_bias, alibi_slopes, sinusoidal_positions
from .pruning import activation_importance, gradient_importance, prune_heads, prune_model_heads
from .quant_cache import QuantizedKVCache, dequantize, quantize, quantized_cache_bytes
from .rope import apply_rope, convert_rope_layout, rope_angles, rope_frequencies, rope_permutation
from .sdpa import repeat_kv, scaled_dot_product_attention, stable_softmax
from .single_head import SelfAttentionHead
from .static_kv_cache import StaticKVCache
from .tiled import online_softmax_update, tiled_attention
from .tiny_lm import TinyCausalLM
from .window import SlidingWindowCache, layout_cache_bytes, receptive_field, sliding_window_mask

__version__ = "0.1.0"

from .gpt import GPT, GPTConfig, evaluate, generate, load_checkpoint  # noqa: E402  (chapter 13)
from .grading.hints import hint  # noqa: E402  (the exercises' hints, one level per call)

__all__ = [
    "hint",
    "activation_importance", "gradient_importance", "prune_heads", "prune_model_heads",
    "online_softmax_update", "tiled_attention",
    "GPT", "GPTConfig", "evaluate", "generate", "load_checkpoint", "StaticKVCache",
    "LearnedPositionEmbedding", "alibi_bias", "alibi_slopes", "sinusoidal_positions",
    "apply_rope", "convert_rope_layout", "rope_angles", "rope_frequencies", "rope_permutation",
    "KVCache",
    "SlidingWindowCache", "layout_cache_bytes", "receptive_field", "sliding_window_mask",
    "LatentKVCache", "MultiHeadLatentAttention",
    "QuantizedKVCache", "dequantize", "quantize", "quantized_cache_bytes",
    "BlockPool", "PagedKVCache", "continuous_batching", "paged_attention", "paged_forward", "slots_needed",
    "MultiHeadAttention",
    "SelfAttentionHead",
    "TinyCausalLM",
    "causal_mask",
    "combine_masks",
    "describe_device",
    "dot_product_attention",
    "get_device",
    "kv_cache_bytes",
    "kv_group_of_query_heads",
    "mean_pool_heads",
    "merge_heads",
    "mha_to_gqa",
    "padding_mask",
    "plot_attention",
    "plot_heads",
    "repeat_kv",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "stable_softmax",
    "to_additive",
    "torch_mha_mask_to_sdpa",
]

"""mha_course: the helper package of the multi-head attention course.

Each chapter leaves its code here; later chapters import it instead of pasting it again.
"""

from .device import describe_device, get_device
from .gqa import kv_cache_bytes, kv_group_of_query_heads, mean_pool_heads, mha_to_gqa
from .kv_cache import KVCache
from .masks import causal_mask, combine_masks, padding_mask, to_additive, torch_mha_mask_to_sdpa
from .mha import MultiHeadAttention, merge_heads, split_heads
from .numpy_attention import dot_product_attention, softmax
from .plotting import plot_attention, plot_heads
from .positions import LearnedPositionEmbedding, alibi_bias, alibi_slopes, sinusoidal_positions
from .pruning import activation_importance, gradient_importance, prune_heads, prune_model_heads
from .rope import apply_rope, convert_rope_layout, rope_angles, rope_frequencies, rope_permutation
from .sdpa import repeat_kv, scaled_dot_product_attention, stable_softmax
from .single_head import SelfAttentionHead
from .tiled import online_softmax_update, tiled_attention
from .tiny_lm import TinyCausalLM

__version__ = "0.1.0"

__all__ = [
    "activation_importance", "gradient_importance", "prune_heads", "prune_model_heads",
    "online_softmax_update", "tiled_attention",
    "LearnedPositionEmbedding", "alibi_bias", "alibi_slopes", "sinusoidal_positions",
    "apply_rope", "convert_rope_layout", "rope_angles", "rope_frequencies", "rope_permutation",
    "KVCache",
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

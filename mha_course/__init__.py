"""mha_course: the helper package of the multi-head attention course.

Each chapter leaves its code here; later chapters import it instead of pasting it again.

``import mha_course`` loads nothing else yet: each name below is imported from its module the
first time it is used (``mha_course.KVCache``, ``from mha_course import KVCache``), and so is a
submodule (``mha_course.masks``). A notebook pays only for what it uses - matplotlib only when
it plots - and so does each graded unit, which imports the course afresh (``mha_grader/child.py``).
"""

from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

# name -> the module that defines it (one place: ``__all__`` and the lazy lookup both read it).
# Lazy by PEP 562 (a module's ``__getattr__``): a dozen lines, so no dependency for it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["describe_device", "get_device"], "device"),
    **dict.fromkeys(["Cache", "kv_cache_bytes"], "cache"),  # the caches' one interface and byte formula
    **dict.fromkeys(["kv_group_of_query_heads", "mean_pool_heads", "mha_to_gqa"], "gqa"),
    "KVCache": "kv_cache",
    **dict.fromkeys(["causal_mask", "combine_masks", "padding_mask", "to_additive",
                     "torch_mha_mask_to_sdpa"], "masks"),
    **dict.fromkeys(["MultiHeadAttention", "merge_heads", "split_heads"], "mha"),
    **dict.fromkeys(["LatentKVCache", "MultiHeadLatentAttention"], "mla"),
    **dict.fromkeys(["dot_product_attention", "softmax"], "numpy_attention"),
    **dict.fromkeys(["BlockPool", "slots_needed"], "block_pool"),  # chapter 16's paged cache, by concept
    **dict.fromkeys(["PagedKVCache", "PagedSequence"], "paged_cache"),  # (all re-exported by mha_course.paged)
    **dict.fromkeys(["continuous_batching", "paged_attention", "paged_forward"], "paged_decode"),
    **dict.fromkeys(["plot_attention", "plot_heads"], "plotting"),
    **dict.fromkeys(["LearnedPositionEmbedding", "alibi_bias", "alibi_slopes",
                     "sinusoidal_positions"], "positions"),
    **dict.fromkeys(["activation_importance", "gradient_importance", "prune_heads",
                     "prune_model_heads"], "pruning"),
    **dict.fromkeys(["QuantizedKVCache", "dequantize", "quantize", "quantized_cache_bytes"], "quant_cache"),
    **dict.fromkeys(["KIVICache", "fake_quant_asymmetric", "fake_quant_fp8", "scheme_bytes_per_token"], "quant_schemes"),
    **dict.fromkeys(["apply_rope", "convert_rope_layout", "rope_angles", "rope_frequencies",
                     "rope_permutation"], "rope"),
    **dict.fromkeys(["repeat_kv", "scaled_dot_product_attention", "stable_softmax"], "sdpa"),
    "SelfAttentionHead": "single_head",
    **dict.fromkeys(["bootstrap_ci", "k_of_n", "loglog_slope", "paired_diff_ci"], "stats"),  # intervals
    "StaticKVCache": "static_kv_cache",
    "RenumberedSinkCache": "sink_cache",  # chapter 14: StreamingLLM's positions in the cache
    **dict.fromkeys(["online_softmax_update", "tiled_attention"], "tiled"),
    "TinyCausalLM": "tiny_lm",
    **dict.fromkeys(["SlidingWindowCache", "layout_cache_bytes", "receptive_field",
                     "sliding_window_mask"], "window"),
    **dict.fromkeys(["GPT", "GPTConfig", "evaluate", "generate", "load_checkpoint"], "gpt"),  # chapter 13
    "hint": "grading.hints",  # the exercises' hints, one level per call
    "progress": "learner_progress",  # every exercise's items and points so far, the next hints
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> object:
    """Import ``name`` (an exported function or class, or a submodule) on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

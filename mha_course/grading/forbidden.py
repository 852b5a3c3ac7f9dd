"""Forbidden lists shared by the chapters: every package or torch function that would COMPUTE an
item's answer for the learner (reviewed per item; see each ``chNN.py`` for the item's own names).

The class grader removes these from the staged package a sandbox sees and tripwires torch's; a
name here must resolve (the engine checks). Never forbid something an item's own driver needs in
the child (ex05's TinyCausalLM uses MultiHeadAttention and KVCache).
"""

from __future__ import annotations

TORCH_SDPA = "torch.nn.functional.scaled_dot_product_attention"
TORCH_MHA = ("torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward")
COURSE_SDPA = "mha_course.ops.sdpa.scaled_dot_product_attention"
COURSE_MHA = "mha_course.attention.mha.MultiHeadAttention"
TILED = (
    "mha_course.kernels.tiled.tiled_attention",
    "mha_course.kernels.tiled.online_softmax_update",
)
# Other package code that returns softmax(Q Kᵀ / sqrt(D)) V given Q, K, V (or a module doing it).
OTHER_ATTENTION = (
    "mha_course.attention.single_head.SelfAttentionHead",
    "mha_course.benchmark.variants.bare_attention",
    "mha_course.benchmark.variants.bare_sdpa_with_projections",
    "mha_course.benchmark.backends.forced_sdpa",
    "mha_course.caches.per_head.attention_by_head",  # Q and a loader of (K, V) per head
    "mha_course.families.layers.capped_attention",  # soft-capped; with cap=None plain attention
    "mha_course.kernels.tiled_fast.tiled_attention_fast",  # chapter 9's tiles, the passes cut
    "mha_course.kernels.tiled_fast._query_block",  # ... and its worker, called with its set-up
    # chapter 17's Triton forward: with [V | I] as values it returns the weights too, and extra
    # columns of Q and K carry a mask (launch_forward stays: ex17's driver needs it; with the
    # course's own kernel it needs _fwd_kernel)
    "mha_course.kernels.triton_flash.triton_forward",
    "mha_course.kernels.triton_flash.triton_flash_attention",
    "mha_course.kernels.triton_flash.TritonFlashAttention",
    "mha_course.kernels.triton_kernels._fwd_kernel",
)

# Items that ask for attention itself (a head, MHA, GQA, cross-attention, blockwise).
ATTENTION = (TORCH_SDPA, COURSE_SDPA, *TORCH_MHA, COURSE_MHA, *TILED, *OTHER_ATTENTION)
# Course functions that return the (L, S) causal mask from its sizes: a sliding window at least
# as wide as the sequence is one (``_visible`` is the window's rule, unchecked). FlexAttention's
# mask functions (``ops.flex_masks``) stay allowed: evaluated on index grids they give it too,
# but that is the comparison the item asks for, written by hand.
CAUSAL_MASKS = (
    "mha_course.ops.masks.causal_mask",
    "mha_course.caches.window.sliding_window_mask",
    "mha_course.caches.window._visible",
    "mha_course.attention.inputs.build_mask",  # with `positions` it applies the causal rule itself
)
# NumPy attention of chapter 1 (it takes a scale, so it also answers chapter 2-4 items on arrays).
NUMPY_ATTENTION = ("mha_course.ops.numpy_attention.dot_product_attention",)


def defining_name(obj) -> str:
    """``module.qualname`` where ``obj`` is DEFINED — the form a forbidden list needs. Items that
    reach package code through its public ``mha_course`` name use this, so moving a function to
    another module does not leave a stale dotted name behind."""
    return f"{obj.__module__}.{obj.__qualname__}"

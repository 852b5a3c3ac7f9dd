"""Chapter 7's graded items: repeating key/value heads, a GQA forward pass from given weights,
KV-cache bytes for a model config, and mean-pooling key/value heads (MHA -> GQA); then predict a
GQA layer's parameters and pick the config with the smallest KV cache. Their cases, references
and mistake variants are :mod:`mha_course.grading.oracles.gqa`'s."""

from __future__ import annotations

from mha_course.attention.gqa import mean_pool_heads
from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import ATTENTION, COURSE_MHA, TORCH_MHA
from mha_course.grading.oracles.gqa import (  # noqa: F401 - names of ch07.py before its split
    _ELEMENT_DTYPES,
    GQA_PARAMS_H,
    GQA_PARAMS_KV_BIAS,
    GQA_PARAMS_NO_W_O,
    HEADS_NOT_MERGED,
    REPEAT_ON_SEQUENCE,
    _bytes_cases,
    _bytes_reference,
    _cache_per_token,
    _configs,
    _f32,
    _forward_cases,
    _gqa_forward_reference,
    _gqa_forward_variant,
    _gqa_params,
    _gqa_params_cases,
    _grouped,
    _pool_cases,
    _pool_not_flattened,
    _pool_strided,
    _repeat_cases,
    _smallest,
)
from mha_course.ops.sdpa import repeat_kv
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex07_mqa_gqa"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."
_ATTENTION_FORBID = (*ATTENTION, "mha_course.attention.gqa.mha_to_gqa")

ITEMS = [
    Item(
        id="ex07_repeat_kv",
        notebook=NOTEBOOK,
        function="repeat_kv_heads",
        points=1,
        task="(B, G, S, D) -> (B, G * n_rep, S, D), each key/value head copied next to itself",
        make_cases=_repeat_cases,
        shape="(B, G * n_rep, S, D)",
        reference=lambda x, n: repeat_kv(x, n),
        mistakes=(
            Mistake(
                "repeat",
                M.REPEAT_NOT_INTERLEAVE,
                variant=lambda x, n: M.repeat_kv_with_repeat(x, n),
            ),
            Mistake(
                "wrong axis",
                REPEAT_ON_SEQUENCE,
                variant=lambda x, n: x.repeat_interleave(n, dim=-2),
            ),
        ),
        forbidden=(
            "mha_course.ops.sdpa.repeat_kv",
            "mha_course.attention.gqa.kv_group_of_query_heads",
        ),
    ),
    Item(
        id="ex07_gqa_forward",
        uses=("repeat_kv_heads",),
        substitutes=(("repeat_kv_heads", _SUB + "repeat_kv_heads"),),
        notebook=NOTEBOOK,
        function="gqa_forward",
        points=3,
        task="grouped-query self-attention from W_Q, W_K, W_V, W_O (no bias, no mask), and its per-head weights",
        make_cases=_forward_cases,
        shape="(B, T, E), (B, H, T, T)",
        reference=_gqa_forward_reference,
        mistakes=(
            Mistake(
                "repeat",
                M.REPEAT_NOT_INTERLEAVE,
                variant=lambda *a: _gqa_forward_variant(*a, expand=M.repeat_kv_with_repeat),
            ),
            Mistake(
                "split with view",
                M.SPLIT_WITH_VIEW,
                variant=lambda *a: _gqa_forward_variant(*a, split=M.split_heads_with_view),
            ),
            Mistake(
                "scaled by sqrt(E)",
                M.SCALE_BY_E,
                variant=lambda *a: _gqa_forward_variant(*a, scale="sqrt_e"),
            ),
            Mistake(
                "no scaling", M.NO_SCALE, variant=lambda *a: _gqa_forward_variant(*a, scale="none")
            ),
            Mistake("heads not merged", HEADS_NOT_MERGED, matches=lambda out, case: out.ndim == 4),
            Mistake(
                "no W_O", M.NO_W_O, variant=lambda *a: _gqa_forward_variant(*a, out_proj=False)
            ),
        ),
        forbidden=_ATTENTION_FORBID,
    ),
    Item(
        id="ex07_kv_cache_bytes",
        notebook=NOTEBOOK,
        function="kv_cache_size",
        points=1,
        task="bytes of the KV cache: 2 · n_layers · G · D · bytes_per_element · seq_len · batch",
        make_cases=_bytes_cases,
        shape="()",
        reference=_bytes_reference,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            *M.kv_bytes_mistakes(_bytes_reference),
            Mistake(
                "H instead of G, no factor 2",
                f"{M.H_INSTEAD_OF_G}; and {M.NO_FACTOR_2}",
                variant=lambda *a: _bytes_reference(
                    *a, count_query_heads=True, keys_and_values=False
                ),
            ),
            Mistake(
                "bits, not bytes",
                "counted bits: the answer is 8 times the bytes",
                variant=lambda *a: 8 * _bytes_reference(*a),
            ),
        ),
        forbidden=(
            "mha_course.caches.base.kv_cache_bytes",
            "mha_course.caches.base.kv_cache_elements",
            "mha_course.benchmark.flops.kv_bytes_per_token",
            "mha_course.benchmark.flops.decode_step_bytes",
        ),
    ),
    Item(
        id="ex07_mean_pool_kv",
        notebook=NOTEBOOK,
        function="mean_pool_kv",
        points=2,
        task="(H * D, ...) -> (G * D, ...): each new head is the mean of its contiguous group",
        make_cases=_pool_cases,
        shape="(G * D, ...)",
        reference=lambda w, H, G: mean_pool_heads(w, H, G),
        mistakes=(
            Mistake(
                "strided groups",
                "pooled heads g, g + G, g + 2G, ... (strided); the groups "
                "are contiguous: key/value head g serves query heads g·H/G ... (g+1)·H/G - 1",
                variant=_pool_strided,
            ),
            Mistake(
                "sum",
                "summed the heads of a group; take the mean",
                variant=lambda w, H, G: _grouped(w, H, G).sum(dim=1).reshape(-1, *w.shape[1:]),
            ),
            Mistake(
                "first head",
                "kept the first head of each group; the conversion takes the "
                "mean of the group's heads",
                variant=lambda w, H, G: _grouped(w, H, G)[:, 0].reshape(-1, *w.shape[1:]),
            ),
            Mistake(
                "not flattened",
                "reshape the (G, D, ...) means back to (G * D, ...)",
                matches=_pool_not_flattened,
            ),
        ),
        forbidden=(
            "mha_course.attention.gqa.mean_pool_heads",
            "mha_course.attention.gqa.mha_to_gqa",
        ),
    ),
]


# ---- predict then measure, interpret ----------------------------------------------------------
ITEMS += [
    Item(
        id="ex07_predict_gqa_params",
        notebook=NOTEBOOK,
        function="predict_gqa_params",
        points=1,
        task="predict: parameters of a GQA layer (E, H, G, bias), before counting a module's",
        make_cases=_gqa_params_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        reference=_gqa_params,
        mistakes=(
            Mistake(
                "H instead of G",
                GQA_PARAMS_H,
                variant=lambda E, H, G, b: _gqa_params(E, H, G, b, kv_heads=H),
            ),
            Mistake(
                "key/value bias of E",
                GQA_PARAMS_KV_BIAS,
                variant=lambda E, H, G, b: _gqa_params(E, H, G, b, kv_bias=E),
            ),
            Mistake(
                "W_O forgotten",
                GQA_PARAMS_NO_W_O,
                variant=lambda E, H, G, b: _gqa_params(E, H, G, b, w_o=False),
            ),
        ),
        forbidden=(
            COURSE_MHA,
            *TORCH_MHA,
            "mha_course.attention.gqa.mha_to_gqa",
        ),  # build one and count: no
    ),
    Item(
        id="ex07_smallest_cache",
        notebook=NOTEBOOK,
        function="smallest_cache",
        points=1,
        task="interpret: the index of the config (layers, H, G, D, bytes/element) with the smallest "
        "KV cache per token",
        make_cases=lambda rng: [{"configs": _configs(rng)} for _ in range(3)],
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.0,
        reference=lambda configs: _smallest(configs),
        mistakes=(
            Mistake(
                "H instead of G", M.H_INSTEAD_OF_G, variant=lambda c: _smallest(c, use_heads=1)
            ),
            Mistake(
                "element size ignored",
                "the element size counts: a float32 cache is twice a "
                "bfloat16 one, an 8-bit one half",
                variant=lambda c: _smallest(c, element_size=False),
            ),
        ),
        forbidden=(
            "mha_course.caches.base.kv_cache_bytes",
            "mha_course.caches.base.kv_cache_elements",
            "mha_course.benchmark.flops.kv_bytes_per_token",
            "mha_course.benchmark.flops.decode_step_bytes",
        ),  # task 3's set: one unit
    ),
]

"""Every bad input raises ``ValueError`` whose message names the argument, the expected shape in
dimension letters (e.g. ``(B, L, E)``) and what came in."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mha_course import (
    KVCache,
    MultiHeadAttention,
    SelfAttentionHead,
    causal_mask,
    dot_product_attention,
    get_device,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)
from mha_course.masks import key_padding_to_attn_mask

f64, f32 = torch.float64, torch.float32


def t(*shape, dtype=f64):
    return torch.zeros(*shape, dtype=dtype)


def sdpa(q=(2, 3, 4, 8), k=(2, 3, 5, 8), v=(2, 3, 5, 6), **kw):
    """Call SDPA with zero tensors of the given shapes (a tuple) or with the tensor itself."""
    q, k, v = (t(*x) if isinstance(x, tuple) else x for x in (q, k, v))
    return lambda: scaled_dot_product_attention(q, k, v, **kw)


MHA = MultiHeadAttention(12, 3, dtype=f64)  # E = 12, H = 3, D = 4
GQA = MultiHeadAttention(12, 4, num_kv_heads=2, dtype=f64)
CROSS = MultiHeadAttention(12, 3, kdim=5, vdim=7, dtype=f64)
X = t(2, 4, 12)  # (B, L, E)


def mha(module=MHA, query=X, key=None, value=None, **kw):
    return lambda: module(query, key, value, **kw)


def _full_cache():
    cache = KVCache()
    cache.update(t(2, 2, 3, 3), t(2, 2, 3, 3))  # (B, G, S, D) = (2, 2, 3, 3), as GQA's
    return cache


CASES = {
    # ---- scaled_dot_product_attention ----
    "sdpa not a tensor": (sdpa(q=[[1.0]]), ["query", "torch.Tensor", "list"]),
    "sdpa int query": (sdpa(q=torch.zeros(2, 3, 4, 8, dtype=torch.int64)),
                       ["query", "floating-point", "torch.int64"]),
    "sdpa mixed float32/float64": (sdpa(k=t(2, 3, 5, 8, dtype=f32)),
                                   ["query/key/value", "key=torch.float32", "query=torch.float64"]),
    "sdpa query rank 1": (sdpa(q=(8,), k=(5, 8), v=(5, 6)), ["query", "(..., L, D)", "(8,)"]),
    "sdpa key rank": (sdpa(k=(3, 5, 8)), ["key", "(..., S, D)", "(3, 5, 8)"]),
    "sdpa value rank": (sdpa(v=(5, 6)), ["value", "(..., S, Dv)", "(5, 6)"]),
    "sdpa key D": (sdpa(k=(2, 3, 5, 7)), ["key", "(..., S, D)", "D = 8", "(2, 3, 5, 7)"]),
    "sdpa value S": (sdpa(v=(2, 3, 4, 6)), ["value", "(..., S, Dv)", "(2, 3, 5, 8)", "(2, 3, 4, 6)"]),
    "sdpa batch mismatch": (sdpa(k=(3, 3, 5, 8), v=(3, 3, 5, 6)),
                            ["key", "(2, 3, 4, 8)", "(3, 3, 5, 8)"]),
    "sdpa gqa G does not divide H": (sdpa(k=(2, 2, 5, 8), v=(2, 2, 5, 6), enable_gqa=True),
                                     ["key", "(..., G, S, D)", "H = 3", "G = 2", "(2, 2, 5, 8)"]),
    "sdpa gqa needs heads": (sdpa(q=(4, 8), k=(5, 8), v=(5, 6), enable_gqa=True),
                             ["query", "(..., H, L, D)", "(4, 8)"]),
    "sdpa mask does not broadcast": (sdpa(attn_mask=torch.ones(4, 6, dtype=torch.bool)),
                                     ["attn_mask", "(..., L, S)", "(2, 3, 4, 5)", "(4, 6)"]),
    "sdpa mask too many dims": (sdpa(attn_mask=torch.ones(1, 2, 3, 4, 5, dtype=torch.bool)),
                                ["attn_mask", "(..., L, S)", "(1, 2, 3, 4, 5)"]),
    "sdpa int mask": (sdpa(attn_mask=torch.ones(4, 5, dtype=torch.int64)),
                      ["attn_mask", "bool", "torch.int64"]),
    "sdpa mask with is_causal": (sdpa(attn_mask=torch.ones(4, 5, dtype=torch.bool), is_causal=True),
                                 ["attn_mask", "is_causal"]),
    "sdpa dropout_p": (sdpa(dropout_p=1.5), ["dropout_p", "1.5"]),
    # ---- MultiHeadAttention constructor ----
    "mha embed_dim % num_heads": (lambda: MultiHeadAttention(10, 3), ["embed_dim", "E=10", "H=3"]),
    "mha num_heads % num_kv_heads": (lambda: MultiHeadAttention(12, 4, num_kv_heads=3),
                                     ["num_kv_heads", "H=4", "G=3"]),
    "mha non-positive": (lambda: MultiHeadAttention(12, 0), ["num_heads", "H=0"]),
    "mha bad impl": (lambda: MultiHeadAttention(12, 3, impl="flash"), ["impl", "'flash'", "eager"]),
    "mha dropout": (lambda: MultiHeadAttention(12, 3, dropout=1.0), ["dropout", "1.0"]),
    # ---- MultiHeadAttention.forward ----
    "mha query rank": (mha(query=t(4, 12)), ["query", "(B, L, E)", "(4, 12)"]),
    "mha query E": (mha(query=t(2, 4, 8)), ["query", "(B, L, E)", "12", "(2, 4, 8)"]),
    "mha key kdim": (mha(CROSS, key=t(2, 6, 12), value=t(2, 6, 7)),
                     ["key", "(B, S, kdim)", "5", "(2, 6, 12)"]),
    "mha value vdim": (mha(CROSS, key=t(2, 6, 5), value=t(2, 6, 5)),
                       ["value", "(B, S, vdim)", "7", "(2, 6, 5)"]),
    "mha int input": (mha(query=torch.zeros(2, 4, 12, dtype=torch.int64)),
                      ["query", "floating-point", "torch.int64"]),
    "mha float32 input, float64 module": (mha(query=t(2, 4, 12, dtype=f32)),
                                          ["query", "torch.float64", "torch.float32"]),
    "mha batch mismatch": (mha(key=t(3, 6, 12)), ["key/value", "(B, S, kdim)", "B = 2", "(3, 6, 12)"]),
    "mha key/value length": (mha(key=t(2, 6, 12), value=t(2, 5, 12)),
                             ["value", "(B, S, vdim)", "S = 6", "(2, 5, 12)"]),
    "mha mask does not broadcast": (mha(key=t(2, 6, 12), attn_mask=torch.ones(4, 5, dtype=torch.bool)),
                                    ["attn_mask", "(B, H, L, S)", "(2, 3, 4, 6)", "(4, 5)"]),
    "mha mask rank": (mha(attn_mask=torch.ones(4, dtype=torch.bool)),
                      ["attn_mask", "(L, S)", "(B, H, L, S)", "(4,)"]),
    "mha mask batch": (mha(attn_mask=torch.ones(3, 4, 4, dtype=torch.bool)),
                       ["attn_mask", "(B, L, S)", "(2, 4, 4)", "(3, 4, 4)"]),
    "mha int mask": (mha(attn_mask=torch.ones(4, 4, dtype=torch.int32)),
                     ["attn_mask", "torch.int32"]),
    "mha key_padding_mask shape": (mha(key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)),
                                   ["key_padding_mask", "(B, S)", "(2, 4)", "(2, 5)"]),
    "mha key_padding_mask transposed": (mha(key=t(2, 6, 12),
                                            key_padding_mask=torch.zeros(6, 2, dtype=torch.bool)),
                                        ["key_padding_mask", "(B, S)", "(2, 6)", "(6, 2)"]),
    "mha key_padding_mask int": (mha(key_padding_mask=torch.zeros(2, 4, dtype=torch.int64)),
                                 ["key_padding_mask", "torch.int64"]),
    "mha head_mask shape": (mha(head_mask=torch.ones(4)), ["head_mask", "(H,)", "(B, H)", "(4,)"]),
    "mha kv_cache shape change": (mha(GQA, query=t(3, 1, 12), kv_cache=_full_cache()),
                                  ["key", "(B, G, S, D)", "(2, 2, S, 3)", "(3, 2, 1, 3)", "reset()"]),
    # ---- KVCache ----
    "cache rank": (lambda: KVCache().update(t(2, 3, 4), t(2, 3, 4)), ["key", "(B, G, S, D)", "(2, 3, 4)"]),
    "cache value shape": (lambda: KVCache().update(t(1, 2, 3, 4), t(1, 2, 5, 4)),
                          ["value", "(B, G, S, Dv)", "(1, 2, 3, Dv)", "(1, 2, 5, 4)"]),
    "cache D change": (lambda: _full_cache().update(t(2, 2, 1, 5), t(2, 2, 1, 3)),
                       ["key", "(B, G, S, D)", "(2, 2, S, 3)", "(2, 2, 1, 5)"]),
    "cache dtype change": (lambda: _full_cache().update(t(2, 2, 1, 3, dtype=f32), t(2, 2, 1, 3)),
                           ["key", "torch.float64", "torch.float32"]),
    # ---- helpers ----
    "split_heads indivisible": (lambda: split_heads(t(2, 3, 10), 4),
                                ["x", "(B, L, H * D)", "H = 4", "(2, 3, 10)"]),
    "split_heads rank": (lambda: split_heads(t(3, 10), 2), ["x", "(B, L, H * D)", "(3, 10)"]),
    "merge_heads rank": (lambda: merge_heads(t(3, 4, 5)), ["x", "(B, H, L, D)", "(3, 4, 5)"]),
    "key_padding_to_attn_mask": (lambda: key_padding_to_attn_mask(torch.zeros(2, 3, dtype=torch.bool), 2, 4),
                                 ["key_padding_mask", "(B, S)", "(2, 4)", "(2, 3)"]),
    "padding_mask lengths rank": (lambda: padding_mask(torch.tensor([[1, 2]])),
                                  ["lengths", "(B,)", "(1, 2)"]),
    "causal_mask negative": (lambda: causal_mask(-1), ["L", "-1"]),
    "from_torch not a module": (lambda: MultiHeadAttention.from_torch(nn.Linear(2, 2)),
                                ["module", "MultiheadAttention", "Linear"]),
    "from_torch add_bias_kv": (lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_bias_kv=True)),
                               ["module", "add_bias_kv"]),
    "single head rank": (lambda: SelfAttentionHead(8, 4)(torch.zeros(3, 8)), ["x", "(B, T, E)", "(3, 8)"]),
    "single head E": (lambda: SelfAttentionHead(8, 4)(torch.zeros(1, 3, 6)),
                      ["x", "(B, T, E)", "E = 8", "(1, 3, 6)"]),
    "numpy keys rank": (lambda: dot_product_attention(np.zeros(4), np.zeros(4), np.zeros((1, 4))),
                        ["keys", "(S, D)", "(4,)"]),
    "numpy values S": (lambda: dot_product_attention(np.zeros(4), np.zeros((3, 4)), np.zeros((2, 5))),
                       ["values", "(S, Dv)", "S = 3", "(2, 5)"]),
    "numpy query D": (lambda: dot_product_attention(np.zeros(5), np.zeros((3, 4)), np.zeros((3, 2))),
                      ["query", "(L, D)", "D = 4", "(5,)"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises_a_teaching_error(case):
    call, fragments = CASES[case]
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without CUDA")
def test_get_device_cuda_without_gpu():
    with pytest.raises(ValueError, match="prefer: asked for 'cuda'"):
        get_device("cuda")


def test_good_inputs_do_not_raise():
    """The error checks do not reject what is allowed: broadcasting masks, GQA, cross shapes."""
    scaled_dot_product_attention(t(2, 4, 3, 8), t(2, 2, 5, 8), t(2, 2, 5, 6), enable_gqa=True,
                                 attn_mask=torch.ones(1, 3, 5, dtype=torch.bool))
    scaled_dot_product_attention(t(2, 3, 4, 8), t(1, 3, 5, 8), t(1, 3, 5, 6))  # batch broadcasts
    CROSS(X, t(2, 6, 5), t(2, 6, 7), attn_mask=torch.ones(2, 4, 6, dtype=torch.bool),
          key_padding_mask=torch.zeros(2, 6, dtype=torch.bool), head_mask=torch.ones(2, 3))

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
from mha_course.ops.masks import key_padding_to_attn_mask

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
    "sdpa int query": (
        sdpa(q=torch.zeros(2, 3, 4, 8, dtype=torch.int64)),
        ["query", "floating-point", "torch.int64"],
    ),
    "sdpa mixed float32/float64": (
        sdpa(k=t(2, 3, 5, 8, dtype=f32)),
        ["query/key/value", "key=torch.float32", "query=torch.float64"],
    ),
    "sdpa query rank 1": (sdpa(q=(8,), k=(5, 8), v=(5, 6)), ["query", "(..., L, D)", "(8,)"]),
    "sdpa key rank": (sdpa(k=(3, 5, 8)), ["key", "(..., S, D)", "(3, 5, 8)"]),
    "sdpa value rank": (sdpa(v=(5, 6)), ["value", "(..., S, Dv)", "(5, 6)"]),
    "sdpa key D": (sdpa(k=(2, 3, 5, 7)), ["key", "(..., S, D)", "D = 8", "(2, 3, 5, 7)"]),
    "sdpa value S": (
        sdpa(v=(2, 3, 4, 6)),
        ["value", "(..., S, Dv)", "(2, 3, 5, 8)", "(2, 3, 4, 6)"],
    ),
    "sdpa batch mismatch": (
        sdpa(k=(3, 3, 5, 8), v=(3, 3, 5, 6)),
        ["key", "(2, 3, 4, 8)", "(3, 3, 5, 8)"],
    ),
    "sdpa gqa G does not divide H": (
        sdpa(k=(2, 2, 5, 8), v=(2, 2, 5, 6), enable_gqa=True),
        ["key", "(..., G, S, D)", "H = 3", "G = 2", "(2, 2, 5, 8)"],
    ),
    "sdpa gqa needs heads": (
        sdpa(q=(4, 8), k=(5, 8), v=(5, 6), enable_gqa=True),
        ["query", "(..., H, L, D)", "(4, 8)"],
    ),
    "sdpa mask does not broadcast": (
        sdpa(attn_mask=torch.ones(4, 6, dtype=torch.bool)),
        ["attn_mask", "(..., L, S)", "(2, 3, 4, 5)", "(4, 6)"],
    ),
    "sdpa mask too many dims": (
        sdpa(attn_mask=torch.ones(1, 2, 3, 4, 5, dtype=torch.bool)),
        ["attn_mask", "(..., L, S)", "(1, 2, 3, 4, 5)"],
    ),
    "sdpa int mask": (
        sdpa(attn_mask=torch.ones(4, 5, dtype=torch.int64)),
        ["attn_mask", "bool", "torch.int64"],
    ),
    "sdpa mask with is_causal": (
        sdpa(attn_mask=torch.ones(4, 5, dtype=torch.bool), is_causal=True),
        ["attn_mask", "is_causal"],
    ),
    "sdpa dropout_p": (sdpa(dropout_p=1.5), ["dropout_p", "1.5"]),
    # ---- MultiHeadAttention constructor ----
    "mha embed_dim % num_heads": (lambda: MultiHeadAttention(10, 3), ["embed_dim", "E=10", "H=3"]),
    "mha num_heads % num_kv_heads": (
        lambda: MultiHeadAttention(12, 4, num_kv_heads=3),
        ["num_kv_heads", "H=4", "G=3"],
    ),
    "mha non-positive": (lambda: MultiHeadAttention(12, 0), ["num_heads", "H=0"]),
    "mha bad impl": (lambda: MultiHeadAttention(12, 3, impl="fast"), ["impl", "'fast'", "eager"]),
    "mha dropout": (lambda: MultiHeadAttention(12, 3, dropout=1.0), ["dropout", "1.0"]),
    # ---- MultiHeadAttention.forward ----
    "mha query rank": (mha(query=t(4, 12)), ["query", "(B, L, E)", "(4, 12)"]),
    "mha query E": (mha(query=t(2, 4, 8)), ["query", "(B, L, E)", "12", "(2, 4, 8)"]),
    "mha key kdim": (
        mha(CROSS, key=t(2, 6, 12), value=t(2, 6, 7)),
        ["key", "(B, S, kdim)", "5", "(2, 6, 12)"],
    ),
    "mha value vdim": (
        mha(CROSS, key=t(2, 6, 5), value=t(2, 6, 5)),
        ["value", "(B, S, vdim)", "7", "(2, 6, 5)"],
    ),
    "mha int input": (
        mha(query=torch.zeros(2, 4, 12, dtype=torch.int64)),
        ["query", "floating-point", "torch.int64"],
    ),
    "mha float32 input, float64 module": (
        mha(query=t(2, 4, 12, dtype=f32)),
        ["query", "torch.float64", "torch.float32"],
    ),
    "mha batch mismatch": (
        mha(key=t(3, 6, 12)),
        ["key/value", "(B, S, kdim)", "B = 2", "(3, 6, 12)"],
    ),
    "mha key/value length": (
        mha(key=t(2, 6, 12), value=t(2, 5, 12)),
        ["value", "(B, S, vdim)", "S = 6", "(2, 5, 12)"],
    ),
    "mha mask does not broadcast": (
        mha(key=t(2, 6, 12), attn_mask=torch.ones(4, 5, dtype=torch.bool)),
        ["attn_mask", "(B, H, L, S)", "(2, 3, 4, 6)", "(4, 5)"],
    ),
    "mha mask rank": (
        mha(attn_mask=torch.ones(4, dtype=torch.bool)),
        ["attn_mask", "(L, S)", "(B, H, L, S)", "(4,)"],
    ),
    "mha mask batch": (
        mha(attn_mask=torch.ones(3, 4, 4, dtype=torch.bool)),
        ["attn_mask", "(B, L, S)", "(2, 4, 4)", "(3, 4, 4)"],
    ),
    "mha int mask": (
        mha(attn_mask=torch.ones(4, 4, dtype=torch.int32)),
        ["attn_mask", "torch.int32"],
    ),
    "mha key_padding_mask shape": (
        mha(key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)),
        ["key_padding_mask", "(B, S)", "(2, 4)", "(2, 5)"],
    ),
    "mha key_padding_mask transposed": (
        mha(key=t(2, 6, 12), key_padding_mask=torch.zeros(6, 2, dtype=torch.bool)),
        ["key_padding_mask", "(B, S)", "(2, 6)", "(6, 2)"],
    ),
    "mha key_padding_mask int": (
        mha(key_padding_mask=torch.zeros(2, 4, dtype=torch.int64)),
        ["key_padding_mask", "torch.int64"],
    ),
    "mha head_mask shape": (mha(head_mask=torch.ones(4)), ["head_mask", "(H,)", "(B, H)", "(4,)"]),
    "mha kv_cache shape change": (
        mha(GQA, query=t(3, 1, 12), kv_cache=_full_cache()),
        ["key", "(B, G, S, D)", "(2, 2, S, 3)", "(3, 2, 1, 3)", "reset()"],
    ),
    # ---- KVCache ----
    "cache rank": (
        lambda: KVCache().update(t(2, 3, 4), t(2, 3, 4)),
        ["key", "(B, G, S, D)", "(2, 3, 4)"],
    ),
    "cache value shape": (
        lambda: KVCache().update(t(1, 2, 3, 4), t(1, 2, 5, 4)),
        ["value", "(B, G, S, Dv)", "(1, 2, 3, Dv)", "(1, 2, 5, 4)"],
    ),
    "cache D change": (
        lambda: _full_cache().update(t(2, 2, 1, 5), t(2, 2, 1, 3)),
        ["key", "(B, G, S, D)", "(2, 2, S, 3)", "(2, 2, 1, 5)"],
    ),
    "cache dtype change": (
        lambda: _full_cache().update(t(2, 2, 1, 3, dtype=f32), t(2, 2, 1, 3)),
        ["key", "torch.float64", "torch.float32"],
    ),
    # ---- helpers ----
    "split_heads indivisible": (
        lambda: split_heads(t(2, 3, 10), 4),
        ["x", "(B, L, H * D)", "H = 4", "(2, 3, 10)"],
    ),
    "split_heads rank": (lambda: split_heads(t(3, 10), 2), ["x", "(B, L, H * D)", "(3, 10)"]),
    "merge_heads rank": (lambda: merge_heads(t(3, 4, 5)), ["x", "(B, H, L, D)", "(3, 4, 5)"]),
    "key_padding_to_attn_mask": (
        lambda: key_padding_to_attn_mask(torch.zeros(2, 3, dtype=torch.bool), 2, 4),
        ["key_padding_mask", "(B, S)", "(2, 4)", "(2, 3)"],
    ),
    "padding_mask lengths rank": (
        lambda: padding_mask(torch.tensor([[1, 2]])),
        ["lengths", "(B,)", "(1, 2)"],
    ),
    "causal_mask negative": (lambda: causal_mask(-1), ["L", "-1"]),
    "from_torch not a module": (
        lambda: MultiHeadAttention.from_torch(nn.Linear(2, 2)),
        ["module", "MultiheadAttention", "Linear"],
    ),
    "from_torch add_bias_kv": (
        lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_bias_kv=True)),
        ["module", "add_bias_kv"],
    ),
    "single head rank": (
        lambda: SelfAttentionHead(8, 4)(torch.zeros(3, 8)),
        ["x", "(B, T, E)", "(3, 8)"],
    ),
    "single head E": (
        lambda: SelfAttentionHead(8, 4)(torch.zeros(1, 3, 6)),
        ["x", "(B, T, E)", "E = 8", "(1, 3, 6)"],
    ),
    "numpy keys rank": (
        lambda: dot_product_attention(np.zeros(4), np.zeros(4), np.zeros((1, 4))),
        ["keys", "(S, D)", "(4,)"],
    ),
    "numpy values S": (
        lambda: dot_product_attention(np.zeros(4), np.zeros((3, 4)), np.zeros((2, 5))),
        ["values", "(S, Dv)", "S = 3", "(2, 5)"],
    ),
    "numpy query D": (
        lambda: dot_product_attention(np.zeros(5), np.zeros((3, 4)), np.zeros((3, 2))),
        ["query", "(L, D)", "D = 4", "(5,)"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises_a_teaching_error(case, table=CASES):
    call, fragments = table[case]
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
    scaled_dot_product_attention(
        t(2, 4, 3, 8),
        t(2, 2, 5, 8),
        t(2, 2, 5, 6),
        enable_gqa=True,
        attn_mask=torch.ones(1, 3, 5, dtype=torch.bool),
    )
    scaled_dot_product_attention(t(2, 3, 4, 8), t(1, 3, 5, 8), t(1, 3, 5, 6))  # batch broadcasts
    CROSS(
        X,
        t(2, 6, 5),
        t(2, 6, 7),
        attn_mask=torch.ones(2, 4, 6, dtype=torch.bool),
        key_padding_mask=torch.zeros(2, 6, dtype=torch.bool),
        head_mask=torch.ones(2, 3),
    )


# ================================================================================================
# Parts II–IV (chapters 12–19): every public function and constructor, table-driven.
# The cache classes have their own table (the caches' contract test); their helpers are here.
# Each entry: "module.function: what is wrong" -> (call, fragments the message must contain).
# ================================================================================================

from mha_course.analysis import pruning as pr  # noqa: E402
from mha_course.attention.mla import MultiHeadLatentAttention  # noqa: E402
from mha_course.caches import window as win  # noqa: E402
from mha_course.gpt import GPT, GPTConfig  # noqa: E402
from mha_course.gpt.config import from_dict  # noqa: E402
from mha_course.kernels import flash_backward as fb  # noqa: E402
from mha_course.kernels import ring, ring_run, tiled  # noqa: E402
from mha_course.kernels import triton_dq as tdq  # noqa: E402
from mha_course.kernels import triton_flash as tf  # noqa: E402
from mha_course.ops import flex_masks as fm  # noqa: E402
from mha_course.ops import positions as pos  # noqa: E402
from mha_course.ops import rope  # noqa: E402

MLA = MultiHeadLatentAttention(8, 2, latent_dim=4, dtype=f64)
ar = torch.arange
q4 = t(1, 2, 8, 16, dtype=f32)  # (B, H, L, D) for the Triton kernels
lse4 = torch.zeros(1, 2, 8)  # (B, H, L) float32


def fbw(out=(1, 3, 4), lse=(1, 3), d_out=(1, 3, 4)):
    """flash_attention_backward on (1, L=3, D=4) inputs with the saved tensors of these shapes."""
    x = t(1, 3, 4)
    saved = [s if not isinstance(s, tuple) else t(*s) for s in (out, lse, d_out)]
    return lambda: fb.flash_attention_backward(x, x, x, *saved)


def tfb(out=q4, lse=lse4, d_out=q4):
    return lambda: tf.triton_backward(q4, q4, q4, out, lse, d_out)


def qkv(*shape):
    return dict(query=t(*shape), key=t(*shape), value=t(*shape))


PART_II_IV = {
    # ---- rope ----
    "rope.rope_frequencies: odd head_dim": (
        lambda: rope.rope_frequencies(7),
        ["head_dim", "even", "7"],
    ),
    "rope.rope_frequencies: base <= 1": (
        lambda: rope.rope_frequencies(8, 1.0),
        ["base", "> 1", "1.0"],
    ),
    "rope.rope_frequencies: base not a number": (
        lambda: rope.rope_frequencies(8, "1e4"),
        ["base", "'1e4'"],
    ),
    "rope.rope_angles: zero head_dim": (lambda: rope.rope_angles(ar(3), 0), ["head_dim", "0"]),
    "rope.rope_angles: bool positions": (
        lambda: rope.rope_angles(torch.ones(3, dtype=torch.bool), 4),
        ["positions", "torch.bool"],
    ),
    "rope.rope_angles: integer dtype": (
        lambda: rope.rope_angles(ar(3), 4, dtype=torch.int64),
        ["dtype", "floating-point", "torch.int64"],
    ),
    "rope.rotate_pairs: cos of the wrong width": (
        lambda: rope.rotate_pairs(t(3, 8), t(3, 3), t(3, 4)),
        ["cos", "(..., L, D/2)", "D/2 = 4", "(3, 3)"],
    ),
    "rope.rotate_pairs: layout": (
        lambda: rope.rotate_pairs(t(3, 8), t(3, 4), t(3, 4), "neox"),
        ["layout", "'neox'"],
    ),
    "rope.apply_rope: positions of another length": (
        lambda: rope.apply_rope(t(2, 3, 4), ar(5)),
        ["positions", "(L,)", "L = 3", "(5,)"],
    ),
    "rope.apply_rope: 3-D positions": (
        lambda: rope.apply_rope(t(2, 3, 4), torch.zeros(1, 1, 3)),
        ["positions", "(B, L)", "(1, 1, 3)"],
    ),
    "rope.apply_rope: (B, L) positions, other B": (
        lambda: rope.apply_rope(t(2, 1, 3, 4), torch.zeros(3, 3)),
        ["positions", "same B", "(3, 3)", "(2, 1, 3, 4)"],
    ),
    "rope.apply_rope: odd D": (
        lambda: rope.apply_rope(t(2, 3, 5), ar(3)),
        ["x", "D even", "(2, 3, 5)"],
    ),
    "rope.apply_rope: int x": (
        lambda: rope.apply_rope(torch.zeros(3, 4, dtype=torch.long), ar(3)),
        ["x", "floating-point", "torch.int64"],
    ),
    "rope.apply_rope: layout": (
        lambda: rope.apply_rope(t(3, 4), ar(3), layout="neox"),
        ["layout", "'neox'"],
    ),
    "rope.rope_permutation: odd": (lambda: rope.rope_permutation(3), ["head_dim", "even", "3"]),
    "rope.convert_rope_layout: zero heads": (
        lambda: rope.convert_rope_layout(t(8, 4), 0, 4),
        ["num_heads", "positive int", "H", "0"],
    ),
    "rope.convert_rope_layout: rows != H * D": (
        lambda: rope.convert_rope_layout(t(6, 4), 2, 4),
        ["weight", "(H * D, E)", "8", "(6, 4)"],
    ),
    "rope.convert_rope_layout: to": (
        lambda: rope.convert_rope_layout(t(8, 4), 2, 4, to="x"),
        ["to", "'x'"],
    ),
    # ---- positions ----
    "positions.sinusoidal_positions: odd E": (
        lambda: pos.sinusoidal_positions(3, 5),
        ["embed_dim", "even", "5"],
    ),
    "positions.sinusoidal_positions: zero E": (
        lambda: pos.sinusoidal_positions(3, 0),
        ["embed_dim", "positive int", "0"],
    ),
    "positions.sinusoidal_positions: base not a number": (
        lambda: pos.sinusoidal_positions(3, 4, base="a"),
        ["base", "'a'"],
    ),
    "positions.sinusoidal_positions: negative length": (
        lambda: pos.sinusoidal_positions(-1, 4),
        ["positions", "-1"],
    ),
    "positions.LearnedPositionEmbedding: max_len 0": (
        lambda: pos.LearnedPositionEmbedding(0, 4),
        ["max_len", "positive int", "0"],
    ),
    "positions.LearnedPositionEmbedding: float positions": (
        lambda: pos.LearnedPositionEmbedding(4, 4)(t(3)),
        ["positions", "integer", "torch.float64"],
    ),
    "positions.LearnedPositionEmbedding: past max_len": (
        lambda: pos.LearnedPositionEmbedding(4, 4)(ar(5)),
        ["positions", "[0, 4)", "max 4"],
    ),
    "positions.alibi_slopes: zero heads": (lambda: pos.alibi_slopes(0), ["num_heads", "0"]),
    "positions.alibi_bias: negative L": (lambda: pos.alibi_bias(2, -1), ["L", ">= 0", "-1"]),
    "positions.alibi_bias: float S": (lambda: pos.alibi_bias(2, 3, 4.0), ["S", "4.0"]),
    "positions.alibi_bias: bool offset": (
        lambda: pos.alibi_bias(2, 3, offset=True),
        ["offset", "True"],
    ),
    "positions.alibi_bias: slopes of another H": (
        lambda: pos.alibi_bias(2, 3, slopes=t(3)),
        ["slopes", "(H,) = (2,)", "(3,)"],
    ),
    "positions.alibi_bias: integer slopes": (
        lambda: pos.alibi_bias(2, 3, slopes=torch.ones(2, dtype=torch.long)),
        ["slopes", "floating-point", "torch.int64"],
    ),
    # ---- GPTConfig / GPT ----
    "GPTConfig: zero heads (was ZeroDivisionError)": (
        lambda: GPTConfig(n_head=0),
        ["n_head", "positive int", "0"],
    ),
    "GPTConfig: zero layers": (lambda: GPTConfig(n_layer=0), ["n_layer", "0"]),
    "GPTConfig: zero vocabulary": (lambda: GPTConfig(vocab_size=0), ["vocab_size", "0"]),
    "GPTConfig: zero context": (lambda: GPTConfig(context_length=0), ["context_length", "0"]),
    "GPTConfig: old and new name of T both given": (
        lambda: GPTConfig(block_size=8, context_length=16),
        ["block_size", "renamed context_length", "block_size=8", "context_length=16"],
    ),
    "gpt config file: old and new name of T both given": (
        lambda: from_dict(GPTConfig, {"block_size": 8, "context_length": 16}),
        ["config", "block_size", "context_length"],
    ),
    "GPTConfig: float width": (lambda: GPTConfig(n_embd=128.0), ["n_embd", "128.0"]),
    "GPTConfig: zero mlp_ratio": (lambda: GPTConfig(mlp_ratio=0), ["mlp_ratio", "0"]),
    "GPTConfig: E % H": (lambda: GPTConfig(n_embd=10, n_head=4), ["n_embd", "E=10", "H=4"]),
    "GPTConfig: G does not divide H": (lambda: GPTConfig(n_kv_head=3), ["n_kv_head", "H=4", "G=3"]),
    "GPTConfig: impl": (lambda: GPTConfig(impl="fast"), ["impl", "'fast'"]),
    "GPTConfig: rope_layout": (
        lambda: GPTConfig(positions="rope", rope_layout="neox"),
        ["rope_layout", "'neox'"],
    ),
    "GPTConfig: rope_base": (
        lambda: GPTConfig(positions="rope", rope_base=0.5),
        ["rope_base", "0.5"],
    ),
    "GPTConfig: rope with odd D": (
        lambda: GPTConfig(n_embd=12, n_head=4, positions="rope"),
        ["n_head", "even", "D=3"],
    ),
    "GPTConfig: positions": (lambda: GPTConfig(positions="alibi"), ["positions", "'alibi'"]),
    "GPTConfig: dropout": (lambda: GPTConfig(dropout=1.0), ["dropout", "1.0"]),
    "GPTConfig: attention": (lambda: GPTConfig(attention="linear"), ["attention", "'linear'"]),
    "GPTConfig: mla without a latent": (
        lambda: GPTConfig(attention="mla"),
        ["kv_latent_dim", "None"],
    ),
    "GPTConfig: mla latent wider than the model": (
        lambda: GPTConfig(attention="mla", kv_latent_dim=129),
        ["kv_latent_dim", "n_embd = 128", "129"],
    ),
    "GPTConfig: mla with n_kv_head": (
        lambda: GPTConfig(attention="mla", kv_latent_dim=8, n_kv_head=2),
        ["n_kv_head", "None", "2"],
    ),
    "GPTConfig: latent without mla": (
        lambda: GPTConfig(kv_latent_dim=8),
        ["kv_latent_dim", "attention='mla'"],
    ),
    "GPT: token id past the vocabulary": (
        lambda: GPT(GPTConfig(n_layer=1))(torch.full((1, 3), 96)),
        ["ids", "[0, 96)", "max 96"],
    ),
    "GPT: negative token id": (
        lambda: GPT(GPTConfig(n_layer=1))(torch.full((1, 3), -1)),
        ["ids", "min -1"],
    ),
    "GPT: float ids": (
        lambda: GPT(GPTConfig(n_layer=1))(t(1, 3)),
        ["ids", "int64", "torch.float64"],
    ),
    "GPT: 1-D ids": (lambda: GPT(GPTConfig(n_layer=1))(ar(3)), ["ids", "(B, L)", "(3,)"]),
    "GPT: past context_length": (
        lambda: GPT(GPTConfig(n_layer=1, context_length=4))(torch.zeros(1, 5, dtype=torch.long)),
        ["ids", "context_length = 4", "(1, 5)"],
    ),
    # ---- mla (the attention module; LatentKVCache is in the caches' table) ----
    "mla: zero heads": (
        lambda: MultiHeadLatentAttention(8, 0, 4),
        ["num_heads", "positive int", "0"],
    ),
    "mla: float latent": (lambda: MultiHeadLatentAttention(8, 2, 4.0), ["latent_dim", "4.0"]),
    "mla: H does not divide E (default D)": (
        lambda: MultiHeadLatentAttention(8, 3, 4),
        ["num_heads", "E=8", "H=3"],
    ),
    "mla: zero head_dim": (
        lambda: MultiHeadLatentAttention(8, 2, 4, head_dim=0),
        ["head_dim", "0"],
    ),
    "mla: odd rope_dim": (
        lambda: MultiHeadLatentAttention(8, 2, 4, rope_dim=3),
        ["rope_dim", "even", "3"],
    ),
    "mla: bool q_latent_dim": (
        lambda: MultiHeadLatentAttention(8, 2, 4, q_latent_dim=True),
        ["q_latent_dim", "True"],
    ),
    "mla: rope_base": (
        lambda: MultiHeadLatentAttention(8, 2, 4, rope_dim=2, rope_base=1),
        ["rope_base", "1"],
    ),
    "mla: x of another E": (lambda: MLA(t(1, 3, 6)), ["x", "(B, L, E)", "E = 8", "(1, 3, 6)"]),
    "mla: x rank": (lambda: MLA(t(3, 8)), ["x", "(B, L, E)", "(3, 8)"]),
    "mla: absorbed weights of another module": (
        lambda: MLA(t(1, 3, 8), absorbed=True, weights=(t(2, 5, 8), t(8, 2, 4))),
        ["weights[0]", "(H, C, C_Q or E)", "(2, 4, 8)", "(2, 5, 8)"],
    ),
    # ---- tiled ----
    "tiled.tiled_attention: bool block size": (
        lambda: tiled.tiled_attention(t(1, 3, 4), t(1, 3, 4), t(1, 3, 4), block_q=True),
        ["block_q", "positive int", "True"],
    ),
    "tiled.tiled_attention: zero block_k": (
        lambda: tiled.tiled_attention(t(1, 3, 4), t(1, 3, 4), t(1, 3, 4), block_k=0),
        ["block_k", "0"],
    ),
    "tiled.tiled_attention: batch mismatch": (
        lambda: tiled.tiled_attention(t(2, 3, 4), t(1, 3, 4), t(1, 3, 4)),
        ["key", "(2, 3, 4)", "(1, 3, 4)"],
    ),
    "tiled.tiled_attention: value of another length": (
        lambda: tiled.tiled_attention(t(1, 3, 4), t(1, 3, 4), t(1, 2, 4)),
        ["value", "(..., S, Dv)", "(1, 2, 4)"],
    ),
    "tiled.online_softmax_update: value rows != score columns": (
        lambda: tiled.online_softmax_update(t(3), t(3), t(3, 4), t(3, 5), t(6, 4)),
        ["value", "(..., Sb, Dv)", "Sb = 5", "(6, 4)"],
    ),
    "tiled.online_softmax_update: m of another L": (
        lambda: tiled.online_softmax_update(t(2), t(3), t(3, 4), t(3, 5), t(5, 4)),
        ["m", "(..., L)", "(3,)", "(2,)"],
    ),
    "tiled.online_softmax_update: acc of another Dv": (
        lambda: tiled.online_softmax_update(t(3), t(3), t(3, 2), t(3, 5), t(5, 4)),
        ["acc", "(..., L, Dv)", "(3, 4)", "(3, 2)"],
    ),
    # ---- flash_backward ----
    "flash_backward.backward_d_term: shapes differ": (
        lambda: fb.backward_d_term(t(3, 4), t(3, 5)),
        ["d_out", "(..., L, Dv)", "(3, 4)", "(3, 5)"],
    ),
    "flash_backward.flash_attention_backward: lse of another L": (
        fbw(lse=(1, 2)),
        ["lse", "(..., L)", "(1, 3)", "(1, 2)"],
    ),
    "flash_backward.flash_attention_backward: out of another L": (
        fbw(out=(1, 2, 4)),
        ["out", "(1, 3, 4)", "(1, 2, 4)"],
    ),
    "flash_backward.flash_attention_backward: d_out of another Dv": (
        fbw(d_out=(1, 3, 5)),
        ["d_out", "(1, 3, 4)", "(1, 3, 5)"],
    ),
    "flash_backward.flash_attention_backward: d_out not a tensor": (
        fbw(d_out=3),
        ["d_out", "torch.Tensor", "int"],
    ),
    "flash_backward.flash_attention: block_q 0": (
        lambda: fb.flash_attention(t(1, 3, 4), t(1, 3, 4), t(1, 3, 4), block_q=0),
        ["block_q", "0"],
    ),
    # ---- flex_masks ----
    "flex_masks.sliding_window: bool": (
        lambda: fm.sliding_window(True),
        ["window", "positive int", "True"],
    ),
    "flex_masks.sliding_window: zero": (lambda: fm.sliding_window(0), ["window", "0"]),
    "flex_masks.prefix_lm: negative": (lambda: fm.prefix_lm(-1), ["prefix_len", ">= 0", "-1"]),
    "flex_masks.prefix_lm: bool": (lambda: fm.prefix_lm(True), ["prefix_len", "True"]),
    "flex_masks.document_causal: float ids": (
        lambda: fm.document_causal(t(4)),
        ["doc_ids", "(T,)", "torch.float64"],
    ),
    "flex_masks.document_causal: bool ids": (
        lambda: fm.document_causal(torch.ones(4, dtype=torch.bool)),
        ["doc_ids", "torch.bool"],
    ),
    "flex_masks.alibi: 2-D slopes": (lambda: fm.alibi(t(1, 2)), ["slopes", "(H,)", "(1, 2)"]),
    "flex_masks.alibi: integer slopes": (
        lambda: fm.alibi(torch.ones(2, dtype=torch.long)),
        ["slopes", "torch.int64"],
    ),
    "flex_masks.block_counts: not a BlockMask": (
        lambda: fm.block_counts(None),
        ["block_mask", "BlockMask", "NoneType"],
    ),
    "flex_masks.flex_attention: key of another D": (
        lambda: fm.flex_attention(t(1, 1, 4, 8), t(1, 1, 4, 7), t(1, 1, 4, 8)),
        ["key", "D = 8", "(1, 1, 4, 7)"],
    ),
    "flex_masks.flex_attention: 3-D query": (
        lambda: fm.flex_attention(t(1, 4, 8), t(1, 4, 8), t(1, 4, 8)),
        ["query", "(B, H, L, D)", "(1, 4, 8)"],
    ),
    "flex_masks.flex_attention: other heads": (
        lambda: fm.flex_attention(t(1, 2, 4, 8), t(1, 1, 4, 8), t(1, 1, 4, 8)),
        ["key", "(B, H, S, D)", "(1, 2)", "(1, 1, 4, 8)"],
    ),
    # ---- ring / ring_run ----
    "ring.chunk_ids: rank past P": (lambda: ring.chunk_ids(5, 2), ["rank", "[0, 2)", "5"]),
    "ring.chunk_ids: zero ranks": (
        lambda: ring.chunk_ids(0, 0),
        ["world_size", "positive int", "0"],
    ),
    "ring.chunk_ids: layout": (lambda: ring.chunk_ids(0, 2, "ring"), ["layout", "'ring'"]),
    "ring.shard: zero ranks (was ZeroDivisionError)": (
        lambda: ring.shard(t(1, 4, 2), 0, 0),
        ["world_size", "0"],
    ),
    "ring.shard: rank past P": (lambda: ring.shard(t(1, 4, 2), 3, 2), ["rank", "[0, 2)", "3"]),
    "ring.shard: 1-D x": (lambda: ring.shard(t(4), 0, 2), ["x", "(..., T, D)", "(4,)"]),
    "ring.shard: T not a multiple": (
        lambda: ring.shard(t(1, 5, 2), 0, 2),
        ["T", "multiple of 2", "T = 5"],
    ),
    "ring.unshard: no parts": (lambda: ring.unshard([]), ["parts", "none"]),
    "ring.unshard: layout": (lambda: ring.unshard([t(2, 2)], layout="x"), ["layout", "'x'"]),
    "ring.unshard: parts of different shapes": (
        lambda: ring.unshard([t(2, 2), t(3, 2)]),
        ["parts[1]", "(2, 2)", "(3, 2)"],
    ),
    "ring.work_per_rank: zero ranks (was ZeroDivisionError)": (
        lambda: ring.work_per_rank(0),
        ["world_size", "0"],
    ),
    "ring.work_per_rank: T not a multiple": (
        lambda: ring.work_per_rank(2, T=3),
        ["T", "multiple of 2", "T = 3"],
    ),
    "ring.ring_attention: key of another block length": (
        lambda: ring.ring_attention(t(1, 4, 2), t(1, 3, 2), t(1, 3, 2)),
        ["key", "(..., T/P, D)", "T/P = 4", "(1, 3, 2)"],
    ),
    "ring_run.run_ring: zero ranks": (
        lambda: ring_run.run_ring([qkv(1, 4, 2)], 0),
        ["world_size", "0"],
    ),
    "ring_run.run_ring: T not a multiple": (
        lambda: ring_run.run_ring([qkv(1, 5, 2)], 2),
        ["T", "multiple of 2", "T = 5"],
    ),
    "ring_run.run_ring: no jobs": (lambda: ring_run.run_ring([], 2), ["jobs", "non-empty"]),
    # ---- window (mask helpers; SlidingWindowCache is in the caches' table) ----
    "window.sliding_window_mask: zero window": (
        lambda: win.sliding_window_mask(4, window=0),
        ["window", "0"],
    ),
    "window.sliding_window_mask: negative sinks": (
        lambda: win.sliding_window_mask(4, window=2, num_sink=-1),
        ["num_sink", "-1"],
    ),
    "window.sliding_window_mask: float L": (
        lambda: win.sliding_window_mask(2.0, window=2),
        ["L", "2.0"],
    ),
    "window.sliding_window_mask: float offset": (
        lambda: win.sliding_window_mask(2, window=2, offset=1.5),
        ["offset", "1.5"],
    ),
    "window.sliding_window_mask: negative S": (
        lambda: win.sliding_window_mask(2, -1, window=2),
        ["S", "-1"],
    ),
    "window.receptive_field: zero layers": (lambda: win.receptive_field(0, 2), ["num_layers", "0"]),
    "window.layout_cache_bytes: zero window": (
        lambda: win.layout_cache_bytes([0, None], 1, 4, 8),
        ["window", "0"],
    ),
    # ---- pruning ----
    "pruning.attention_layers: not a module": (
        lambda: pr.attention_layers(3),
        ["model", "nn.Module", "int"],
    ),
    "pruning.count_parameters: not a module": (
        lambda: pr.count_parameters("m"),
        ["module", "nn.Module", "str"],
    ),
    "pruning.gradient_importance: no attention": (
        lambda: pr.gradient_importance(nn.Linear(2, 2), [], None),
        ["model", "MultiHeadAttention"],
    ),
    "pruning.activation_importance: no attention": (
        lambda: pr.activation_importance(nn.Linear(2, 2), []),
        ["model", "MultiHeadAttention"],
    ),
    "pruning.least_important: 1-D importance": (
        lambda: pr.least_important(t(3), 1),
        ["importance", "(num_layers, H)", "(3,)"],
    ),
    "pruning.least_important: float count": (
        lambda: pr.least_important(t(2, 3), 1.5),
        ["count", "1.5"],
    ),
    "pruning.least_important: too many": (
        lambda: pr.least_important(t(2, 3), 7),
        ["count", "0..6", "7"],
    ),
    "pruning.mask_from_heads: layer out of range": (
        lambda: pr.mask_from_heads({5: [0]}, 2, 3),
        ["heads", "layer", "0..1", "[5]"],
    ),
    "pruning.mask_from_heads: head out of range": (
        lambda: pr.mask_from_heads({0: [7]}, 2, 3),
        ["heads[0]", "head", "0..2", "[7]"],
    ),
    "pruning.prune_heads: not an attention module": (
        lambda: pr.prune_heads(nn.Linear(2, 2), [0]),
        ["attn", "MultiHeadAttention", "Linear"],
    ),
    "pruning.prune_heads: float head index": (
        lambda: pr.prune_heads(MHA, [0.5]),
        ["heads", "0..2", "[0.5]"],
    ),
    "pruning.prune_heads: head out of range": (
        lambda: pr.prune_heads(MHA, [3]),
        ["heads", "0..2", "[3]"],
    ),
    "pruning.prune_model_heads: layer out of range": (
        lambda: pr.prune_model_heads(nn.Sequential(MHA), {1: [0]}),
        ["heads", "layer", "0..0", "[1]"],
    ),
}

# The Triton entry points check everything before any kernel runs (and before Triton is needed
# past the import), so these run on CPU under the interpreter; a wrong lse would be read out of
# bounds by the backward kernels, not refused.
TRITON = {
    "triton_flash.triton_flash_attention: 3-D query": (
        lambda: tf.triton_flash_attention(
            t(2, 8, 16, dtype=f32), t(2, 8, 16, dtype=f32), t(2, 8, 16, dtype=f32)
        ),
        ["query", "(B, H, L, D)", "(2, 8, 16)"],
    ),
    "triton_flash.triton_flash_attention: G does not divide H": (
        lambda: tf.triton_flash_attention(
            t(1, 4, 8, 16, dtype=f32), t(1, 3, 8, 16, dtype=f32), t(1, 3, 8, 16, dtype=f32)
        ),
        ["key/value", "H = 4", "(1, 3, 8, 16)"],
    ),
    "triton_flash.triton_flash_attention: block_q not a power of 2": (
        lambda: tf.triton_flash_attention(q4, q4, q4, block_q=24),
        ["block_q", "power of 2", "24"],
    ),
    "triton_flash.triton_flash_attention: bool block": (
        lambda: tf.triton_flash_attention(q4, q4, q4, block_k=True),
        ["block_k", "True"],
    ),
    "triton_flash.triton_forward: value of another D": (
        lambda: tf.triton_forward(q4, q4, t(1, 2, 8, 8, dtype=f32)),
        ["value", "(1, 2, 8, 16)", "(1, 2, 8, 8)"],
    ),
    "triton_flash.launch_forward: value of another D": (
        lambda: tf.launch_forward(None, q4, q4, t(1, 2, 8, 8, dtype=f32)),
        ["value", "(1, 2, 8, 16)", "(1, 2, 8, 8)"],
    ),
    "triton_flash.launch_forward: block_k not a power of 2": (
        lambda: tf.launch_forward(None, q4, q4, q4, block_k=24),
        ["block_k", "power of 2", "24"],
    ),
    "triton_flash.triton_backward: lse of the wrong shape": (
        tfb(lse=torch.zeros(1, 2, 7)),
        ["lse", "(B, H, L)", "(1, 2, 8)", "(1, 2, 7)"],
    ),
    "triton_flash.triton_backward: lse float64": (
        tfb(lse=lse4.double()),
        ["lse", "float32", "torch.float64"],
    ),
    "triton_flash.triton_backward: d_out of another L": (
        tfb(d_out=t(1, 2, 4, 16, dtype=f32)),
        ["d_out", "(B, H, L, D)", "(1, 2, 8, 16)", "(1, 2, 4, 16)"],
    ),
    "triton_flash.triton_backward: out of another dtype": (
        tfb(out=q4.double()),
        ["out", "torch.float32", "torch.float64"],
    ),
    "triton_dq.launch_dq: lse float64": (
        lambda: tdq.launch_dq(None, q4, q4, q4, q4, lse4.double(), q4),
        ["lse", "float32", "torch.float64"],
    ),
    "triton_dq.launch_dq: block_q not a power of 2": (
        lambda: tdq.launch_dq(None, q4, q4, q4, q4, lse4, q4, block_q=24),
        ["block_q", "power of 2", "24"],
    ),
    "triton_dq.launch_dq: d_out of another L": (
        lambda: tdq.launch_dq(None, q4, q4, q4, q4, lse4, t(1, 2, 4, 16, dtype=f32)),
        ["d_out", "(B, H, L, D)", "(1, 2, 8, 16)", "(1, 2, 4, 16)"],
    ),
    "triton_flash.backward_blocks: zero head size": (
        lambda: tf.backward_blocks(0),
        ["D", "positive int", "0"],
    ),
    "triton_flash.triton_backward: dK/dV tile not a power of 2": (
        lambda: tf.triton_backward(q4, q4, q4, q4, lse4, q4, dkdv_blocks=(16, 48)),
        ["dkdv_blocks[1]", "48"],
    ),
    "triton_flash.triton_flash_attention: backward tiles not pairs": (
        lambda: tf.triton_flash_attention(q4, q4, q4, backward=(16, 16)),
        ["backward", "(block_q, block_k)"],
    ),
    "triton_flash.triton_backward: G does not divide H": (
        lambda: tf.triton_backward(
            q4, t(1, 3, 8, 16, dtype=f32), t(1, 3, 8, 16, dtype=f32), q4, lse4, q4
        ),
        ["key/value", "H = 2"],
    ),
}


@pytest.mark.parametrize("case", list(PART_II_IV))
def test_parts_ii_to_iv_bad_input_raises_a_teaching_error(case):
    test_bad_input_raises_a_teaching_error(case, PART_II_IV)


@pytest.mark.skipif(
    not tf.triton_available(), reason='Triton is not installed: pip install -e ".[triton]"'
)
@pytest.mark.parametrize("case", list(TRITON))
def test_triton_bad_input_raises_before_any_kernel(case):
    test_bad_input_raises_a_teaching_error(case, TRITON)


# Public callables with nothing to refuse (no arguments, or autograd Functions that their checked
# wrappers call), and the cache classes, whose table is the caches' contract test.
NOT_IN_TABLE = {
    "flex_masks.causal": "a mask_mod: torch calls it with index tensors",
    "flex_masks.compiler_available": "no arguments",
    "triton_flash.triton_available": "no arguments",
    "triton_flash.interpreted": "no arguments",
    "triton_flash.TritonFlashAttention": "autograd Function behind triton_flash_attention",
    "triton_dq.undefined_lanes_are_nan": "no arguments (a context manager)",
    "flash_backward.FlashAttentionFunction": "autograd Function behind flash_attention",
    "window.SlidingWindowCache": "a cache class: the caches' table",
}
MODULES = {
    "rope": rope,
    "positions": pos,
    "tiled": tiled,
    "flash_backward": fb,
    "flex_masks": fm,
    "ring": ring,
    "ring_run": ring_run,
    "window": win,
    "pruning": pr,
    "triton_flash": tf,
    "triton_dq": tdq,
}


def test_the_table_covers_every_public_function_of_parts_ii_to_iv():
    import inspect

    cases = " ".join(list(PART_II_IV) + list(TRITON))
    missing = []
    for short, module in MODULES.items():
        for name, obj in vars(module).items():
            public = (
                not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
            )
            if (
                public
                and (inspect.isfunction(obj) or inspect.isclass(obj))
                and f"{short}.{name}" not in NOT_IN_TABLE
            ):
                if f"{short}.{name}:" not in cases:
                    missing.append(f"{short}.{name}")
    assert not missing, f"no bad-input case for {missing}"

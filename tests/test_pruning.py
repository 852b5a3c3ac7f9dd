"""Chapter 10: head masks, head importance and physical head pruning."""

import pytest
import torch

from mha_course import KVCache, MultiHeadAttention
from mha_course.analysis.pruning import (
    activation_importance,
    attention_layers,
    count_parameters,
    gradient_importance,
    least_important,
    mask_from_heads,
    prune_heads,
    prune_model_heads,
)
from mha_course.analysis.tasks import reversal_batch, sequence_loss
from mha_course.models.tiny_transformer import TinyTransformer


def _mha(E=24, H=6, G=None, seed=0, **kw):
    torch.manual_seed(seed)
    return MultiHeadAttention(E, H, G, **kw).double().eval()


def _mask(H, drop):
    m = torch.ones(H, dtype=torch.float64)
    m[list(drop)] = 0
    return m


@pytest.mark.parametrize(
    "G,drop",
    [
        (None, [1, 4]),
        (None, [0]),
        (3, [0, 1]),
        (3, [2, 3, 4, 5]),
        (3, [0, 2, 4]),
        (1, [0, 5]),
        (2, [1, 4]),
    ],
)
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_pruned_equals_masked(G, drop, impl):
    attn = _mha(G=G, impl=impl)
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    pruned = prune_heads(attn, drop)
    for kw in ({}, {"is_causal": True}):
        masked, _ = attn(x, head_mask=_mask(6, drop), **kw)
        torch.testing.assert_close(pruned(x, **kw)[0], masked)


def test_pruned_equals_masked_cross_attention_and_cache():
    attn = _mha(G=2, kdim=5, vdim=3)
    q, k, v = (torch.randn(2, 4, n, dtype=torch.float64) for n in (24, 5, 3))
    pruned = prune_heads(attn, [0, 1, 2])  # group 0 (heads 0-2) goes entirely
    torch.testing.assert_close(pruned(q, k, v)[0], attn(q, k, v, head_mask=_mask(6, [0, 1, 2]))[0])
    x = torch.randn(1, 5, 24, dtype=torch.float64)
    full = _mha(G=2)
    small = prune_heads(full, [3, 4, 5])
    cache = KVCache()
    steps = [small(x[:, t : t + 1], is_causal=True, kv_cache=cache)[0] for t in range(5)]
    ref = full(x, is_causal=True, head_mask=_mask(6, [3, 4, 5]))[0]
    torch.testing.assert_close(torch.cat(steps, dim=1), ref)


@pytest.mark.parametrize(
    "G,drop,H_new,G_new",
    [(None, [1, 4], 4, 4), (3, [0, 1], 4, 2), (3, [0, 2, 4], 3, 3), (2, [3, 4, 5], 3, 1)],
)
def test_parameter_count_drops_as_expected(G, drop, H_new, G_new):
    E, H, D = 24, 6, 4
    G0 = H if G is None else G
    attn = _mha(E, H, G)
    pruned = prune_heads(attn, drop)
    assert (pruned.num_heads, pruned.num_kv_heads, pruned.head_dim) == (H_new, G_new, D)
    removed_q, removed_kv = H - H_new, G0 - G_new
    # W_Q loses D rows (+D bias) and W_O D columns per query head; W_K and W_V D rows (+D bias)
    # per key/value group.
    expected = (
        count_parameters(attn) - removed_q * (E * D + D + E * D) - removed_kv * 2 * (E * D + D)
    )
    assert count_parameters(pruned) == expected
    assert count_parameters(attn) == 4 * E * E + 4 * E - 2 * (H - G0) * D * (
        E + 1
    )  # MHA: 4(E² + E)


def test_original_module_is_untouched():
    attn = _mha()
    before = {k: v.clone() for k, v in attn.state_dict().items()}
    prune_heads(attn, [0, 1])
    assert attn.num_heads == 6 and all(
        torch.equal(v, attn.state_dict()[k]) for k, v in before.items()
    )


@pytest.mark.parametrize(
    "G,drop,match",
    [
        (None, [6], "heads"),
        (None, range(6), "all"),
        (3, [0], "same number"),
        (2, [0, 3, 4], "same number"),
    ],
)
def test_bad_heads_raise(G, drop, match):
    with pytest.raises(ValueError, match=match):
        prune_heads(_mha(G=G), drop)


def _tiny(seed=0, G=None):
    torch.manual_seed(seed)
    return (
        TinyTransformer(
            vocab_size=7, max_len=6, embed_dim=16, num_heads=4, num_layers=2, num_kv_heads=G
        )
        .double()
        .eval()
    )


def _batches(n=2, B=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [reversal_batch(B, 6, 7, generator=g) for _ in range(n)]


def test_gradient_importance_is_mean_abs_per_example_gradient():
    model, batches = _tiny(), _batches()
    scores = gradient_importance(model, batches, sequence_loss, normalize=False)
    ref = torch.zeros(2, 4, dtype=torch.float64)
    for tokens, targets in batches:
        for b in range(tokens.shape[0]):  # one example at a time, a plain (layers, H) mask
            mask = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
            loss = sequence_loss(model(tokens[b : b + 1], head_mask=mask), targets[b : b + 1])
            ref += torch.autograd.grad(loss, mask)[0].abs()
    torch.testing.assert_close(scores.double(), (ref / 10).float().double(), rtol=1e-5, atol=1e-7)
    normed = gradient_importance(model, batches, sequence_loss)
    torch.testing.assert_close(normed.norm(dim=-1), torch.ones(2))


def test_gradient_importance_matches_finite_difference():
    model, batches = _tiny(seed=3), _batches(n=1, B=1)
    tokens, targets = batches[0]
    scores = gradient_importance(model, batches, sequence_loss, normalize=False)
    eps = 1e-6
    for layer, h in [(0, 0), (1, 3)]:
        up, down = torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)
        up[layer, h] += eps
        down[layer, h] -= eps
        with torch.no_grad():
            fd = (
                sequence_loss(model(tokens, head_mask=up), targets)
                - sequence_loss(model(tokens, head_mask=down), targets)
            ) / (2 * eps)
        assert abs(abs(fd.item()) - scores[layer, h].item()) < 1e-5


def test_activation_importance_matches_manual_contribution():
    model, batches = _tiny(), _batches(n=1)
    scores = activation_importance(model, batches)
    tokens = batches[0][0]
    # switching head h off changes the attention output by exactly its contribution W_O[:, h] o_h
    attn, x = model.blocks[0].attn, None
    with torch.no_grad():
        x = model.tok_emb(tokens) + model.pos_emb(torch.arange(6))
        x = model.blocks[0].norm1(x)
        full = attn(x)[0]
        for h in range(4):
            off = attn(x, head_mask=_mask(4, [h]))[0]
            expected = (full - off).norm(dim=-1).mean()
            torch.testing.assert_close(
                scores[0, h].double(), expected.float().double(), rtol=1e-5, atol=1e-7
            )


def test_zero_masked_head_has_zero_importance():
    model, batches = _tiny(), _batches(n=1)
    dead = prune_model_heads(model, {})
    with torch.no_grad():
        dead.blocks[1].attn.out_proj.weight[:, 8:12] = 0  # head 2 of layer 1 writes nothing
    assert activation_importance(dead, batches)[1, 2] == 0
    assert gradient_importance(dead, batches, sequence_loss, normalize=False)[1, 2] == 0


def test_least_important_and_mask():
    scores = torch.tensor([[0.5, 0.1, 0.9], [0.2, 0.8, 0.05]])
    heads = least_important(scores, 3)
    assert heads == {0: [1], 1: [0, 2]}
    assert torch.equal(mask_from_heads(heads, 2, 3), torch.tensor([[1.0, 0, 1], [0, 1, 0]]))


@pytest.mark.parametrize("G", [None, 2])
def test_pruned_model_equals_masked_model(G):
    model = _tiny(G=G)
    tokens = _batches(n=1)[0][0]
    heads = {0: [0, 1], 1: [1, 3]} if G else {0: [1], 1: [0, 2, 3]}
    pruned = prune_model_heads(model, heads)
    with torch.no_grad():
        ref = model(tokens, head_mask=mask_from_heads(heads, 2, 4).double())
        torch.testing.assert_close(pruned(tokens), ref)
    assert [a.num_heads for a in attention_layers(pruned)] == [4 - len(heads[0]), 4 - len(heads[1])]
    assert count_parameters(pruned) < count_parameters(model)
    assert [a.num_heads for a in attention_layers(model)] == [4, 4]

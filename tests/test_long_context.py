"""Chapter 14's long-context experiment on a tiny random RoPE GPT, against dense forwards."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TOL64

from mha_course.caches.window import sliding_window_mask
from mha_course.experiments import long_context as lc
from mha_course.gpt import GPT, GPTConfig
from mha_course.gpt.heads import attention_weights, first_token_score

V, N = 11, 24


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return (
        GPT(
            GPTConfig(
                vocab_size=V, context_length=8, n_layer=2, n_head=2, n_embd=16, positions="rope"
            )
        )
        .double()
        .eval()
    )


@pytest.fixture(scope="module")
def data():
    ids = torch.randint(0, V, (3 * N + 1,), generator=torch.Generator().manual_seed(1))
    return lc.segments(ids, N, 3)


def dense_losses(model: GPT, x, y, mask=None) -> torch.Tensor:
    """The reference: one forward over all N ids, each layer masked by ``mask`` (None: causal)."""
    h = model.wte(x)
    for b in model.blocks:
        a = (
            b.attn(b.ln_1(h), is_causal=True)[0]
            if mask is None
            else b.attn(b.ln_1(h), attn_mask=mask)[0]
        )
        h = h + a
        h = h + b.mlp(b.ln_2(h))
    logits = model.lm_head(model.ln_f(h))  # (B, N, V)
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)  # (N,)


def test_segments_are_consecutive_stretches():
    ids = torch.arange(50)
    x, y = lc.segments(ids, 8, 6)
    assert x.shape == y.shape == (6, 8)
    torch.testing.assert_close(x.flatten(), ids[:48])
    torch.testing.assert_close(y.flatten(), ids[1:49])
    with pytest.raises(ValueError, match="count"):
        lc.segments(ids, 8, 7)


def test_full_cache_decoding_equals_the_dense_forward(model, data):
    x, y = data  # N = 3 x context_length: past the training context
    with torch.no_grad():
        got = lc.decode_losses(model, x, y, lc.cache_kinds((6,), 2)["full"])
        torch.testing.assert_close(got, dense_losses(model, x, y), **TOL64)


@pytest.mark.parametrize("name,window,sinks", [("window 6", 6, 0), ("window 4 + 2 sinks", 4, 2)])
def test_window_and_sink_decoding_equal_the_banded_dense_forward(model, data, name, window, sinks):
    x, y = data
    make = lc.cache_kinds((6,), 2)[name]
    mask = sliding_window_mask(N, window=window, num_sink=sinks)  # (N, N) bool
    with torch.no_grad():
        got = lc.decode_losses(model, x, y, make)
        torch.testing.assert_close(got, dense_losses(model, x, y, mask), **TOL64)
        # and the eviction matters: past the window the loss differs from the full cache's
        assert not torch.allclose(
            got[window + sinks :], dense_losses(model, x, y)[window + sinks :]
        )


def test_cache_kinds_hold_the_same_number_of_tokens():
    kinds = lc.cache_kinds((8, 16), 4)
    assert list(kinds) == [
        "full",
        "window 8",
        "window 4 + 4 sinks",
        "window 16",
        "window 12 + 4 sinks",
    ]
    k = torch.zeros(1, 1, 40, 2)
    for name in kinds:
        if name != "full":
            c = kinds[name]()
            c.update(k, k)
            assert c.num_cached == int(name.split()[1]) + (4 if "sinks" in name else 0)
    with pytest.raises(ValueError, match="sizes"):
        lc.cache_kinds((4,), 4)


def test_first_token_mass_is_chapter_13s_score(model, data):
    x = data[0][:, :8]
    mass = lc.first_token_mass(model, x)
    w = attention_weights(model, x)  # (n_layer, B, H, T, T)
    expected = torch.stack([first_token_score(layer) for layer in w])
    torch.testing.assert_close(torch.tensor(mass["first"], dtype=torch.float64), expected, **TOL64)
    # first + (p other keys x their mean weight) = 1 for every query, so the means satisfy
    p = torch.arange(1, 8, dtype=torch.float64)
    other = ((1 - w[..., 1:, 0]) / p).mean(dim=(1, 3))
    torch.testing.assert_close(torch.tensor(mass["other"], dtype=torch.float64), other, **TOL64)


def test_summarise_splits_inside_and_past():
    s = lc.summarise(torch.arange(8, dtype=torch.float64), 4)
    assert s == {"all": 3.5, "inside": 1.5, "past": 5.5, "per_block": [1.5, 5.5]}

"""The attention explorer: its maps come from the real modules, masks and temperature do what
they say, the hand-set heads do their jobs, and the widget UI updates without a browser."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mha_course.analysis import explorer  # noqa: E402
from mha_course.analysis.explorer import (  # noqa: E402
    HEAD_NAMES,
    MASKS,
    PAD,
    SENTENCES,
    build_explorer,
    embed,
    explore,
    plot_view,
    tiny_model,
)
from mha_course.ops.masks import causal_mask  # noqa: E402

SETTINGS = [
    (s, layer, head, mask)
    for s in SENTENCES
    for layer in (0, 1)
    for head in range(4)
    for mask in MASKS
]


def _module_weights(sentence, layer, mask):
    """Oracle: the same model run through MultiHeadAttention.forward (need_weights=True)."""
    tokens = SENTENCES[sentence] + ([PAD] * explorer.N_PAD if mask == "padding" else [])
    T = len(tokens)
    kwargs = {}
    if mask == "causal":
        kwargs["is_causal"] = True
    if mask == "padding":
        kwargs["key_padding_mask"] = torch.tensor([[w == PAD for w in tokens]])  # (B=1, S)
    x = embed(tokens)
    with torch.no_grad():
        for module in tiny_model()[:layer]:
            x = x + module(x, **kwargs)[0]
        _, weights = tiny_model()[layer](x, need_weights=True, **kwargs)
    assert weights.shape == (1, 4, T, T)
    return weights[0]


@pytest.mark.parametrize("sentence,layer,head,mask", SETTINGS)
def test_weights_equal_multihead_attention_module(sentence, layer, head, mask):
    view = explore(sentence, layer, head, temperature=1.0, mask=mask)
    torch.testing.assert_close(view.weights, _module_weights(sentence, layer, mask)[head])
    torch.testing.assert_close(
        view.weights.sum(-1), torch.ones(len(view.tokens), dtype=torch.float64)
    )


def test_output_is_weights_times_values():
    view = explore("the dog chased the cat because it was hungry", layer=1, head=2, mask="causal")
    x = embed(view.tokens)
    layer1, layer2 = tiny_model()
    with torch.no_grad():
        x = x + layer1(x, is_causal=True)[0]
        v = layer2.v_proj(x)[0, :, 2 * 32 : 3 * 32]  # head 2's slice of V: (T, D)
    torch.testing.assert_close(view.output, view.weights @ v)


def test_causal_mask_zeroes_the_future():
    view = explore(mask="causal", head=3)  # the "next token" head wants exactly the future
    T = len(view.tokens)
    assert torch.equal(view.allowed, causal_mask(T))
    assert view.weights.masked_select(~causal_mask(T)).abs().max() == 0
    # it cannot see its target, so all visible scores tie: uniform over the prefix
    expected = causal_mask(T).double() / torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    torch.testing.assert_close(view.weights, expected)


def test_padding_mask_hides_pad_keys():
    view = explore("toy: A B C D A B C D", head=0, mask="padding")
    assert view.tokens[-explorer.N_PAD :] == [PAD] * explorer.N_PAD
    assert view.weights[:, -explorer.N_PAD :].abs().max() == 0
    assert len(view.tokens) == len(SENTENCES["toy: A B C D A B C D"]) + explorer.N_PAD


def test_temperature_sharpens_and_flattens():
    # the "previous token" head; row 0 has no previous token, so look at rows 1..T-1
    maxima = [
        explore(head=1, temperature=t).weights[1:].max(-1).values.mean().item()
        for t in (10.0, 3.0, 1.0, 0.3, 0.1)
    ]
    assert maxima == sorted(maxima) and maxima[-1] > 0.99 and maxima[0] < 0.25
    cold = explore(head=1, temperature=0.01).weights  # row i puts everything on i - 1
    torch.testing.assert_close(cold[1:], torch.eye(6, dtype=torch.float64)[:-1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("sentence", list(SENTENCES))
def test_hand_set_heads_do_their_jobs(sentence):
    tokens = SENTENCES[sentence]
    T = len(tokens)
    same, prev, nouns, nxt = (explore(sentence, 0, h, temperature=0.2).weights for h in range(4))
    for i in range(T):
        assert tokens[int(same[i].argmax())] == tokens[i]
        if i > 0:
            assert int(prev[i].argmax()) == i - 1
        if i < T - 1:
            assert int(nxt[i].argmax()) == i + 1
        if any(w in explorer.NOUNS for w in tokens):
            assert tokens[int(nouns[i].argmax())] in explorer.NOUNS


def test_untrained_layer_is_nearly_uniform():
    view = explore(layer=1, head=0)
    T = len(view.tokens)
    assert (view.weights - 1 / T).abs().max() < 0.05


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"sentence": "unknown words"}, "sentence"),
        ({"layer": 2}, "layer"),
        ({"head": 4}, "head"),
        ({"temperature": 0.0}, "temperature"),
        ({"mask": "future"}, "mask"),
    ],
)
def test_bad_settings_raise_value_error_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        explore(**kwargs)


def test_embed_rejects_unknown_tokens():
    with pytest.raises(ValueError, match="^tokens:"):
        embed(["the", "zebra"])


def test_plot_view_draws_map_and_output():
    view = explore(mask="padding")
    fig = plot_view(view)
    ax_map, ax_out = fig.axes[:2]
    assert [t.get_text() for t in ax_map.get_xticklabels()] == view.tokens
    assert ax_map.get_title() == view.title and "padding" in view.title
    assert ax_out.get_title() == "head output = weights @ V"
    plt.close(fig)


def test_widget_controls_update_the_view():
    ui = build_explorer()
    assert ui.current().mask == "none"
    ui.controls["mask"].value = "causal"
    ui.controls["layer"].value = 1
    ui.controls["temperature"].value = 0.5
    view = ui.current()
    assert (view.mask, view.layer, view.temperature) == ("causal", 1, 0.5)
    assert ui.controls["head"].options[0][0].endswith(HEAD_NAMES[1][0])
    torch.testing.assert_close(
        view.weights, explore(layer=1, mask="causal", temperature=0.5).weights
    )
    plt.close("all")

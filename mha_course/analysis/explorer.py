"""Chapter 11: an attention explorer — pick a sentence, a layer and head, a temperature and a mask,
and see the attention map and the head's output.

The model is tiny and fully known, so every map can be explained:

* **Embeddings are hand-set** (E = 128): a one-hot of the word (32 slots), a one-hot of its part
  of speech (noun / verb / other), a one-hot of its position (32 slots) and a constant 1.
* **Layer 1 is hand-set**: four heads (``MultiHeadAttention`` with H = 4, D = 32) whose W_Q and
  W_K pick out one job each — *same word*, *previous token*, *nouns*, *next token* — and whose
  W_V copies the word one-hot, so a head's output says which words it read.
* **Layer 2 has seeded random weights** (``torch.manual_seed(0)``, default init): an untrained
  layer, for comparison. It reads ``x + layer1(x)`` (a residual connection).

:func:`explore` computes one head's map (testable, no widgets); :func:`plot_view` draws it;
:func:`build_explorer` wraps both in an ipywidgets UI for JupyterLab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from mha_course.analysis.plotting import plot_attention
from mha_course.attention.heads import merge_heads, split_heads
from mha_course.attention.mha import MultiHeadAttention
from mha_course.ops.masks import causal_mask, padding_mask
from mha_course.ops.sdpa import scaled_dot_product_attention

SENTENCES: dict[str, list[str]] = {
    "the cat sat on the mat": "the cat sat on the mat".split(),
    "the dog chased the cat because it was hungry": "the dog chased the cat because it was hungry".split(),
    "toy: A B C D A B C D": "A B C D A B C D".split(),
}
MASKS = ("none", "causal", "padding")
HEAD_NAMES = (
    ("same word", "previous token", "nouns", "next token"),
    ("random 0", "random 1", "random 2", "random 3"),
)
LAYER_NAMES = ("layer 1 (hand-set)", "layer 2 (random, seeded)")
PAD, N_PAD = "<pad>", 2  # the padding mask appends N_PAD padding tokens
NOUNS, VERBS = {"cat", "mat", "dog"}, {"sat", "chased", "was"}
VOCAB = sorted({w for words in SENTENCES.values() for w in words}) + [PAD]

E, H, D = 128, 4, 32  # embed_dim, heads, head_dim
TOKEN, POS_TAG, POSITION, CONST = 0, 32, 35, 67  # where each feature block starts in E
MAX_LEN = 32
GAIN = 4.0  # a designed match scores GAIN**2 / sqrt(D) = 2.83 at temperature 1


@dataclass(frozen=True)
class AttentionView:
    """One head's attention for one setting.

    Shape:
        weights: (T, T) rows = queries, columns = keys; output: (T, D) the head's output;
        allowed: (T, T) bool, True = may attend (all True for mask "none").
    """

    tokens: list[str]
    weights: torch.Tensor
    output: torch.Tensor
    allowed: torch.Tensor
    layer: int
    head: int
    temperature: float
    mask: str

    @property
    def title(self) -> str:
        return (
            f"{LAYER_NAMES[self.layer].split(' (')[0]}, head {self.head} "
            f"({HEAD_NAMES[self.layer][self.head]}), τ={self.temperature:g}, mask: {self.mask}"
        )


def embed(tokens: list[str]) -> torch.Tensor:
    """Hand-set embeddings: word one-hot, part-of-speech one-hot, position one-hot, constant 1.

    Shape:
        Returns (1, T, E) in float64.
    """
    if len(tokens) > MAX_LEN:
        raise ValueError(f"tokens: expected at most {MAX_LEN} tokens, got {len(tokens)}")
    x = torch.zeros(1, len(tokens), E, dtype=torch.float64)
    for t, word in enumerate(tokens):
        if word not in VOCAB:
            raise ValueError(f"tokens: {word!r} is not in the explorer's vocabulary {VOCAB}")
        x[0, t, TOKEN + VOCAB.index(word)] = 1.0
        if word != PAD:
            x[0, t, POS_TAG + (0 if word in NOUNS else 1 if word in VERBS else 2)] = 1.0
            x[0, t, CONST] = 1.0
        x[0, t, POSITION + t] = 1.0
    return x


@lru_cache(maxsize=1)
def tiny_model() -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """The two layers: layer 1 hand-set (see the module docstring), layer 2 seeded random."""
    with torch.random.fork_rng():  # leave the caller's random state alone
        torch.manual_seed(0)
        layer1 = MultiHeadAttention(E, H, bias=False, impl="eager", dtype=torch.float64)
        layer2 = MultiHeadAttention(E, H, bias=False, impl="eager", dtype=torch.float64)
    W_Q = torch.zeros(H, D, E, dtype=torch.float64)  # per head: (D, E)
    W_K = torch.zeros(H, D, E, dtype=torch.float64)
    d = torch.arange(D)
    W_Q[0, d, TOKEN + d] = W_K[0, d, TOKEN + d] = GAIN  # same word: q.k > 0 iff same word
    W_Q[1, d[:-1], POSITION + d[:-1] + 1] = GAIN  # previous token: query at i asks for i - 1
    W_K[1, d, POSITION + d] = GAIN
    W_Q[2, 0, CONST] = W_K[2, 0, POS_TAG + 0] = GAIN  # nouns: every query asks for a noun
    W_Q[3, d, POSITION + d] = GAIN  # next token: query at i asks for i + 1
    W_K[3, d[:-1], POSITION + d[:-1] + 1] = GAIN
    W_V = torch.zeros(H, D, E, dtype=torch.float64)
    W_V[:, d, TOKEN + d] = 1.0  # every head copies the word one-hot of what it reads
    with torch.no_grad():
        layer1.q_proj.weight.copy_(W_Q.reshape(H * D, E))  # (H, D, E) -> (H*D, E)
        layer1.k_proj.weight.copy_(W_K.reshape(H * D, E))
        layer1.v_proj.weight.copy_(W_V.reshape(H * D, E))
    return layer1.eval(), layer2.eval()


def _allowed(mask: str, tokens: list[str]) -> torch.Tensor:
    """(T, T) bool, True = may attend."""
    T = len(tokens)
    if mask == "causal":
        return causal_mask(T)
    if mask == "padding":
        n_real = sum(w != PAD for w in tokens)
        return ~padding_mask([n_real], S=T).expand(T, T)  # (1, S) -> (T, S)
    return torch.ones(T, T, dtype=torch.bool)


def _attend(
    layer: MultiHeadAttention, x: torch.Tensor, allowed: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer with scores divided by ``temperature``.

    Shape:
        x: (1, T, E). Returns layer output (1, T, E), per-head outputs (1, H, T, D) and
        weights (1, H, T, T).
    """
    q = split_heads(layer.q_proj(x), H)  # (1, T, E) -> (1, H, T, D)
    k = split_heads(layer.k_proj(x), H)
    v = split_heads(layer.v_proj(x), H)
    scale = 1.0 / (math.sqrt(D) * temperature)
    heads, weights = scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, scale=scale, return_weights=True
    )
    return layer.out_proj(merge_heads(heads)), heads, weights  # (1, H, T, D) -> (1, T, E)


def explore(
    sentence: str = "the cat sat on the mat",
    layer: int = 0,
    head: int = 0,
    temperature: float = 1.0,
    mask: str = "none",
) -> AttentionView:
    """Run the tiny model and return one head's attention map and output.

    ``temperature`` divides every layer's scores (on top of 1/sqrt(D)); ``mask`` is applied in
    every layer. ``"padding"`` appends two ``<pad>`` tokens and hides them as keys.

    Shape:
        Returns an :class:`AttentionView` with weights (T, T) and output (T, D).
    """
    if sentence not in SENTENCES:
        raise ValueError(f"sentence: expected one of {list(SENTENCES)}, got {sentence!r}")
    if layer not in (0, 1):
        raise ValueError(f"layer: expected 0 or 1, got {layer!r}")
    if head not in range(H):
        raise ValueError(f"head: expected an integer in 0..{H - 1}, got {head!r}")
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature: expected a positive number, got {temperature!r}")
    if mask not in MASKS:
        raise ValueError(f"mask: expected one of {MASKS}, got {mask!r}")
    tokens = SENTENCES[sentence] + ([PAD] * N_PAD if mask == "padding" else [])
    allowed = _allowed(mask, tokens)
    x = embed(tokens)
    with torch.no_grad():
        for module in tiny_model()[:layer]:
            x = x + _attend(module, x, allowed, temperature)[0]  # residual: (1, T, E)
        _, heads, weights = _attend(tiny_model()[layer], x, allowed, temperature)
    return AttentionView(
        tokens, weights[0, head], heads[0, head], allowed, layer, head, float(temperature), mask
    )


def plot_view(view: AttentionView, axes=None, show_output: bool = True):
    """Draw the attention map (cells the mask forbids hatched) and, optionally, the head's output.

    In layer 1 the output columns are words (W_V copies the word one-hot); only words of the
    sentence are shown. Returns the matplotlib Figure.
    """
    if axes is None:
        ncols = 2 if show_output else 1
        _, axes = plt.subplots(1, ncols, figsize=(6.2 * ncols, 4.6), squeeze=False)
    axes = np.atleast_1d(axes).ravel()  # one Axes or several -> a flat array
    ax = plot_attention(
        view.weights,
        view.tokens,
        view.tokens,
        ax=axes[0],
        title=view.title,
        annotate=len(view.tokens) <= 9,
    )
    for i, j in (~view.allowed).nonzero().tolist():  # hatch the cells the mask forbids
        ax.add_patch(
            Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="grey", lw=0)
        )
    if show_output:
        out = view.output
        if view.layer == 0:
            words = [w for w in VOCAB if w in view.tokens]
            out = out[:, [VOCAB.index(w) for w in words]]  # (T, D) -> (T, words in the sentence)
            xlabel = "output feature = word it copies"
        else:
            words, xlabel = None, "output feature d"
        lim = float(out.abs().max()) or 1.0
        im = axes[1].imshow(out.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        axes[1].figure.colorbar(im, ax=axes[1], fraction=0.046, pad=0.04)
        axes[1].set_yticks(range(len(view.tokens)), labels=view.tokens)
        if words is not None:
            axes[1].set_xticks(range(len(words)), labels=words, rotation=60, ha="right")
        axes[1].set(xlabel=xlabel, ylabel="token (query)", title="head output = weights @ V")
    ax.figure.tight_layout()
    return ax.figure


def build_explorer(
    sentence: str = "the cat sat on the mat",
    layer: int = 0,
    head: int = 0,
    temperature: float = 1.0,
    mask: str = "none",
):
    """An ipywidgets UI: sentence, layer, head, temperature and mask controls above the plot.

    Returns the ``VBox``; ``ui.controls`` holds the widgets and ``ui.current()`` the
    :class:`AttentionView` on display (handy for tests and for reading numbers).
    """
    import ipywidgets as widgets
    from IPython.display import display

    state = {"view": explore(sentence, layer, head, temperature, mask)}
    # Sized to their text: ipywidgets' defaults (300 px drop-downs, 148 px buttons) cut the longest
    # sentence and "layer 2 (random, seeded)" short with an ellipsis (tools/site_render.py checks).
    wide = widgets.Layout(width="36em")
    buttons = {"button_width": "auto", "description_width": "initial"}
    controls = {
        "sentence": widgets.Dropdown(
            options=list(SENTENCES), value=sentence, description="sentence", layout=wide
        ),
        "layer": widgets.ToggleButtons(
            options=[(n, i) for i, n in enumerate(LAYER_NAMES)],
            value=layer,
            description="layer",
            style=buttons,
        ),
        "head": widgets.Dropdown(options=_head_options(layer), value=head, description="head"),
        "temperature": widgets.FloatLogSlider(
            value=temperature, base=10, min=-1, max=1, step=0.05, description="temperature"
        ),
        "mask": widgets.ToggleButtons(
            options=list(MASKS), value=mask, description="mask", style=buttons
        ),
    }
    output = widgets.Output()

    def redraw(_change=None) -> None:
        values = {name: w.value for name, w in controls.items()}
        state["view"] = explore(**values)
        with output:
            output.clear_output(wait=True)
            fig = plot_view(state["view"])
            display(fig)
            plt.close(fig)

    def on_layer(change) -> None:
        controls["head"].options = _head_options(change["new"])  # keeps the head index

    controls["layer"].observe(on_layer, names="value")
    for w in controls.values():
        w.observe(redraw, names="value")
    ui = widgets.VBox([*controls.values(), output])
    ui.controls, ui.current = controls, lambda: state["view"]
    redraw()
    return ui


def _head_options(layer: int) -> list[tuple[str, int]]:
    return [(f"{h}: {name}", h) for h, name in enumerate(HEAD_NAMES[layer])]

"""Chapter 13: the model drawn by code — boxes and arrows from a :class:`GPTConfig`."""

from __future__ import annotations

from mha_course.gpt.config import GPTConfig


def draw_gpt(config: GPTConfig, ax=None):
    """Draw the decoder-only model: embeddings, one pre-norm block (x n_layer), read-out.

    The labels come from ``config`` (widths, heads, key/value heads, dropout, positions), so
    the picture is always the model that was built. Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 8.4))
    E, H, G, p = config.n_embd, config.n_head, config.kv_heads, config.dropout
    kind = "MHA" if G == H else ("MQA" if G == 1 else "GQA")
    pos = {
        "learned": f"+ learned positions ({config.context_length}, {E})",
        "rope": f"(RoPE, {config.rope_layout} layout, inside attention)",
        "none": "(no positions)",
    }[config.positions]
    boxes = [  # (y, text, colour)
        (0.3, f"ids (B, T), T <= {config.context_length}", "#eeeeee"),
        (1.3, f"token embedding ({config.vocab_size}, {E}) {pos}\ndropout p={p}", "#dbe9f6"),
        (2.6, "LayerNorm", "#fff2cc"),
        (
            3.5,
            f"causal {kind}: H={H} query heads, G={G} K/V heads, D={config.head_dim}\n"
            f"attention-weight dropout p={p}",
            "#f8d7da",
        ),
        (4.4, f"residual dropout p={p}, then  x + ...", "#e2f0d9"),
        (5.3, "LayerNorm", "#fff2cc"),
        (6.2, f"MLP  {E} -> {config.mlp_ratio * E} -> GELU -> {E}, dropout p={p}", "#f8d7da"),
        (7.1, "x + ...", "#e2f0d9"),
        (8.3, "final LayerNorm", "#fff2cc"),
        (
            9.2,
            f"read-out ({E} -> {config.vocab_size})"
            + (", tied to the token embedding" if config.tie_weights else ""),
            "#dbe9f6",
        ),
        (10.1, "logits (B, T, V): next-character scores", "#eeeeee"),
    ]
    for y, text, colour in boxes:
        ax.add_patch(
            FancyBboxPatch(
                (0.5, y - 0.3),
                6.0,
                0.6,
                boxstyle="round,pad=0.05",
                facecolor=colour,
                edgecolor="0.3",
            )
        )
        ax.text(3.5, y, text, ha="center", va="center", fontsize=8.5)
    for (y0, *_), (y1, *_) in zip(boxes, boxes[1:]):
        ax.add_patch(
            FancyArrowPatch(
                (3.5, y0 + 0.35), (3.5, y1 - 0.35), arrowstyle="-|>", mutation_scale=10, color="0.3"
            )
        )
    for y_from, y_to in ((2.0, 4.4), (4.75, 7.1)):  # the two residual paths
        ax.add_patch(
            FancyArrowPatch(
                (0.45, y_from),
                (0.45, y_to),
                connectionstyle="arc3,rad=0.5",
                arrowstyle="-|>",
                mutation_scale=10,
                color="tab:green",
            )
        )
    ax.add_patch(
        FancyBboxPatch(
            (0.1, 2.1),
            6.8,
            5.35,
            boxstyle="round,pad=0.05",
            fill=False,
            linestyle="--",
            edgecolor="tab:blue",
        )
    )
    ax.text(
        6.95,
        4.8,
        f"x {config.n_layer}\nblocks",
        color="tab:blue",
        fontsize=9,
        va="center",
        ha="left",
    )
    ax.text(-0.25, 5.9, "residual", color="tab:green", fontsize=7.5, rotation=90, va="center")
    ax.set_xlim(-0.3, 8.0)
    ax.set_ylim(10.6, -0.2)
    ax.axis("off")
    ax.set_title("A small GPT: pre-norm decoder blocks", fontsize=11)
    return ax

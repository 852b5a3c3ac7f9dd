"""ex12's debugging item: a checkpoint exported with RoPE in the "interleaved" layout, loaded into
a model that rotates in the "half" layout. The learner finds why the outputs disagree and returns a
corrected state dict; the grade is the fixed model's output on per-student weights and inputs.

The driver (child side) builds the exporter from the case's seed, hands the learner its state dict,
loads what comes back into a ``rope="half"`` model (strictly: same keys, same shapes) and runs it.
The driver returns that output and the q/k weights the model loaded; the reference (parent side)
is the exporter's own output and its q/k weights converted by the chapter's converter. Mistake variants convert the wrong
tensors (v instead of k, q only), in the wrong direction, along the wrong axis, or not the biases.
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.grading.child.drivers import (  # drive_fix runs in the child (drivers.py)
    _exporter,
    _run_half,
)
from mha_course.ops.rope import convert_rope_layout

# Symptoms, not fixes (feedback is shown before any hint).
LEFT_AS_IS = (
    "the outputs equal those of the checkpoint loaded as it came: the model still reads "
    "the exporter's q/k features in its own pairing"
)
V_NOT_K = (
    "the scores still differ from the exporter's: the queries changed layout but the keys "
    "did not, and v_proj (which RoPE never touches) was reordered"
)
ONLY_Q = (
    "the scores still differ from the exporter's: the queries are in the model's layout, the "
    "keys are still in the exporter's, so q · k pairs features that do not belong together"
)
INVERSE = (
    "the reordering went the wrong way: it maps the 'half' order to the 'interleaved' one, "
    "the reverse of what this checkpoint and model call for (the two differ once D > 4)"
)
COLUMNS = (
    "the q/k projections' columns (the E input features) were reordered, not their rows (the "
    "H · D output features, where the RoPE pairs live)"
)
BIASES = (
    "the weights are fixed but the q/k biases are still in the exporter's layout: the outputs "
    "would match with bias=False"
)


def reference(seed, embed_dim, num_heads, num_kv_heads, x):
    """The exporter's own output on x (what the fixed model must reproduce), and the q/k weights
    converted to 'half' by the chapter's converter."""
    ex = _exporter(seed, embed_dim, num_heads, num_kv_heads)
    H, G, D = int(num_heads), int(num_kv_heads), int(embed_dim) // int(num_heads)
    with torch.no_grad():
        y = ex(x, x, x, is_causal=True, need_weights=False)[0]
        return (
            y,
            convert_rope_layout(ex.q_proj.weight, H, D, to="half"),
            convert_rope_layout(ex.k_proj.weight, G, D, to="half"),
        )


def variant(names=("q_proj", "k_proj"), to="half", columns=False, biases=True):
    """What the model outputs after converting the projections in ``names`` a given way."""

    def run(seed, embed_dim, num_heads, num_kv_heads, x):
        state = _exporter(seed, embed_dim, num_heads, num_kv_heads).state_dict()
        H, G, D = int(num_heads), int(num_kv_heads), int(embed_dim) // int(num_heads)
        for name in names:
            heads = H if name == "q_proj" else G
            w = state[f"{name}.weight"]  # (heads * D, E)
            state[f"{name}.weight"] = (
                convert_rope_layout(w.T, H, D, to=to).T
                if columns
                else convert_rope_layout(w, heads, D, to=to)
            )
            if biases:
                state[f"{name}.bias"] = convert_rope_layout(state[f"{name}.bias"], heads, D, to=to)
        return _run_half(state, embed_dim, num_heads, num_kv_heads, x)

    return run


def cases(rng: np.random.Generator) -> list[dict]:
    """D >= 8 in every case (for D = 4 the permutation is its own inverse); one MHA, two GQA."""

    def case(B, L, E, H, G):
        return {
            "seed": int(rng.integers(2**31)),
            "embed_dim": E,
            "num_heads": H,
            "num_kv_heads": G,
            "x": rng.normal(size=(B, L, E)),
        }

    return [
        case(2, 7, 32, 4, 2),  # D = 8, GQA: the key heads' count matters
        case(1, 9, 32, 2, 2),  # D = 16, MHA
        case(2, 5, 48, 6, 3),
    ]  # D = 8, GQA

"""Issue 19, class 9 for ex12_rope: transformers' ``apply_rotary_pos_emb`` computes the rotation
(the 'half' layout, given cos/sin tables). A rope built on it, with its own angles and a
permutation around it for 'interleaved', earned the item (2/2) while the item graded the rotated
x alone. The item now also grades cos and sin as (L, D) tables in x's own layout: the rotation is
right, the tables it handed the helper are in 'half' order, and the item is lost with that named."""

from __future__ import annotations

import pytest
from grading_helpers import build, grade_many

from mha_grader.sandbox.launch import Limits

pytest.importorskip("transformers")

LIBRARY_ROPE = """
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

def rope(x, positions, layout):
    D = x.shape[-1]
    freqs = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
    y = x if layout == "half" else x[..., perm]
    out, _ = apply_rotary_pos_emb(y, y, cos, sin, unsqueeze_dim=0)
    return (out if layout == "half" else out[..., torch.argsort(perm)]), cos, sin
"""


def test_a_rope_built_on_transformers_helper_does_not_earn_the_item(tmp_path):
    path = build("ex12", tmp_path / "sub.ipynb", replace={"ex12_rope": LIBRARY_ROPE})
    # importing transformers in the sandbox takes seconds on a loaded machine: longer stage limits
    limits = Limits(item_timeout=120.0, notebook_timeout=400.0, memory_gb=4.0)
    results, notes = grade_many({"lib": (path, "ex12")}, limits=limits)["lib"]
    r = results["ex12_rope"]
    assert not any("timeout" in n for n in notes), notes
    assert (r.points, r.status) == (0.0, "wrong values"), f"{r.status}: {r.message}"
    assert "tables in the 'half' order" in r.message, r.message

"""Chapter 13: turn a trained MHA model into GQA/MQA by mean-pooling key/value heads.

Each block's attention goes through chapter 7's :func:`mha_course.mha_to_gqa`; everything
else is copied. The GQA paper (Ainslie et al., 2023) then *uptrains* the converted model for a
few percent of the original steps (``mha-course train --init-from ... --convert-kv-heads G``).
"""

from __future__ import annotations

import copy
import dataclasses

from mha_course.attention.gqa import mha_to_gqa
from mha_course.gpt.model import GPT


def convert_to_gqa(model: GPT, num_kv_heads: int) -> GPT:
    """A copy of ``model`` whose every layer has G = ``num_kv_heads`` key/value heads.

    Shape:
        per layer k_proj/v_proj weights (G_src * D, E) -> (G * D, E); the model maps
        ids (B, L) -> logits (B, L, V) as before.
    """
    new = copy.deepcopy(model)
    for block in new.blocks:
        block.attn = mha_to_gqa(block.attn, num_kv_heads)
    new.config = dataclasses.replace(model.config, n_kv_head=num_kv_heads)
    return new

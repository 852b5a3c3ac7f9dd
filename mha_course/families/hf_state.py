"""Chapter 20: a Hugging Face ``transformers`` state dict renamed and reshaped for :class:`FamilyLM`.

:func:`state_from_hf` reads every weight the course's model needs by its ``transformers`` name,
strictly: a weight it needs that is missing, and a weight nothing reads (the course would silently
not model it), are refused by name. GPT-2 stores its projections as ``Conv1D`` (``x @ W``, W of
shape (in, out)) and fuses Q, K and V into one (E, 3E) matrix; Phi-3 fuses W_Q, W_K, W_V and the
gate and up projections; every other family uses ``nn.Linear`` (``x @ W.T``) with Llama's names.
"""

from __future__ import annotations

import torch

from mha_course.families.config import FamilyConfig
from mha_course.families.model import FamilyLM


class _Reader:
    """Reads a ``transformers`` state dict key by key and remembers what it read, so that a
    weight nothing reads (the course would silently not model it) can be refused after."""

    def __init__(self, sd: dict) -> None:
        self.sd, self.read = sd, set()

    def __call__(self, key: str, ours: str) -> torch.Tensor:
        if key not in self.sd:
            raise ValueError(f"state_dict: expected {key!r} (for our {ours!r}); not there")
        self.read.add(key)
        return self.sd[key]

    def refuse_unread(self, ignore: tuple[str, ...] = ()) -> None:
        unread = sorted(
            k for k in set(self.sd) - self.read if "rotary_emb" not in k and not k.endswith(ignore)
        )
        if unread:
            raise ValueError(
                f"state_dict: {len(unread)} weights the course does not model: "
                f"{unread[:5]}{' ...' if len(unread) > 5 else ''}"
            )


def _gpt2_state(sd: dict, c: FamilyConfig) -> dict:
    E, take = c.n_embd, _Reader(sd)
    out = {
        "embed.weight": take("transformer.wte.weight", "embed.weight"),
        "pos.weight": take("transformer.wpe.weight", "pos.weight"),
        "norm.weight": take("transformer.ln_f.weight", "norm.weight"),
        "norm.bias": take("transformer.ln_f.bias", "norm.bias"),
    }
    for i in range(c.n_layer):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        W = take(h + "attn.c_attn.weight", b + "attn.q_proj.weight")  # (E, 3E)
        bias = take(h + "attn.c_attn.bias", b + "attn.q_proj.bias")  # (3E,)
        for j, name in enumerate(("q", "k", "v")):  # Conv1D (in, out) -> Linear (out, in)
            out[b + f"attn.{name}_proj.weight"] = W[:, j * E : (j + 1) * E].T
            out[b + f"attn.{name}_proj.bias"] = bias[j * E : (j + 1) * E]
        pairs = {"attn.o_proj": "attn.c_proj", "mlp.up": "mlp.c_fc", "mlp.down": "mlp.c_proj"}
        for ours, theirs in pairs.items():
            out[b + ours + ".weight"] = take(h + theirs + ".weight", b + ours + ".weight").T
            out[b + ours + ".bias"] = take(h + theirs + ".bias", b + ours + ".bias")
        for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
            out[b + ours + ".weight"] = take(h + theirs + ".weight", b + ours + ".weight")
            out[b + ours + ".bias"] = take(h + theirs + ".bias", b + ours + ".bias")
    tied = "lm_head.weight" not in sd
    out["lm_head.weight"] = take(
        "transformer.wte.weight" if tied else "lm_head.weight", "lm_head.weight"
    )
    take.refuse_unread(ignore=(".attn.bias", ".attn.masked_bias"))  # causal-mask buffers
    return out


_LAYER_NAMES = {  # ours -> theirs, inside a layer (Llama's names, used by all but GPT-2)
    "attn.q_proj": "self_attn.q_proj",
    "attn.k_proj": "self_attn.k_proj",
    "attn.v_proj": "self_attn.v_proj",
    "attn.o_proj": "self_attn.o_proj",
    "attn.q_norm": "self_attn.q_norm",
    "attn.k_norm": "self_attn.k_norm",
    "attn.q_a": "self_attn.q_a_proj",
    "attn.q_b": "self_attn.q_b_proj",
    "attn.kv_a": "self_attn.kv_a_proj_with_mqa",
    "attn.kv_norm": "self_attn.kv_a_layernorm",
    "attn.kv_b": "self_attn.kv_b_proj",
    "mlp.gate": "mlp.gate_proj",
    "mlp.up": "mlp.up_proj",
    "mlp.down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "mlp_norm": "post_attention_layernorm",
}
_OLMO2_NORMS = {
    "post_attn_norm": "post_attention_layernorm",
    "post_mlp_norm": "post_feedforward_layernorm",
}
_GEMMA2_NORMS = {
    "attn_norm": "input_layernorm",
    "post_attn_norm": "post_attention_layernorm",
    "mlp_norm": "pre_feedforward_layernorm",
    "post_mlp_norm": "post_feedforward_layernorm",
}


def _theirs(ours: str, c: FamilyConfig) -> str:
    """The ``transformers`` name of one of our parameter names (layer ``i`` kept)."""
    if ours in ("embed.weight", "norm.weight", "norm.bias"):
        return "model." + ours.replace("embed.", "embed_tokens.")
    if ours == "lm_head.weight":
        return ours
    _, i, rest = ours.split(".", 2)
    module, param = rest.rsplit(".", 1)
    if c.attention == "mla" and module == "attn.q_norm":
        module = "self_attn.q_a_layernorm"
    elif c.family in ("gemma2", "gemma3_text") and module in _GEMMA2_NORMS:
        module = _GEMMA2_NORMS[module]
    elif c.family == "olmo2" and module in _OLMO2_NORMS:
        module = _OLMO2_NORMS[module]
    else:
        module = _LAYER_NAMES[module]
    return f"model.layers.{i}.{module}.{param}"


def _unfuse_phi3(sd: dict, c: FamilyConfig) -> dict:
    """Phi-3 stores W_Q, W_K, W_V as one (H*D + 2*G*D, E) ``qkv_proj`` and the gate and up
    projections as one (2F, E) ``gate_up_proj``: split them into Llama's names (the fused
    tensor is consumed; a missing one is named)."""
    out = dict(sd)
    q, kv = c.n_head * c.head_dim, c.n_kv_head * c.head_dim
    for i in range(c.n_layer):
        p = f"model.layers.{i}."
        for fused in ("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"):
            if p + fused not in out:
                raise ValueError(
                    f"state_dict: expected {p + fused!r} (Phi-3's fused projection); not there"
                )
        w = out.pop(p + "self_attn.qkv_proj.weight")  # rows: q (H*D), k (G*D), v (G*D)
        for name, part in zip("qkv", w.split([q, kv, kv]), strict=True):
            out[p + f"self_attn.{name}_proj.weight"] = part
        gate, up = out.pop(p + "mlp.gate_up_proj.weight").chunk(2, dim=0)  # (2F, E) -> 2 x (F, E)
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
    return out


def state_from_hf(sd: dict, config: FamilyConfig, model: FamilyLM) -> dict:
    """``model``'s state dict filled from a ``transformers`` state dict ``sd``, strictly: a
    weight ``model`` needs that ``sd`` lacks, and a weight of ``sd`` that nothing here reads
    (the course would silently not model it), are refused by name."""
    if config.family == "gpt2":
        return _gpt2_state(sd, config)
    if config.family == "phi3":
        sd = _unfuse_phi3(sd, config)
    out, take = {}, _Reader(sd)
    for ours in model.state_dict():
        theirs = _theirs(ours, config)
        if theirs == "lm_head.weight" and theirs not in sd:  # tied: stored once
            theirs = "model.embed_tokens.weight"
        out[ours] = take(theirs, ours)
    take.refuse_unread()
    return out

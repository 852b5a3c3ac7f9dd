"""Chapter 20: Hugging Face ``transformers`` checkpoints into :class:`FamilyLM`.

:func:`config_from_hf` reads a ``transformers`` config into a :class:`FamilyConfig` (refusing,
with the option's name, what the course does not model); :func:`state_from_hf` renames and
reshapes the weights; :func:`from_hf` does both for a loaded model. GPT-2 stores its
projections as ``Conv1D`` (``x @ W``, W of shape (in, out)) and fuses Q, K and V into one
(E, 3E) matrix; every other family uses ``nn.Linear`` (``x @ W.T``) with the course's names.
"""

from __future__ import annotations

import torch

from mha_course.families.config import FamilyConfig
from mha_course.families.model import FamilyLM

FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma2", "deepseek_v3")


def _get(cfg, name: str, default=None):
    return getattr(cfg, name, default)


def _rope_base(cfg) -> float:
    """RoPE's base, refusing frequency rescalings the course does not model (llama3, yarn…)."""
    params = _get(cfg, "rope_parameters") or _get(cfg, "rope_scaling") or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ValueError(f"rope_parameters: rope_type {kind!r} rescales RoPE's frequencies; the "
                         f"course models only the default rotation (chapter 12)")
    return float(params.get("rope_theta", _get(cfg, "rope_theta", 10000.0)))


def _refuse(cfg, **expected) -> None:
    for name, value in expected.items():
        got = _get(cfg, name, value)
        if got != value:
            raise ValueError(f"{cfg.model_type}.{name}: the course models only {value!r}, got {got!r}")


def _windows(cfg, n: int) -> tuple:
    """Per-layer windows from ``layer_types`` (Gemma 2, Qwen 3) or one window for all (Mistral)."""
    W = _get(cfg, "sliding_window")
    types = _get(cfg, "layer_types")
    if types is not None:
        return tuple(W if t == "sliding_attention" else None for t in types)
    if cfg.model_type in ("qwen2", "qwen3") and not _get(cfg, "use_sliding_window", False):
        return (None,) * n
    return (W,) * n


def config_from_hf(cfg) -> FamilyConfig:
    """A :class:`FamilyConfig` equal to a ``transformers`` config of one of :data:`FAMILIES`."""
    kind = cfg.model_type
    if kind not in FAMILIES:
        raise ValueError(f"model_type: expected one of {FAMILIES}, got {kind!r}")
    if kind == "gpt2":
        _refuse(cfg, activation_function="gelu_new", scale_attn_by_inverse_layer_idx=False,
                reorder_and_upcast_attn=False, scale_attn_weights=True)
        E = cfg.n_embd
        return FamilyConfig(family=kind, vocab_size=cfg.vocab_size, n_embd=E, n_layer=cfg.n_layer,
                            n_head=cfg.n_head, n_kv_head=cfg.n_head, head_dim=E // cfg.n_head,
                            intermediate=cfg.n_inner or 4 * E, norm="layernorm",
                            norm_eps=cfg.layer_norm_epsilon, mlp="gelu_tanh",
                            positions="learned", max_positions=cfg.n_positions, qkv_bias=True,
                            out_bias=True, mlp_bias=True, tie_weights=cfg.tie_word_embeddings)
    n, H = cfg.num_hidden_layers, cfg.num_attention_heads
    common = dict(family=kind, vocab_size=cfg.vocab_size, n_embd=cfg.hidden_size, n_layer=n,
                  n_head=H, n_kv_head=cfg.num_key_value_heads,
                  head_dim=_get(cfg, "head_dim") or cfg.hidden_size // H,
                  intermediate=cfg.intermediate_size, norm_eps=cfg.rms_norm_eps,
                  max_positions=cfg.max_position_embeddings, rope_base=_rope_base(cfg),
                  tie_weights=cfg.tie_word_embeddings,
                  qkv_bias=bool(_get(cfg, "attention_bias", kind == "qwen2")),
                  out_bias=bool(_get(cfg, "attention_bias", False)) and kind != "qwen2",
                  mlp_bias=bool(_get(cfg, "mlp_bias", False)))
    if kind == "gemma2":
        _refuse(cfg, hidden_activation="gelu_pytorch_tanh")
        return FamilyConfig(**common, norm_offset=1.0, sandwich_norm=True, mlp="geglu_tanh",
                            windows=_windows(cfg, n), attn_scale=cfg.query_pre_attn_scalar ** -0.5,
                            attn_softcap=cfg.attn_logit_softcapping,
                            final_softcap=cfg.final_logit_softcapping, embed_scale=True)
    _refuse(cfg, hidden_act="silu")
    if kind == "deepseek_v3":
        dense = cfg.first_k_dense_replace or 0
        if dense < n:
            raise ValueError(f"deepseek_v3.first_k_dense_replace: layers {dense}"
                             f"..{n - 1} are mixture-of-experts MLPs, which the course does not "
                             f"model; expected first_k_dense_replace >= num_hidden_layers = {n}")
        common.update(head_dim=cfg.qk_nope_head_dim, n_kv_head=H)
        return FamilyConfig(**common, attention="mla", q_lora_rank=cfg.q_lora_rank,
                            kv_lora_rank=cfg.kv_lora_rank, qk_rope_dim=cfg.qk_rope_head_dim,
                            v_head_dim=cfg.v_head_dim,
                            rope_layout="interleaved" if cfg.rope_interleave else "half")
    return FamilyConfig(**common, qk_norm=kind == "qwen3", windows=_windows(cfg, n))


def _gpt2_state(sd: dict, c: FamilyConfig) -> dict:
    E, out = c.n_embd, {"embed.weight": sd["transformer.wte.weight"],
                        "pos.weight": sd["transformer.wpe.weight"],
                        "norm.weight": sd["transformer.ln_f.weight"],
                        "norm.bias": sd["transformer.ln_f.bias"]}
    for i in range(c.n_layer):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        W, bias = sd[h + "attn.c_attn.weight"], sd[h + "attn.c_attn.bias"]  # (E, 3E), (3E,)
        for j, name in enumerate(("q", "k", "v")):  # Conv1D (in, out) -> Linear (out, in)
            out[b + f"attn.{name}_proj.weight"] = W[:, j * E:(j + 1) * E].T
            out[b + f"attn.{name}_proj.bias"] = bias[j * E:(j + 1) * E]
        pairs = {"attn.o_proj": "attn.c_proj", "mlp.up": "mlp.c_fc", "mlp.down": "mlp.c_proj"}
        for ours, theirs in pairs.items():
            out[b + ours + ".weight"] = sd[h + theirs + ".weight"].T
            out[b + ours + ".bias"] = sd[h + theirs + ".bias"]
        for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
            out[b + ours + ".weight"] = sd[h + theirs + ".weight"]
            out[b + ours + ".bias"] = sd[h + theirs + ".bias"]
    out["lm_head.weight"] = sd.get("lm_head.weight", sd["transformer.wte.weight"])
    return out


_LAYER_NAMES = {  # ours -> theirs, inside a layer (Llama's names, used by all but GPT-2)
    "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
    "attn.v_proj": "self_attn.v_proj", "attn.o_proj": "self_attn.o_proj",
    "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
    "attn.q_a": "self_attn.q_a_proj", "attn.q_b": "self_attn.q_b_proj",
    "attn.kv_a": "self_attn.kv_a_proj_with_mqa", "attn.kv_norm": "self_attn.kv_a_layernorm",
    "attn.kv_b": "self_attn.kv_b_proj",
    "mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
}
_GEMMA2_NORMS = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
                 "mlp_norm": "pre_feedforward_layernorm",
                 "post_mlp_norm": "post_feedforward_layernorm"}


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
    elif c.family == "gemma2" and module in _GEMMA2_NORMS:
        module = _GEMMA2_NORMS[module]
    else:
        module = _LAYER_NAMES[module]
    return f"model.layers.{i}.{module}.{param}"


def state_from_hf(sd: dict, config: FamilyConfig, model: FamilyLM) -> dict:
    """``model``'s state dict filled from a ``transformers`` state dict ``sd``; a weight of
    ``sd`` that nothing here reads is refused (the course would silently not model it)."""
    if config.family == "gpt2":
        out = _gpt2_state(sd, config)
        used = {k for k in sd if not k.endswith((".attn.bias", ".attn.masked_bias"))}
        _refuse_unused(sd, used - {k for k in sd if k.startswith("transformer.") or k == "lm_head.weight"})
        return out
    out, used = {}, set()
    for ours in model.state_dict():
        theirs = _theirs(ours, config)
        if theirs == "lm_head.weight" and theirs not in sd:  # tied: stored once
            theirs = "model.embed_tokens.weight"
        if theirs not in sd:
            raise ValueError(f"state_dict: expected {theirs!r} (for our {ours!r}); not there")
        out[ours] = sd[theirs]
        used.add(theirs)
    _refuse_unused(sd, set(sd) - used - {"lm_head.weight"})
    return out


def _refuse_unused(sd: dict, unused: set) -> None:
    unused = sorted(k for k in unused if "rotary_emb" not in k)
    if unused:
        raise ValueError(f"state_dict: {len(unused)} weights the course does not model, e.g. "
                         f"{unused[:3]}")


def from_hf(hf_model) -> FamilyLM:
    """The course's model with the weights, dtype and config of a loaded ``transformers``
    causal LM (``AutoModelForCausalLM``), in eval mode."""
    config = config_from_hf(hf_model.config)
    sd = hf_model.state_dict()
    dtype = next(iter(sd.values())).dtype
    model = FamilyLM(config).to(dtype)
    missing, unexpected = model.load_state_dict(state_from_hf(sd, config, model), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_weights)]
    if missing or unexpected:
        raise ValueError(f"state_dict: missing {missing}, unexpected {unexpected}")
    return model.eval()


def load_pretrained(path: str, dtype: torch.dtype | None = None, keep_hf: bool = False):
    """A ``save_pretrained`` folder (safetensors) -> (course model, ``transformers`` model or
    None). The config is read and checked first, so a family option the course does not model
    is refused before any weight is loaded. ``dtype`` None keeps the checkpoint's. Memory: the
    weights are held twice while they are copied; ``keep_hf=False`` frees the source after.

    Needs the ``[hf]`` extra; nothing is downloaded (``local_files_only``)."""
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("from_pretrained needs the hf extra: pip install -e '.[hf]' "
                          "(transformers and safetensors)") from err
    config_from_hf(AutoConfig.from_pretrained(path, local_files_only=True))  # refuse early
    hf = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                              dtype="auto" if dtype is None else dtype)
    ours = from_hf(hf)
    return ours, (hf if keep_hf else None)

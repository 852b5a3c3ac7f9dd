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
from mha_course.families.scaled_rope import KINDS as SCALINGS
from mha_course.families.scaled_rope import RopeScaling, attention_mscale

FAMILIES = (
    "gpt2",
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "gemma2",
    "deepseek_v3",
    "gemma3_text",
    "olmo2",
    "phi3",
)


def _get(cfg, name: str, default=None):
    return getattr(cfg, name, default)


def _rope(cfg, params: dict | None = None) -> tuple[float, RopeScaling | None]:
    """RoPE's base and rescaling (llama3, linear, dynamic, yarn: chapter 20's scaled_rope);
    other rescalings (Phi-3's longrope...) and partial rotation are refused by name.
    ``params``: one layer type's parameters (Gemma 3), default the config's."""
    if params is None:
        params = dict(_get(cfg, "rope_parameters") or _get(cfg, "rope_scaling") or {})
    kind = params.get("rope_type", params.get("type", "default"))
    base = float(params.get("rope_theta", _get(cfg, "rope_theta", 10000.0)))
    if params.get("partial_rotary_factor", _get(cfg, "partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(
            f"rope_parameters: partial_rotary_factor "
            f"{params.get('partial_rotary_factor', _get(cfg, 'partial_rotary_factor'))!r} "
            f"rotates part of each head; the course rotates all of it"
        )
    if kind == "default":
        return base, None
    if kind not in SCALINGS:
        raise ValueError(
            f"rope_parameters: rope_type {kind!r} rescales RoPE's frequencies in a "
            f"way the course does not model; expected 'default' or one of {SCALINGS}"
        )
    names = (
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
    )
    given = {n: params[n] for n in names if params.get(n) is not None}
    if kind == "yarn" and "factor" not in given:
        given["factor"] = None
    return base, RopeScaling(
        kind,
        max_positions=cfg.max_position_embeddings,
        original_max_positions=params.get("original_max_position_embeddings"),
        **given,
    )


def _refuse(cfg, **expected) -> None:
    for name, value in expected.items():
        got = _get(cfg, name, value)
        if got != value:
            raise ValueError(
                f"{cfg.model_type}.{name}: the course models only {value!r}, got {got!r}"
            )


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
        _refuse(
            cfg,
            activation_function="gelu_new",
            scale_attn_by_inverse_layer_idx=False,
            reorder_and_upcast_attn=False,
            scale_attn_weights=True,
            add_cross_attention=False,
        )  # an encoder-decoder's GPT-2: its cross-attention
        E = cfg.n_embd
        return FamilyConfig(
            family=kind,
            vocab_size=cfg.vocab_size,
            n_embd=E,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            n_kv_head=cfg.n_head,
            head_dim=E // cfg.n_head,
            intermediate=cfg.n_inner or 4 * E,
            norm="layernorm",
            norm_eps=cfg.layer_norm_epsilon,
            mlp="gelu_tanh",
            positions="learned",
            max_positions=cfg.n_positions,
            qkv_bias=True,
            out_bias=True,
            mlp_bias=True,
            tie_weights=cfg.tie_word_embeddings,
        )
    n, H = cfg.num_hidden_layers, cfg.num_attention_heads
    local_base = None
    if kind == "gemma3_text":  # one RoPE per layer type: local (window) and global layers
        params = cfg.rope_parameters
        base, scaling = _rope(cfg, params["full_attention"])
        local_base, local_scaling = _rope(cfg, params["sliding_attention"])
        if local_scaling is not None:
            raise ValueError(
                f"gemma3_text.rope_parameters: the sliding layers' rope_type "
                f"{local_scaling.kind!r}; the course models it on the global layers only"
            )
    else:
        base, scaling = _rope(cfg)
    common = dict(
        family=kind,
        vocab_size=cfg.vocab_size,
        n_embd=cfg.hidden_size,
        n_layer=n,
        n_head=H,
        n_kv_head=cfg.num_key_value_heads,
        head_dim=_get(cfg, "head_dim") or cfg.hidden_size // H,
        intermediate=cfg.intermediate_size,
        norm_eps=cfg.rms_norm_eps,
        max_positions=cfg.max_position_embeddings,
        rope_base=base,
        rope_scaling=scaling,
        tie_weights=cfg.tie_word_embeddings,
        qkv_bias=bool(_get(cfg, "attention_bias", kind == "qwen2")),
        out_bias=bool(_get(cfg, "attention_bias", False)) and kind != "qwen2",
        mlp_bias=bool(_get(cfg, "mlp_bias", False)),
    )
    if kind in ("gemma2", "gemma3_text"):  # Gemma 3: Gemma 2 with q/k norms and two RoPE bases
        _refuse(cfg, hidden_activation="gelu_pytorch_tanh")
        if _get(cfg, "use_bidirectional_attention"):  # EmbeddingGemma: an encoder, not causal
            raise ValueError(
                f"{kind}.use_bidirectional_attention: the course models only causal "
                f"decoders, got True"
            )
        return FamilyConfig(
            **common,
            norm_offset=1.0,
            sandwich_norm=True,
            mlp="geglu_tanh",
            windows=_windows(cfg, n),
            attn_scale=cfg.query_pre_attn_scalar**-0.5,
            attn_softcap=_get(cfg, "attn_logit_softcapping"),
            final_softcap=_get(cfg, "final_logit_softcapping"),
            embed_scale=True,
            qk_norm=kind == "gemma3_text",
            local_rope_base=local_base,
        )
    _refuse(cfg, hidden_act="silu")
    if kind == "deepseek_v3":
        dense = cfg.first_k_dense_replace or 0
        if dense < n:
            raise ValueError(
                f"deepseek_v3.first_k_dense_replace: layers {dense}"
                f"..{n - 1} are mixture-of-experts MLPs, which the course does not "
                f"model; expected first_k_dense_replace >= num_hidden_layers = {n}"
            )
        common.update(head_dim=cfg.qk_nope_head_dim, n_kv_head=H)
        qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        return FamilyConfig(
            **common,
            attention="mla",
            q_lora_rank=cfg.q_lora_rank,
            attn_scale=qk**-0.5 * attention_mscale(scaling),
            kv_lora_rank=cfg.kv_lora_rank,
            qk_rope_dim=cfg.qk_rope_head_dim,
            v_head_dim=cfg.v_head_dim,
            rope_layout="interleaved" if cfg.rope_interleave else "half",
        )
    if kind == "olmo2":  # norms only after attention and the MLP; q/k norms over all heads
        return FamilyConfig(
            **common, qk_norm=True, qk_norm_span="all", pre_norm=False, sandwich_norm=True
        )
    return FamilyConfig(**common, qk_norm=kind == "qwen3", windows=_windows(cfg, n))


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


def from_hf(hf_model, impl: str = "sdpa") -> FamilyLM:
    """The course's model with the weights, dtype and config of a loaded ``transformers``
    causal LM (``AutoModelForCausalLM``), in eval mode; ``impl`` as :class:`FamilyLM`'s."""
    config = config_from_hf(hf_model.config)
    sd = hf_model.state_dict()
    dtype = next(iter(sd.values())).dtype
    model = FamilyLM(config, impl).to(dtype)
    missing, unexpected = model.load_state_dict(state_from_hf(sd, config, model), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_weights)]
    if missing or unexpected:
        raise ValueError(f"state_dict: missing {missing}, unexpected {unexpected}")
    return model.eval()

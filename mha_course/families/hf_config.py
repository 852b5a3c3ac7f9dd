"""Chapter 20: a Hugging Face ``transformers`` config read into a :class:`FamilyConfig`.

:func:`config_from_hf` maps each family's options (GPT-2's ``n_embd``, Llama's ``hidden_size``,
Gemma's soft-capping and windows, DeepSeek V3's latent attention, RoPE's base and rescaling) onto
the course's one config, and refuses, with the option's name, what the course does not model
(another activation, partial rotation, mixture-of-experts layers, an encoder). The weights are
:mod:`mha_course.families.hf_state`'s; :func:`~mha_course.families.convert.from_hf` does both.
"""

from __future__ import annotations

from mha_course.families.config import FamilyConfig
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

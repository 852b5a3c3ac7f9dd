"""Chapter 20: what a production model family adds to chapter 13's GPT, as one config.

Each field is one named difference (chapter 20's table): the norm (LayerNorm or RMSNorm, and
Gemma's ``1 + w`` weights), the MLP (GELU, or a gated SiLU/GELU product), positions (learned or
RoPE in either layout), grouped key/value heads, a head size that is not ``E / H``, query/key
norms (Qwen 3), per-layer sliding windows (Mistral, Gemma 2), logit soft-capping (Gemma 2),
multi-head latent attention with decoupled RoPE (DeepSeek V3, ``attention="mla"``), norms
only after each sub-layer and query/key norms over all heads (OLMo 2), a RoPE base of their own
for the window layers (Gemma 3), and rescaled RoPE speeds (``rope_scaling``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mha_course._checks import check_kv_heads, check_positive_int
from mha_course.families.scaled_rope import RopeScaling

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu_tanh", "swiglu", "geglu_tanh")
POSITIONS = ("learned", "rope")
ATTENTIONS = ("gqa", "mla")


@dataclass
class FamilyConfig:
    """The shape of a decoder-only model of any of chapter 20's families.

    Letters: E ``n_embd``, H ``n_head``, G ``n_kv_head``, D ``head_dim`` (need not be E / H),
    F ``intermediate`` (the MLP's hidden width), V ``vocab_size``.
    ``windows[l]`` is layer ``l``'s sliding window W (keys per query), or None for a global
    layer; an empty tuple means all global. With ``attention="mla"`` (DeepSeek) the cache holds
    one latent of ``kv_lora_rank`` C features and one shared rotary key of ``qk_rope_dim`` R
    features per token; ``head_dim`` is then the query/key "nope" part and ``v_head_dim`` Dv.
    """

    family: str
    vocab_size: int
    n_embd: int
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    intermediate: int
    norm: str = "rmsnorm"
    norm_eps: float = 1e-6
    norm_offset: float = 0.0  # Gemma stores w and scales by (1 + w)
    sandwich_norm: bool = False  # Gemma 2/3, OLMo 2: a norm after attention and after the MLP too
    pre_norm: bool = True  # False: no norm before attention and MLP (OLMo 2: only after)
    mlp: str = "swiglu"
    positions: str = "rope"
    max_positions: int = 2048  # learned table size (GPT-2); only a bound for RoPE
    rope_base: float = 10000.0
    rope_layout: str = "half"
    rope_scaling: RopeScaling | None = None  # llama3, linear, dynamic, yarn (scaled_rope.py)
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen 3, Gemma 3: RMSNorm over D on every query and key head
    qk_norm_span: str = "head"  # "all": one RMSNorm over all heads' H*D (G*D) features (OLMo 2)
    local_rope_base: float | None = None  # Gemma 3: the window layers' RoPE base (None: rope_base)
    windows: tuple[int | None, ...] = ()
    attn_scale: float | None = None  # None = 1 / sqrt(query/key width)
    attn_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap)
    final_softcap: float | None = None  # Gemma 2: logits -> cap * tanh(logits / cap)
    embed_scale: bool = False  # Gemma: token embeddings times sqrt(E)
    tie_weights: bool = False
    attention: str = "gqa"
    q_lora_rank: int | None = None  # MLA: queries through a rank-r bottleneck (None: direct)
    kv_lora_rank: int = 0  # MLA: C
    qk_rope_dim: int = 0  # MLA: R
    v_head_dim: int = 0  # MLA: Dv
    extra: dict = field(default_factory=dict)  # what the source config says that we do not model

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "n_embd",
            "n_layer",
            "n_head",
            "n_kv_head",
            "head_dim",
            "intermediate",
            "max_positions",
        ):
            check_positive_int(name, getattr(self, name))
        check_kv_heads("n_kv_head", self.n_head, self.n_kv_head, of="n_head H")
        for name, value, allowed in (
            ("norm", self.norm, NORMS),
            ("mlp", self.mlp, MLPS),
            ("positions", self.positions, POSITIONS),
            ("attention", self.attention, ATTENTIONS),
            ("rope_layout", self.rope_layout, ("half", "interleaved")),
            ("qk_norm_span", self.qk_norm_span, ("head", "all")),
        ):
            if value not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
        self.windows = tuple(self.windows) or (None,) * self.n_layer
        if len(self.windows) != self.n_layer:
            raise ValueError(
                f"windows: expected one entry per layer ({self.n_layer}), got {len(self.windows)}"
            )
        for w in self.windows:
            if w is not None:
                check_positive_int("windows", w)
        for name in ("attn_softcap", "final_softcap", "attn_scale"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name}: expected None or a number > 0, got {v!r}")
        if self.attention == "mla":
            for name in ("kv_lora_rank", "qk_rope_dim", "v_head_dim"):
                check_positive_int(name, getattr(self, name))
            if self.qk_rope_dim % 2:
                raise ValueError(
                    f"qk_rope_dim: expected an even R (RoPE rotates pairs), got {self.qk_rope_dim}"
                )
            if self.q_lora_rank is not None:
                check_positive_int("q_lora_rank", self.q_lora_rank)
        elif self.positions == "rope" and self.head_dim % 2:
            raise ValueError(
                f"head_dim: expected an even D (RoPE rotates pairs), got {self.head_dim}"
            )

    @property
    def qk_dim(self) -> int:
        """The width of one query/key head: D, or D + R with MLA."""
        return self.head_dim + (self.qk_rope_dim if self.attention == "mla" else 0)

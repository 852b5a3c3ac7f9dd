"""Chapter 13: the two configurations — the model's shape and the training recipe.

The defaults are nanoGPT's published CPU recipe for character-level Shakespeare (4 layers,
4 heads, width 128, context 64, batch 12, 2,000 iterations, AdamW at 1e-3 with 100 warm-up
steps and cosine decay to 1e-4, no dropout, no biases, tied embeddings) so that our loss can
be put next to its ~1.88 nats/char.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from mha_course._checks import check_base, check_kv_heads, check_positive_int, renamed_fields
from mha_course.attention.mha import IMPLS
from mha_course.ops.rope import LAYOUTS as ROPE_LAYOUTS

POSITIONS = ("learned", "rope", "none")
ATTENTIONS = ("mha", "mla")
# Fields renamed since checkpoints were first written (old -> new): ``from_dict`` reads old files,
# and ``GPTConfig(block_size=...)`` / ``config.block_size`` still work with a FutureWarning.
# ``block_size`` was nanoGPT's word for T; the course keeps it for paged blocks (chapter 16).
RENAMED = {"block_size": "context_length"}


@renamed_fields(**RENAMED)
@dataclass
class GPTConfig:
    """The model's shape.

    ``n_kv_head`` None is MHA (G = H), 1 is MQA, a divisor of ``n_head`` is GQA.
    ``attention="mla"`` uses chapter 15's multi-head latent attention instead: keys and values
    of all heads are read from one cached latent of ``kv_latent_dim`` C features per token
    (``n_kv_head`` must then be None). With learned (or no) positions the position is already
    in the token's vector, so MLA needs no rotary part (``rope_dim`` 0); with
    ``positions="rope"`` only MLA's decoupled rotary key/query of ``rope_dim`` R > 0 features
    carry the position (DeepSeek-V2).
    ``positions``: ``"learned"`` absolute embeddings (nanoGPT), ``"rope"`` rotary (chapter 12,
    applied inside attention), or ``"none"``.
    """

    vocab_size: int = 96
    context_length: int = 64  # T, the longest context (nanoGPT's block_size)
    n_layer: int = 4
    n_head: int = 4  # H
    n_kv_head: int | None = None  # G
    n_embd: int = 128  # E
    mlp_ratio: int = 4
    dropout: float = 0.0  # attention-weight and residual dropout
    bias: bool = False
    positions: str = "learned"
    rope_layout: str = "half"
    rope_base: float = 10000.0
    tie_weights: bool = True
    impl: str = "sdpa"
    attention: str = "mha"  # "mha" (MHA/GQA/MQA through n_kv_head) or "mla" (chapter 15)
    kv_latent_dim: int | None = None  # C, MLA's cached latent width
    rope_dim: int = 0  # R, MLA's decoupled rotary width (positions="rope" only)

    def __post_init__(self) -> None:
        for name, what in (
            ("vocab_size", "V"),
            ("context_length", "T (the longest context)"),
            ("n_layer", ""),
            ("n_head", "H"),
            ("n_embd", "E"),
            ("mlp_ratio", ""),
        ):
            check_positive_int(name, getattr(self, name), what)
        G = self.n_head if self.n_kv_head is None else self.n_kv_head
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd: E must be divisible by n_head H; got E={self.n_embd}, H={self.n_head}"
            )
        check_kv_heads("n_kv_head", self.n_head, G, of="n_head H")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions: expected one of {POSITIONS}, got {self.positions!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {self.dropout}")
        if self.impl not in IMPLS:
            raise ValueError(f"impl: expected one of {IMPLS}, got {self.impl!r}")
        if self.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(
                f"rope_layout: expected one of {ROPE_LAYOUTS}, got {self.rope_layout!r}"
            )
        check_base("rope_base", self.rope_base)
        if self.positions == "rope" and self.attention == "mha" and self.head_dim % 2:
            raise ValueError(
                f"n_head: positions='rope' rotates pairs of each head's features, so "
                f"D = E / H must be even; got E={self.n_embd}, H={self.n_head}, "
                f"D={self.head_dim}"
            )
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention: expected one of {ATTENTIONS}, got {self.attention!r}")
        if self.attention == "mla":
            self._check_mla()
        elif self.kv_latent_dim is not None or self.rope_dim:
            raise ValueError(
                f"kv_latent_dim, rope_dim: only for attention='mla', got "
                f"kv_latent_dim={self.kv_latent_dim}, rope_dim={self.rope_dim} "
                f"with attention={self.attention!r}"
            )

    def _check_mla(self) -> None:
        C, R = self.kv_latent_dim, self.rope_dim
        if isinstance(C, bool) or not isinstance(C, int) or C <= 0:
            raise ValueError(
                f"kv_latent_dim: attention='mla' needs a positive int C (the cached "
                f"latent width), got {C!r}"
            )
        if C > self.n_embd:
            raise ValueError(
                f"kv_latent_dim: a latent C wider than the model's E caches more than "
                f"the token itself; expected C <= n_embd = {self.n_embd}, got {C}"
            )
        if self.n_kv_head is not None:
            raise ValueError(
                f"n_kv_head: attention='mla' has no key/value heads to share (all "
                f"heads read one latent); expected None, got {self.n_kv_head}"
            )
        if isinstance(R, bool) or not isinstance(R, int) or R < 0 or R % 2:
            raise ValueError(
                f"rope_dim: expected an even int R >= 0 (RoPE rotates pairs), got {R!r}"
            )
        if self.positions == "rope" and R == 0:
            raise ValueError(
                "rope_dim: positions='rope' with attention='mla' puts the position "
                "only in the decoupled rotary part; expected an even R > 0, got 0"
            )
        if self.positions != "rope" and R:
            raise ValueError(
                f"rope_dim: positions={self.positions!r} carries no rotation; expected 0, got {R}"
            )
        if self.dropout:
            raise ValueError(
                f"dropout: attention='mla' has no attention-weight dropout; "
                f"expected 0.0, got {self.dropout}"
            )

    @property
    def kv_heads(self) -> int:
        """G, the number of key/value heads."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def head_dim(self) -> int:
        """D = E / H."""
        return self.n_embd // self.n_head


@dataclass
class TrainConfig:
    """The training recipe (nanoGPT's CPU recipe by default)."""

    batch_size: int = 12  # global batch: split over ranks under torchrun
    max_iters: int = 2000
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int | None = None  # default max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_interval: int = 250
    eval_windows: int = 240  # validation windows per curve point
    final_eval_windows: int | None = None  # the reported loss: None = all of validation
    seed: int = 1337
    dtype: str = "float32"


def to_dict(config) -> dict:
    """A plain dict (what checkpoints and config files store)."""
    return asdict(config)


def from_dict(cls, values: dict):
    """``cls(**values)``; unknown keys raise a ValueError that names them. A stored
    :class:`GPTConfig` written before a field was renamed (:data:`RENAMED`) is read as the new
    name, silently: the file is not the reader's mistake."""
    if cls is GPTConfig:
        both = sorted(old for old, new in RENAMED.items() if old in values and new in values)
        if both:
            raise ValueError(
                f"config: {both} and their new names {[RENAMED[k] for k in both]} both given"
            )
        values = {RENAMED.get(k, k): v for k, v in values.items()}
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"config: unknown keys for {cls.__name__}: {unknown}; known: {sorted(known)}"
        )
    return cls(**values)

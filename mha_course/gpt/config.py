"""Chapter 13: the two configurations — the model's shape and the training recipe.

The defaults are nanoGPT's published CPU recipe for character-level Shakespeare (4 layers,
4 heads, width 128, context 64, batch 12, 2,000 iterations, AdamW at 1e-3 with 100 warm-up
steps and cosine decay to 1e-4, no dropout, no biases, tied embeddings) so that our loss can
be put next to its ~1.88 nats/char.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .._checks import check_kv_heads

POSITIONS = ("learned", "rope", "none")


@dataclass
class GPTConfig:
    """The model's shape.

    ``n_kv_head`` None is MHA (G = H), 1 is MQA, a divisor of ``n_head`` is GQA.
    ``positions``: ``"learned"`` absolute embeddings (nanoGPT), ``"rope"`` rotary (chapter 12,
    applied inside attention), or ``"none"``.
    """

    vocab_size: int = 96
    block_size: int = 64  # T, the longest context
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

    def __post_init__(self) -> None:
        G = self.n_head if self.n_kv_head is None else self.n_kv_head
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd: E must be divisible by n_head H; got E={self.n_embd}, "
                             f"H={self.n_head}")
        check_kv_heads("n_kv_head", self.n_head, G, of="n_head H")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions: expected one of {POSITIONS}, got {self.positions!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {self.dropout}")

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
    """``cls(**values)``; unknown keys raise a ValueError that names them."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config: unknown keys for {cls.__name__}: {unknown}; "
                         f"known: {sorted(known)}")
    return cls(**values)

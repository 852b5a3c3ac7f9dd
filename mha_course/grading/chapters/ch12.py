"""Chapter 12's graded items: RoPE in a given layout, a cached decoding step with RoPE (positions
offset by the cache), the ALiBi bias, the sinusoidal encoding, and a debugging item: a checkpoint
exported in the other RoPE layout (``_layout_bug.py``)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mha_course.grading.chapters.ch05 import NO_CHUNK_MASK
from mha_course.grading.oracles import layout_bug as LB
from mha_course.ops.masks import causal_mask
from mha_course.ops.positions import alibi_bias, alibi_slopes, sinusoidal_positions
from mha_course.ops.rope import apply_rope, rope_angles, rotate_pairs
from mha_grader.items import DriverItem, Item, Mistake

NOTEBOOK = "ex12_positions"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."
# Reviewed: everything in the package that rotates pairs, makes RoPE's angles or frequencies, or
# builds the ALiBi bias or the sinusoidal table. One list for the notebook (none of its solutions
# needs these), so its items share one unit in the sandbox.
_FORBID = (
    "mha_course.ops.rope.apply_rope",
    "mha_course.ops.rope.rotate_pairs",
    "mha_course.ops.rope.rope_angles",
    "mha_course.ops.rope.rope_frequencies",
    "mha_course.families.scaled_rope.scaled_frequencies",  # scaling=None: rope_frequencies
    "mha_course.attention.mha.MultiHeadAttention",
    "mha_course.ops.positions.alibi_bias",
    "mha_course.ops.positions.alibi_slopes",
    "mha_course.ops.flex_masks.alibi",
    "mha_course.ops.positions.sinusoidal_positions",
)

WRONG_LAYOUT = (
    "rotated the wrong pairs: layout 'half' pairs feature i with i + D/2 (GPT-NeoX, "
    "Hugging Face Llama); 'interleaved' pairs 2i with 2i + 1 (RoFormer, GPT-J)"
)
WRONG_DIRECTION = "rotated the wrong way: each pair is turned by -θ instead of +θ"
FREQ_EXPONENT = "frequencies θ_i = base^(-2i/D) for pair i = 0 .. D/2 - 1 (not base^(-i/D))"
NOT_OFFSET = (
    "positions not offset by the cache: the new tokens sit at positions S_old, "
    "S_old + 1, ...; rotating them as 0, 1, ... breaks the relative distances"
)
CACHE_ROTATED_AGAIN = (
    "the cached keys were rotated again: the cache holds keys already rotated "
    "at their own positions, so they are turned twice"
)
KEYS_NOT_ROTATED = "keys not rotated: only the queries carry their positions"
VALUES_ROTATED = "values rotated: RoPE acts on queries and keys only; values stay as they are"
ALIBI_SIGN = "the bias must be a penalty: -slope · distance (<= 0), larger for farther keys"
ALIBI_SLOPES = "slopes 2^(-8h/H) for heads h = 1 .. H (the first head's slope is 2^(-8/H), not 1)"
ALIBI_NO_OFFSET = (
    "query i sits at position (S - L) + i when L < S (the last L positions, as "
    "with a KV cache); the distance to key j is |S - L + i - j|"
)
TABLES_HALF_ORDER = (
    "the rotated x is right, but the cos/sin tables are in the 'half' feature order "
    "[c_0 .. c_{D/2-1}, c_0 .. c_{D/2-1}] for an interleaved x, whose feature 2i + 1 "
    "belongs to pair i"
)
SIN_COS_SWAPPED = "sin in the even features (2i), cos in the odd ones (2i + 1)"
SIN_COS_HALVES = "all sines then all cosines: the task's features are interleaved"


def _f(rng: np.random.Generator, dtype, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(dtype)


# ---- ex12_rope --------------------------------------------------------------------------------
def _rope_cases(rng: np.random.Generator) -> list[dict]:
    start = int(rng.integers(3, 40))
    return [
        {
            "x": _f(rng, np.float32, 2, 3, 5, 8),
            "positions": np.arange(start, start + 5),
            "layout": "half",
        },
        {
            "x": _f(rng, np.float64, 1, 2, 4, 16),
            "positions": rng.integers(0, 200, size=4),
            "layout": "interleaved",
        },
        {"x": _f(rng, np.float64, 3, 6, 12), "positions": np.arange(6), "layout": "half"},
        {
            "x": _f(rng, np.float32, 2, 4, 6),
            "positions": rng.integers(0, 50, size=4),
            "layout": "interleaved",
        },
    ]


def _in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A per-pair table (L, D/2) as a per-feature one (L, D): feature f gets its pair's value.
    'half': [t_0 .. t_{D/2-1}, t_0 .. t_{D/2-1}]; 'interleaved': [t_0, t_0, t_1, t_1, ...]."""
    if layout == "half":
        return torch.cat([t, t], dim=-1)  # (L, D/2) + (L, D/2) -> (L, D)
    return t.repeat_interleave(2, dim=-1)  # (L, D/2) -> (L, D)


def _rope_variant(flip_layout=False, sign=1.0, exponent=2.0, tables=True):
    """The rotated x and (``tables``) its cos/sin as (L, D) tables in the layout used; the
    defaults give the right answer (the reference is ``apply_rope`` and ``_in_layout``)."""

    def run(x, positions, layout):
        if flip_layout:
            layout = "interleaved" if layout == "half" else "half"
        D = x.shape[-1]
        theta = 10000.0 ** (-exponent * torch.arange(D // 2, dtype=torch.float64) / D)  # (D/2,)
        angles = sign * positions.double()[:, None] * theta  # (L, 1) * (D/2,) -> (L, D/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        out = rotate_pairs(x, cos, sin, layout)
        return (out, _in_layout(cos, layout), _in_layout(sin, layout)) if tables else out

    return run


def _rope_reference(x, positions, layout):
    cos, sin = rope_angles(positions, x.shape[-1], dtype=x.dtype)  # (L, D/2) each
    return apply_rope(x, positions, layout=layout), _in_layout(cos, layout), _in_layout(sin, layout)


def _tables_half_order(x, positions, layout):
    out, _, _ = _rope_reference(x, positions, layout)
    _, cos, sin = _rope_reference(x, positions, "half")
    return out, cos, sin


# ---- ex12_rope_decode_step --------------------------------------------------------------------
def _step_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, H, L, S_old, D, dtype):
        return {
            "q_new": _f(rng, dtype, B, H, L, D),
            "k_new": _f(rng, dtype, B, H, L, D),
            "v_new": _f(rng, dtype, B, H, L, D),
            "k_cache": _rotated_cache(_f(rng, dtype, B, H, S_old, D)),
            "v_cache": _f(rng, dtype, B, H, S_old, D),
        }

    return [
        case(2, 2, 3, 5, 8, np.float32),  # a chunk after a cache: every mistake shows here
        case(1, 3, 1, 7, 4, np.float64),  # the usual one-token step
        case(2, 1, 4, 0, 8, np.float64),
    ]  # prefill into an empty cache


def _rotated_cache(k: np.ndarray) -> np.ndarray:
    """Cached keys are stored rotated at their positions 0 .. S_old - 1."""
    t = torch.from_numpy(k)
    return apply_rope(t, torch.arange(t.shape[-2])).numpy()


def _step_variant(
    offset=True,
    rotate_keys=True,
    rotate_cache=False,
    rotate_values=False,
    chunk_mask=True,
    sign=1.0,
):
    def run(q_new, k_new, v_new, k_cache, v_cache):
        S_old, L = k_cache.shape[-2], q_new.shape[-2]
        pos = torch.arange(S_old, S_old + L) if offset else torch.arange(L)  # (L,)
        rotate = _rope_variant(sign=sign, tables=False)  # task 1's rope (its rotated x)
        q = rotate(q_new, pos, "half")
        k = rotate(k_new, pos, "half") if rotate_keys else k_new
        v = rotate(v_new, pos, "half") if rotate_values else v_new
        k_all = torch.cat([k_cache, k], dim=-2)  # (B, H, S_old, D) + (B, H, L, D) -> (B, H, S, D)
        if rotate_cache:
            k_all = torch.cat([apply_rope(k_cache, torch.arange(S_old)), k], dim=-2)
        v_all = torch.cat([v_cache, v], dim=-2)
        S = S_old + L
        mask = causal_mask(L, S, offset=S_old) if chunk_mask else torch.ones(L, S, dtype=torch.bool)
        return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)

    return run


# ---- ex12_alibi -------------------------------------------------------------------------------
def _alibi_cases(rng: np.random.Generator) -> list[dict]:
    L, n = int(rng.integers(3, 17)), int(rng.integers(2, 12))  # wide: no two students share inputs
    return [
        {"num_heads": 8, "L": L, "S": L + int(rng.integers(2, 25))},  # L < S: the offset shows
        {"num_heads": int(rng.choice([2, 4, 16])), "L": n, "S": n},
        {"num_heads": 2, "L": 1, "S": int(rng.integers(5, 200))},
    ]


def _alibi_reference(H, L, S):
    return alibi_bias(H, L, S)


def _alibi_slopes_from_zero(H, L, S):
    return alibi_bias(H, L, S, slopes=alibi_slopes(H) * 2.0 ** (8.0 / H))


# ---- ex12_sinusoidal --------------------------------------------------------------------------
def _sin_cases(rng: np.random.Generator) -> list[dict]:
    # wide ranges: no two students of a class share inputs (E stays even)
    return [
        {"num_positions": int(rng.integers(20, 300)), "embed_dim": 2 * int(rng.integers(4, 17))},
        {"num_positions": int(rng.integers(2, 12)), "embed_dim": 6},
        {"num_positions": 100, "embed_dim": 2 * int(rng.integers(8, 33))},
    ]


def _sin_variant(mode):
    def run(P, E):
        pe = sinusoidal_positions(P, E, dtype=torch.float64)  # (P, E): sin at 2i, cos at 2i + 1
        sin, cos = pe[:, 0::2], pe[:, 1::2]
        if mode == "swapped":
            return torch.stack([cos, sin], dim=-1).flatten(-2)  # (P, E/2, 2) -> (P, E)
        return torch.cat([sin, cos], dim=-1)  # halves: (P, E/2) + (P, E/2) -> (P, E)

    return run


def _sin_exponent(P, E):
    w = 10000.0 ** (-torch.arange(E // 2, dtype=torch.float64) / E)  # wrong: i/E
    angles = torch.arange(P, dtype=torch.float64)[:, None] * w  # (P, E/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (P, E/2, 2) -> (P, E)


ITEMS = [
    Item(
        id="ex12_rope",
        notebook=NOTEBOOK,
        function="rope",
        points=2,
        # Also graded: cos and sin as (L, D) tables in x's own layout. transformers'
        # apply_rotary_pos_emb rotates the 'half' layout given such tables; a rope built on it
        # (its tables in 'half' order, a permutation around it for 'interleaved') earned this
        # item before (tests/grading/test_rope_library.py) and now loses it.
        task="rotate each feature pair of x by position · θ_i, θ_i = 10000^(-2i/D), in the given "
        "layout; also return cos and sin as (L, D) tables in that layout",
        make_cases=_rope_cases,
        shape="(..., L, D)",
        reference=_rope_reference,
        mistakes=(
            # first: its tables equal the wrong layout's, its rotated x does not
            Mistake("tables in the 'half' order", TABLES_HALF_ORDER, variant=_tables_half_order),
            Mistake("wrong layout", WRONG_LAYOUT, variant=_rope_variant(flip_layout=True)),
            Mistake("wrong direction", WRONG_DIRECTION, variant=_rope_variant(sign=-1.0)),
            Mistake(
                "wrong layout, wrong direction",
                f"{WRONG_LAYOUT}; and {WRONG_DIRECTION}",
                variant=_rope_variant(flip_layout=True, sign=-1.0),
            ),
            Mistake("frequency exponent", FREQ_EXPONENT, variant=_rope_variant(exponent=1.0)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex12_rope_decode_step",
        uses=("rope",),
        substitutes=(("rope", _SUB + "rope"),),
        notebook=NOTEBOOK,
        function="rope_decode_step",
        points=2,
        task="one cached decoding step with RoPE ('half' layout): rotate the new queries/keys at "
        "positions S_old .. S_old + L - 1, append, attend causally",
        make_cases=_step_cases,
        shape="(B, H, L, D)",
        reference=_step_variant(),
        mistakes=(
            Mistake("positions not offset", NOT_OFFSET, variant=_step_variant(offset=False)),
            Mistake(
                "cache rotated again", CACHE_ROTATED_AGAIN, variant=_step_variant(rotate_cache=True)
            ),
            Mistake("keys not rotated", KEYS_NOT_ROTATED, variant=_step_variant(rotate_keys=False)),
            Mistake("values rotated", VALUES_ROTATED, variant=_step_variant(rotate_values=True)),
            Mistake(
                "wrong direction",
                f"{WRONG_DIRECTION} (this step's rotation of the new queries and keys)",
                variant=_step_variant(sign=-1.0),
            ),
            Mistake(
                "no causal mask in the chunk",
                NO_CHUNK_MASK,
                variant=_step_variant(chunk_mask=False),
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex12_alibi",
        notebook=NOTEBOOK,
        function="alibi",
        points=1,
        task="the ALiBi bias -slope_h · |(S - L + i) - j|, slopes 2^(-8h/H), shape (H, L, S)",
        make_cases=_alibi_cases,
        shape="(H, L, S)",
        reference=_alibi_reference,
        dtype_must_match=False,
        mistakes=(
            Mistake(
                "positive bias", ALIBI_SIGN, variant=lambda H, L, S: -_alibi_reference(H, L, S)
            ),
            Mistake("slopes from 2^0", ALIBI_SLOPES, variant=_alibi_slopes_from_zero),
            Mistake(
                "no offset", ALIBI_NO_OFFSET, variant=lambda H, L, S: alibi_bias(H, L, S, offset=0)
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex12_sinusoidal",
        notebook=NOTEBOOK,
        function="sinusoidal",
        points=1,
        task="PE[p, 2i] = sin(p / 10000^(2i/E)), PE[p, 2i + 1] = cos(...), shape (P, E)",
        make_cases=_sin_cases,
        shape="(P, E)",
        reference=lambda P, E: sinusoidal_positions(P, E, dtype=torch.float64),
        dtype_must_match=False,
        mistakes=(
            Mistake("sin and cos swapped", SIN_COS_SWAPPED, variant=_sin_variant("swapped")),
            Mistake("halves", SIN_COS_HALVES, variant=_sin_variant("halves")),
            Mistake(
                "frequency exponent",
                "frequencies 1 / 10000^(2i/E) for pair i (not i/E)",
                variant=_sin_exponent,
            ),
        ),
        forbidden=_FORBID,
    ),
    DriverItem(
        # Its own unit (no forbidden names): the driver builds the course's MultiHeadAttention,
        # and the converter is the chapter's tool for the fix. The grade is the fixed model's
        # output on per-student weights and inputs.
        id="ex12_layout_bug",
        notebook=NOTEBOOK,
        function="fix_checkpoint",
        points=2,
        task="return a state dict with which the 'half' RoPE model reproduces the exporter's outputs",
        make_cases=LB.cases,
        shape="(B, T, E)",
        reference=LB.reference,
        driver="mha_course.grading.child.drivers:drive_fix",
        mistakes=(
            Mistake("checkpoint unchanged", LB.LEFT_AS_IS, variant=LB.variant(names=())),
            Mistake("v instead of k", LB.V_NOT_K, variant=LB.variant(names=("q_proj", "v_proj"))),
            Mistake("only the queries", LB.ONLY_Q, variant=LB.variant(names=("q_proj",))),
            Mistake("inverse permutation", LB.INVERSE, variant=LB.variant(to="interleaved")),
            Mistake("columns, not rows", LB.COLUMNS, variant=LB.variant(columns=True)),
            Mistake("biases left", LB.BIASES, variant=LB.variant(biases=False)),
        ),
    ),
]

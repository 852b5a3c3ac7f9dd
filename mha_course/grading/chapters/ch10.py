"""Chapter 10's graded items: Michel et al.'s head importance, pruning a head's rows and
columns, and which key/value groups survive under GQA."""

from __future__ import annotations

import numpy as np
import torch

from mha_course.analysis.pruning import prune_heads
from mha_course.attention.mha import MultiHeadAttention
from mha_course.grading.child.drivers import _grads_model, _sequence_loss
from mha_grader.items import DriverItem, Item, Mistake

NOTEBOOK = "ex10_head_pruning"
_FORBID = (
    "mha_course.analysis.pruning.prune_heads",
    "mha_course.analysis.pruning.gradient_importance",
    "mha_course.analysis.pruning.prune_model_heads",
    "mha_course.analysis.pruning._select",  # prune_heads' cut of one Linear's rows or columns
)
_ABS_AFTER_MEAN = (
    "absolute value taken after averaging: |mean gradient| lets examples where a head "
    "helps cancel examples where it hurts; average |gradient| per example"
)
_NOT_NORMALISED = "scores not normalised: a layer's scores do not have L2 norm 1"
_GLOBAL_NORM = "normalised over all layers at once: the rows (layers) do not each have L2 norm 1"
_STRIDED = (
    "head h's features are the contiguous block h*D .. h*D + D - 1 (split_heads), not "
    "every H-th feature"
)
_KEPT_DROPPED = "kept the heads listed in drop and removed the others"
_W_O_ROWS = "removed rows of W_O: W_O is (E, H*D), so a head owns D of its columns"
_GROUPS_INTERLEAVED = (
    "query heads assigned to key/value heads in turn (h -> h % G): the groups are "
    "contiguous, query head h reads key/value head h // (H // G), so key/value head "
    "g serves query heads g*H/G .. (g+1)*H/G - 1"
)


def _importance_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"grads": rng.normal(size=(16, 3, 4)).astype(np.float32), "normalize": True},
        {
            "grads": rng.normal(size=(5, 2, 6)) * np.array([1.0, 10.0])[None, :, None],
            "normalize": True,
        },
        {"grads": rng.normal(size=(7, 4, 2)), "normalize": False},
    ]


def _importance_ref(grads, normalize, abs_first=True, norm="layer"):
    scores = (
        grads.abs().mean(0) if abs_first else grads.mean(0).abs()
    )  # (N, layers, H) -> (layers, H)
    if normalize and norm == "layer":
        scores = scores / scores.norm(dim=-1, keepdim=True)
    elif normalize and norm == "global":
        scores = scores / scores.norm()
    return scores


def _prune_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for E, H, drop, dtype in [
        (12, 3, [1], np.float32),
        (16, 4, [0, 3], np.float64),
        (24, 6, [2, 3, 5], np.float32),
    ]:
        cases.append(
            {
                "W_Q": rng.normal(size=(E, E)).astype(dtype),
                "b_Q": rng.normal(size=(E,)).astype(dtype),
                "W_O": rng.normal(size=(E, E)).astype(dtype),
                "num_heads": H,
                "drop": np.array(drop, dtype=np.int64),
            }
        )
    return cases


def _prune_ref(W_Q, b_Q, W_O, num_heads, drop):
    E = W_Q.shape[0]
    attn = MultiHeadAttention(E, num_heads, dtype=W_Q.dtype)
    with torch.no_grad():
        attn.q_proj.weight.copy_(W_Q)
        attn.q_proj.bias.copy_(b_Q)
        attn.out_proj.weight.copy_(W_O)
    small = prune_heads(attn, drop.tolist())
    return small.q_proj.weight.detach(), small.q_proj.bias.detach(), small.out_proj.weight.detach()


def _keep_rows(n_features: int, num_heads: int, drop, strided=False, invert=False) -> torch.Tensor:
    D = n_features // num_heads
    heads = [h for h in range(num_heads) if (h in drop) == invert]
    if strided:
        return torch.tensor([d * num_heads + h for h in heads for d in range(D)])
    return torch.tensor([h * D + d for h in heads for d in range(D)])


def _prune_variant(W_Q, b_Q, W_O, num_heads, drop, strided=False, invert=False, o_rows=False):
    keep = _keep_rows(W_Q.shape[0], num_heads, drop.tolist(), strided, invert)
    W_O_new = W_O[keep] if o_rows else W_O[:, keep]
    return W_Q[keep], b_Q[keep], W_O_new


def _groups_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"num_heads": 8, "num_kv_heads": 2, "drop": np.array([0, 1, 2, 3, 5])},
        {"num_heads": 6, "num_kv_heads": 3, "drop": np.array([2, 3])},
        {"num_heads": 4, "num_kv_heads": 4, "drop": np.array([1])},
        {"num_heads": 12, "num_kv_heads": 3, "drop": np.array([0, 1, 2, 3, 7, 11])},
    ] + [_random_groups_case(rng) for _ in range(2)]  # seeded: grading inputs can't be precomputed


def _random_groups_case(rng: np.random.Generator) -> dict:
    """G groups of n heads; one whole group dropped plus a few scattered heads."""
    G, n = int(rng.integers(2, 5)), int(rng.integers(2, 4))
    whole = int(rng.integers(G))
    scattered = rng.choice(G * n, size=int(rng.integers(1, n + 1)), replace=False)
    drop = np.union1d(np.arange(whole * n, (whole + 1) * n), scattered)
    return {"num_heads": G * n, "num_kv_heads": G, "drop": drop}


def _groups_ref(num_heads, num_kv_heads, drop, interleaved=False):
    per_group = num_heads // num_kv_heads
    group = (
        torch.arange(num_heads) % num_kv_heads
        if interleaved
        else torch.arange(num_heads) // per_group
    )  # query head h -> key/value head
    alive = torch.ones(num_heads, dtype=torch.bool)
    alive[drop] = False
    return torch.stack([alive[group == g].any() for g in range(num_kv_heads)])


ITEMS = [
    Item(
        id="ex10_head_importance",
        notebook=NOTEBOOK,
        function="head_importance",
        points=2,
        task="mean over examples of |dL/d head_mask|, each layer divided by its L2 norm if normalize",
        make_cases=_importance_cases,
        shape="(layers, H)",
        reference=_importance_ref,
        mistakes=(
            Mistake(
                "abs after mean",
                _ABS_AFTER_MEAN,
                variant=lambda g, n: _importance_ref(g, n, abs_first=False),
            ),
            Mistake(
                "not normalised", _NOT_NORMALISED, variant=lambda g, n: _importance_ref(g, False)
            ),
            Mistake(
                "global norm",
                _GLOBAL_NORM,
                variant=lambda g, n: _importance_ref(g, n, norm="global"),
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex10_prune_weights",
        notebook=NOTEBOOK,
        function="prune_query_heads",
        points=2,
        task="remove the heads in drop: their D rows of W_Q and b_Q, their D columns of W_O",
        make_cases=_prune_cases,
        shape="(H'*D, E), (H'*D,), (E, H'*D)",
        reference=_prune_ref,
        mistakes=(
            Mistake(
                "strided features", _STRIDED, variant=lambda *a: _prune_variant(*a, strided=True)
            ),
            Mistake(
                "selection inverted",
                _KEPT_DROPPED,
                variant=lambda *a: _prune_variant(*a, invert=True),
            ),
            Mistake("rows of W_O", _W_O_ROWS, variant=lambda *a: _prune_variant(*a, o_rows=True)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex10_kv_groups_kept",
        notebook=NOTEBOOK,
        function="kv_groups_kept",
        points=1,
        task="bool (G,): True for each key/value head that still serves a query head after pruning",
        make_cases=_groups_cases,
        shape="(G,)",
        reference=_groups_ref,
        mistakes=(
            Mistake(
                "interleaved groups",
                _GROUPS_INTERLEAVED,
                variant=lambda H, G, d: _groups_ref(H, G, d, interleaved=True),
            ),
        ),
        forbidden=(*_FORBID, "mha_course.attention.gqa.kv_group_of_query_heads"),
    ),
]


# ---- per-example gradients through a batched head mask (Michel et al.'s point) ----------------
_GRADS_MEAN_LOSS = (
    "the batch loss was a mean over the B examples: every gradient is B times too small"
)
_GRADS_SHARED_MASK = (
    "one (layers, H) mask for the whole batch gives the gradient of the SUM over "
    "examples, the same row for every example"
)
_GRADS_LAYOUT = "returned in the layout (layers, B, H), not one row per example (B, layers, H)"
_GRADS_ABS = "the gradients lost their sign: |.| was taken here, not later in the importance"


def _grads_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for B, T, layers, H, E in ((3, 5, 2, 2, 8), (4, 6, 3, 4, 16), (2, 4, 1, 3, 12)):
        vocab = int(rng.integers(4, 9))
        tokens = rng.integers(0, vocab, size=(B, T))
        cases.append(
            {
                "seed": int(rng.integers(2**31)),
                "vocab_size": vocab,
                "num_layers": layers,
                "num_heads": H,
                "embed_dim": E,
                "tokens": tokens,
                "targets": np.ascontiguousarray(tokens[:, ::-1]),
            }
        )  # sequence reversal
    return cases


def _grads_ref(seed, vocab_size, num_layers, num_heads, embed_dim, tokens, targets):
    """One example at a time, its own (layers, H) mask: a different method from the learner's."""
    model = _grads_model(seed, vocab_size, num_layers, num_heads, embed_dim, tokens.shape[1])
    loss_fn, out = _sequence_loss(), []
    for b in range(tokens.shape[0]):
        mask = torch.ones(int(num_layers), int(num_heads), dtype=torch.float64, requires_grad=True)
        loss = loss_fn(model(tokens[b : b + 1].long(), head_mask=mask), targets[b : b + 1].long())
        out.append(torch.autograd.grad(loss, mask)[0])  # (layers, H)
    return torch.stack(out)  # (B, layers, H)


ITEMS.append(
    DriverItem(
        id="ex10_head_mask_grads",
        notebook=NOTEBOOK,
        function="per_example_head_grads",
        points=2,
        task="per-example dL/dξ through a (layers, B, H) head mask: one forward, one backward, read ξ.grad",
        make_cases=_grads_cases,
        shape="(B, layers, H)",
        reference=_grads_ref,
        driver="mha_course.grading.child.drivers:drive_head_grads",
        mistakes=(
            Mistake(
                "mean loss", _GRADS_MEAN_LOSS, variant=lambda *a: _grads_ref(*a) / a[5].shape[0]
            ),
            Mistake(
                "one mask for the batch",
                _GRADS_SHARED_MASK,
                matches=lambda got, case: got.shape == (case["num_layers"], case["num_heads"]),
            ),
            Mistake(
                "layers first", _GRADS_LAYOUT, variant=lambda *a: _grads_ref(*a).transpose(0, 1)
            ),
            Mistake("absolute value", _GRADS_ABS, variant=lambda *a: _grads_ref(*a).abs()),
        ),
        forbidden=_FORBID,
    )
)

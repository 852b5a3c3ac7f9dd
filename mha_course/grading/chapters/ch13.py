"""Chapter 13's graded items: the next-token loss (shift by one, in nats), perplexity, the
distribution of one sampling step (temperature, top-k), and an induction score."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from mha_course.gpt.generate import sampling_distribution
from mha_course.gpt.heads import induction_score
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex13_small_gpt"

NO_SHIFT = "no shift: each position 'predicts' the token it already sees, not the next one"
WRONG_SHIFT = (
    "shifted the wrong way: logits[:, :-1] predict ids[:, 1:] (the next token), not "
    "logits[:, 1:] against ids[:, :-1]"
)
IN_BITS = (
    "log base: the loss is in nats (natural log, as torch's cross_entropy); you divided "
    "by ln 2 (bits) — report bits only when you say so"
)
PPL_BASE2 = (
    "log base: perplexity is e^(loss in nats) — 2^(loss in nats) mixes the two bases "
    "(2^x is right only for a loss in bits)"
)
PPL_MEAN_OF_EXP = (
    "perplexity is exp of the MEAN loss, not the mean of the per-token exp(loss) "
    "(the geometric, not the arithmetic, mean of 1/p)"
)
PPL_NO_EXP = "that is the loss itself; perplexity is exp(mean loss)"
TEMP_MULTIPLIED = (
    "logits multiplied by the temperature: T < 1 flattens the distribution instead of sharpening it"
)
TEMP_IGNORED = "the temperature was not applied: softmax(logits / temperature)"
TOPK_ZERO = (
    "filtered logits set to 0 still get probability e^0 / Z > 0: set them to -inf so "
    "they are never drawn"
)
TOPK_ONE_SHORT = "top-k kept k - 1 tokens: the k-th largest logit was dropped too"
INDUCTION_COPY = (
    "attention on the earlier copy of the same token (offset -period) is a "
    "'duplicate-token' head; induction attends to the token AFTER it: key "
    "t - period + 1"
)
INDUCTION_BEFORE = (
    "key t - period - 1 is the token before the earlier copy; induction reads t - period + 1"
)


# ---- ex13_next_token_loss --------------------------------------------------------------------
def _loss_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, T, V, dtype):
        return {
            "logits": (2.0 * rng.normal(size=(B, T, V))).astype(dtype),
            "ids": rng.integers(0, V, size=(B, T)),
        }

    return [case(2, 7, 11, np.float32), case(1, 5, 4, np.float64), case(3, 2, 9, np.float64)]


def _next_token_loss(logits, ids):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))  # (B*(T-1), V)


def _no_shift(logits, ids):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


def _wrong_shift(logits, ids):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, 1:].reshape(-1, V), ids[:, :-1].reshape(-1))


# ---- ex13_perplexity -------------------------------------------------------------------------
def _ppl_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, T, V, dtype):
        return {
            "logits": (1.5 * rng.normal(size=(B, T, V))).astype(dtype),
            "targets": rng.integers(0, V, size=(B, T)),
        }

    return [case(2, 6, 10, np.float32), case(1, 9, 5, np.float64), case(4, 3, 7, np.float64)]


def _token_losses(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none")


# ---- ex13_sampling_probs ---------------------------------------------------------------------
def _sampling_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "logits": (2.0 * rng.normal(size=(3, 12))).astype(np.float32),
            "temperature": 0.7,
            "top_k": int(rng.integers(2, 6)),
        },
        {"logits": rng.normal(size=(2, 9)), "temperature": 1.6, "top_k": 3},
        {
            "logits": (3.0 * rng.normal(size=(1, 20))),
            "temperature": 0.5,
            "top_k": int(rng.integers(6, 12)),
        },
    ]


def _topk_variant(zero_fill=False, keep=0):
    def run(logits, temperature, top_k):
        z = logits / temperature
        kth = torch.topk(z, top_k + keep, dim=-1).values[:, -1:]  # (B, 1)
        return torch.softmax(z.masked_fill(z < kth, 0.0 if zero_fill else float("-inf")), -1)

    return run


# ---- ex13_induction_score --------------------------------------------------------------------
def _induction_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, H, n, dtype):
        T = 2 * n
        scores = 3.0 * rng.normal(size=(B, H, T, T))
        scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        return {"weights": (w / w.sum(-1, keepdims=True)).astype(dtype), "period": n}

    return [case(2, 3, 5, np.float32), case(1, 4, 8, np.float64), case(3, 2, 3, np.float64)]


def _diagonal_mean(offset_from_period):
    def run(weights, period):
        d = weights.diagonal(offset=-(period + offset_from_period), dim1=-2, dim2=-1)
        return d[..., -(weights.shape[-1] - period) :].mean(dim=(0, -1))  # (B, H, n) -> (H,)

    return run


ITEMS = [
    Item(
        id="ex13_next_token_loss",
        notebook=NOTEBOOK,
        function="next_token_loss",
        points=1,
        task="mean cross-entropy (nats) of logits[:, t] predicting ids[:, t + 1], t = 0 .. T-2",
        make_cases=_loss_cases,
        shape="()",
        reference=_next_token_loss,
        mistakes=(
            Mistake("off by one", NO_SHIFT, variant=_no_shift),
            Mistake("shifted the wrong way", WRONG_SHIFT, variant=_wrong_shift),
            Mistake(
                "bits instead of nats",
                IN_BITS,
                variant=lambda lg, ids: _next_token_loss(lg, ids) / math.log(2),
            ),
        ),
    ),
    Item(
        id="ex13_perplexity",
        notebook=NOTEBOOK,
        function="perplexity",
        points=1,
        task="exp of the mean cross-entropy (nats) of logits against targets (already shifted)",
        make_cases=_ppl_cases,
        shape="()",
        reference=lambda lg, t: _token_losses(lg, t).mean().exp(),
        mistakes=(
            Mistake(
                "2 ** nats", PPL_BASE2, variant=lambda lg, t: 2.0 ** _token_losses(lg, t).mean()
            ),
            Mistake(
                "mean of exp",
                PPL_MEAN_OF_EXP,
                variant=lambda lg, t: _token_losses(lg, t).exp().mean(),
            ),
            Mistake("no exp", PPL_NO_EXP, variant=lambda lg, t: _token_losses(lg, t).mean()),
        ),
    ),
    Item(
        id="ex13_sampling_probs",
        notebook=NOTEBOOK,
        function="sampling_probs",
        points=1,
        task="softmax(top_k(logits / temperature)): the distribution one sampling step draws from",
        make_cases=_sampling_cases,
        shape="(B, V)",
        reference=lambda lg, temp, k: sampling_distribution(lg, temp, k),
        mistakes=(
            Mistake(
                "temperature multiplied",
                TEMP_MULTIPLIED,
                variant=lambda lg, temp, k: sampling_distribution(lg * temp * temp, temp, k),
            ),
            Mistake(
                "temperature ignored",
                TEMP_IGNORED,
                variant=lambda lg, temp, k: sampling_distribution(lg, 1.0, k),
            ),
            Mistake("filtered to zero, not -inf", TOPK_ZERO, variant=_topk_variant(zero_fill=True)),
            Mistake("top-k one short", TOPK_ONE_SHORT, variant=_topk_variant(keep=-1)),
        ),
        forbidden=(
            "mha_course.gpt.generate.sampling_distribution",
            "mha_course.gpt.generate.sample_next",
        ),
    ),
    Item(
        id="ex13_induction_score",
        notebook=NOTEBOOK,
        function="induction_score",
        points=1,
        task="on ids = r r (period n), per head: mean weight of query n + i on key i + 1",
        make_cases=_induction_cases,
        shape="(H,)",
        reference=lambda w, n: induction_score(w, n),
        mistakes=(
            Mistake("the copy itself", INDUCTION_COPY, variant=_diagonal_mean(0)),
            Mistake("the token before the copy", INDUCTION_BEFORE, variant=_diagonal_mean(1)),
        ),
        # the diagonal mean of a slice of the weights is the previous-token score (ex04's)
        forbidden=(
            "mha_course.gpt.heads.induction_score",
            "mha_course.gpt.heads.previous_token_score",
        ),
    ),
]

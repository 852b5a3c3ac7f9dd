"""Chapter 13's capstone, part 2: the learner's training step (loss, backward, clipping, AdamW on
the recipe's warm-up and cosine schedule), graded by running it on the course's GPT from a seeded
state (:func:`~mha_course.grading.chapters.ch13_capstone.course_gpt`) and comparing the losses and
learning rates with the steps ``mha_course.gpt.train.train`` takes (:func:`recipe_steps`; a test
checks it against that loop's loss curve)."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.gpt.config import TrainConfig
from mha_course.grading.chapters.ch13_capstone import NOTEBOOK
from mha_course.grading.child.gpt_drivers import _train_setup
from mha_grader.items import DriverItem, Mistake

_TRAIN = (
    "mha_course.gpt.train.learning_rate",
    "mha_course.gpt.train.make_optimizer",
    "mha_course.gpt.train.train",
)

WARMUP_OFF_BY_ONE = (
    "warm-up off by one: during warm-up the rate is learning_rate * step / "
    "warmup_iters (0 at step 0); the recipe's is one step further along"
)
COSINE_NOT_SHIFTED = (
    "schedule off by the warm-up: the cosine's progress is counted from step 0, "
    "not from the end of the warm-up, so it starts below the peak rate"
)
NO_CLIP = "gradients not clipped: the update uses the raw gradient, whose norm exceeds grad_clip"
NO_ZERO_GRAD = (
    "gradients accumulate: each step's gradient is added to the previous steps' "
    "(they are never reset)"
)
DECAY_ALL = (
    "decay on everything: the LayerNorm weights and the biases shrink by weight decay "
    "too; the recipe decays only the matrices (dim >= 2)"
)


# ---- task 7: the training step --------------------------------------------------------------
def _train_cases(rng: np.random.Generator) -> list[dict]:
    def case(V, n_layer, H, D, warmup, max_iters, decay, start, n, B, T):
        return {
            "seed": int(rng.integers(2**31)),
            "vocab_size": V,
            "n_layer": n_layer,
            "n_head": H,
            "n_embd": H * D,
            "learning_rate": float(rng.uniform(2e-3, 8e-3)),
            "min_lr": float(rng.uniform(1e-4, 5e-4)),
            "warmup_iters": warmup,
            "max_iters": max_iters,
            "lr_decay_iters": decay,
            "grad_clip": float(rng.uniform(0.05, 0.3)),
            "weight_decay": float(rng.uniform(0.05, 0.2)),
            "start": start,
            "xs": rng.integers(0, V, size=(n, B, T)),
            "ys": rng.integers(0, V, size=(n, B, T)),
        }

    # steps 2..5: the warm-up's end, then the cosine (decaying to step 9, before max_iters = 12);
    # and steps 1..5 with the recipe's default lr_decay_iters None (= max_iters = 4): the warm-up,
    # the cosine, then the floor min_lr (few steps: each is ~25 ms of grading, in both processes)
    return [
        case(int(rng.integers(12, 30)), 2, 2, 8, 4, 12, 9, 2, 4, 3, 8),
        case(int(rng.integers(12, 30)), 1, 4, 4, 2, 4, None, 1, 5, 2, 6),
    ]


def schedule(step: int, tc: TrainConfig, kind: str = "recipe") -> float:
    """The recipe's learning rate (:func:`mha_course.gpt.train.learning_rate`), or a mistake:
    ``"warmup_off_by_one"`` (``lr * step / warmup``), ``"cosine_from_0"`` (progress step / decay)."""
    from mha_course.gpt.train import learning_rate

    if kind == "recipe" or step >= (tc.lr_decay_iters or tc.max_iters):
        return learning_rate(step, tc)
    if step < tc.warmup_iters:
        return (
            tc.learning_rate * step / tc.warmup_iters
            if kind == "warmup_off_by_one"
            else learning_rate(step, tc)
        )
    if kind != "cosine_from_0":
        return learning_rate(step, tc)
    ratio = step / (tc.lr_decay_iters or tc.max_iters)
    return tc.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (tc.learning_rate - tc.min_lr)


def recipe_steps(
    model,
    tc: TrainConfig,
    xs,
    ys,
    start: int,
    *,
    lr_kind: str = "recipe",
    clip: bool = True,
    zero_grad: bool = True,
    decay_all: bool = False,
):
    """The steps ``mha_course.gpt.train.train`` takes (a test checks it against its loss curve),
    from ``start`` on a fresh optimizer, or with one mistake.

    Shape:
        xs, ys: (n, B, T). Returns losses (n,) and learning rates (n,).
    """
    from mha_course.gpt.model import lm_loss
    from mha_course.gpt.train import make_optimizer

    if decay_all:
        opt = torch.optim.AdamW(
            model.parameters(),
            lr=tc.learning_rate,
            betas=(tc.beta1, tc.beta2),
            weight_decay=tc.weight_decay,
        )
    else:
        opt = make_optimizer(model, tc)
    losses, lrs = [], []
    for i in range(xs.shape[0]):
        lr = schedule(int(start) + i, tc, lr_kind)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = lm_loss(model(xs[i].long()), ys[i].long())
        if zero_grad:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        losses.append(loss.detach())
        lrs.append(lr)
    return torch.stack(losses), torch.tensor(lrs, dtype=torch.float64)


def _train_ref(*case, **switches):
    *setup, start, xs, ys = case
    model, tc = _train_setup(*setup, xs.shape[-1])
    return recipe_steps(model, tc, xs, ys, start, **switches)


ITEMS = [
    DriverItem(
        id="ex13_train_steps",
        notebook=NOTEBOOK,
        function="train_steps",
        points=2,
        task="steps start .. start+n-1 of the recipe: loss, backward, clip, AdamW at the schedule's "
        "rate -> (losses, lrs)",
        make_cases=_train_cases,
        shape="(n,), (n,)",
        reference=_train_ref,
        driver="mha_course.grading.child.drivers:drive_train",
        dtype_must_match=False,
        mistakes=(
            Mistake(
                "warm-up off by one",
                WARMUP_OFF_BY_ONE,
                variant=lambda *a: _train_ref(*a, lr_kind="warmup_off_by_one"),
            ),
            Mistake(
                "schedule off by the warm-up",
                COSINE_NOT_SHIFTED,
                variant=lambda *a: _train_ref(*a, lr_kind="cosine_from_0"),
            ),
            Mistake("no clipping", NO_CLIP, variant=lambda *a: _train_ref(*a, clip=False)),
            Mistake(
                "gradients accumulate",
                NO_ZERO_GRAD,
                variant=lambda *a: _train_ref(*a, zero_grad=False),
            ),
            Mistake(
                "decay on everything", DECAY_ALL, variant=lambda *a: _train_ref(*a, decay_all=True)
            ),
        ),
        forbidden=_TRAIN,
    ),
]

"""Chapter 20: do two greedy generations agree — knowing that low precision can tie.

Greedy decoding takes the argmax of the logits. In bfloat16 (8 significant bits) two
candidates' logits are often equal, or one rounding step apart, and two correct programs that
round in a different order (the course's modules and ``transformers``' kernels) can then pick
different tokens; from there on the texts differ, and neither is wrong. :func:`compare_greedy`
finds the first step where the tokens differ and looks at both models' logits there: if, in
each model, the other model's token is within one rounding step of its own choice, it is a tie
(the texts split at a coin toss), otherwise a real difference. It reports the step, the two
logits in each model and the margins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def rounding_step(value: float, dtype: torch.dtype) -> float:
    """The distance between neighbouring numbers of ``dtype`` near ``value`` (one ulp)."""
    info = torch.finfo(dtype)
    magnitude = max(abs(value), info.tiny)
    return info.eps * 2.0 ** math.floor(math.log2(magnitude))


@dataclass
class Agreement:
    """The result of :func:`compare_greedy`. ``step`` is the first new token that differs
    (0-based), None when all agree; ``ours`` / ``theirs`` the two tokens there; ``our_logits`` and
    ``their_logits`` each model's logits for (our token, their token); ``steps`` the rounding
    step of each model's logits there."""

    same: bool
    tie: bool = False
    step: int | None = None
    ours: int | None = None
    theirs: int | None = None
    our_logits: tuple[float, float] = (0.0, 0.0)
    their_logits: tuple[float, float] = (0.0, 0.0)
    steps: tuple[float, float] = (0.0, 0.0)
    dtype: torch.dtype = torch.float32

    @property
    def consistent(self) -> bool:
        """The same tokens, or tokens that split only at a tie."""
        return self.same or self.tie

    def line(self) -> str:
        if self.same:
            return "transformers' generate: the same tokens"
        if self.ours is None:
            return (
                f"transformers' generate: DIFFERENT tokens: the same first {self.step} new "
                f"tokens, then one generation stops and the other goes on"
            )
        (a_o, b_o), (a_t, b_t) = self.our_logits, self.their_logits
        detail = (
            f"new token {self.step}: ours {self.ours} (logit {a_o:.6g}, theirs {self.theirs} "
            f"{b_o:.6g}; margin {a_o - b_o:.3g}), transformers' {self.theirs} (logit {b_t:.6g}, "
            f"ours {self.ours} {a_t:.6g}; margin {b_t - a_t:.3g})"
        )
        if self.tie:
            return (
                f"transformers' generate: the same tokens up to a tie in {self.dtype} at "
                f"{detail}: both margins within one rounding step "
                f"({max(self.steps):.3g}); the texts split there, neither is wrong"
            )
        return (
            f"transformers' generate: DIFFERENT tokens from {detail}: a margin larger than "
            f"one rounding step ({max(self.steps):.3g})"
        )


@torch.no_grad()
def compare_greedy(
    ours_model, hf_model, prompt_length: int, mine: torch.Tensor, theirs: torch.Tensor
) -> Agreement:
    """Compare two greedy continuations of one prompt (row 0), tie-aware (module docstring).

    Shape:
        mine, theirs: (1, prompt_length + n) token ids, n may differ between them.
    """
    if mine.shape == theirs.shape and torch.equal(mine, theirs):
        return Agreement(same=True)
    n = min(mine.shape[1], theirs.shape[1])
    differ = (mine[0, :n] != theirs[0, :n]).nonzero()
    if len(differ) == 0:  # one stopped earlier (an end-of-sequence token only one produced)
        return Agreement(same=False, step=n - prompt_length)
    p = int(differ[0])
    a, b = int(mine[0, p]), int(theirs[0, p])
    prefix = mine[:, :p]  # the same in both up to p
    ol = ours_model(prefix)[0, -1]
    tl = hf_model(prefix).logits[0, -1]
    our_logits = (float(ol[a]), float(ol[b]))
    their_logits = (float(tl[a]), float(tl[b]))
    steps = (rounding_step(our_logits[0], ol.dtype), rounding_step(their_logits[1], tl.dtype))
    tie = (our_logits[0] - our_logits[1] <= steps[0]) and (
        their_logits[1] - their_logits[0] <= steps[1]
    )
    return Agreement(
        same=False,
        tie=tie,
        step=p - prompt_length,
        ours=a,
        theirs=b,
        our_logits=our_logits,
        their_logits=their_logits,
        steps=steps,
        dtype=ol.dtype,
    )

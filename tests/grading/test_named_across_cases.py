"""A known mistake is named only when no other failing case contradicts it.

The first failing case alone can mislead: ring_source's rank r receives from (r - s) % P at step s;
a learner's (s - r) % P agrees with the "wrong direction" mistake, (r + s) % P, on the first case
(r = 0) but not on a ring of P >= 3 with r > 0, so that name would send them after a bug they do
not have. Judged in the parent, on outputs made here from the wrong formula (no sandbox).
"""

from __future__ import annotations

import numpy as np
import pytest

from mha_course.grading import all_items
from mha_grader.compare import judge, to_framework
from mha_grader.verdicts import WRONG_VALUES

ITEMS = {it.id: it for it in all_items()}


def _judge_formula(item_id: str, formula, seed: int = 12345):
    item = ITEMS[item_id]
    cases = item.cases(seed)
    outs = [[np.asarray(formula(*to_framework(item, c)), dtype=np.int64)] for c in cases]
    return judge(item, cases, {"status": "ok", "outputs": outs}, public=False)


NAMED = "wrong direction"


@pytest.mark.parametrize(
    "formula, named",
    [
        (lambda r, s, P: (r + s) % P, True),  # the mistake itself: named on every case
        (lambda r, s, P: (s - r) % P, False),  # agrees with it on case 1 only
        (lambda r, s, P: (r - s + 1) % P, False),  # off by one step: not that mistake
    ],
    ids=["wrong direction", "mirrored", "off by one"],
)
def test_a_mistake_is_named_only_if_every_failing_case_agrees(formula, named):
    r = _judge_formula("ex19_ring_source", formula)
    assert r.status == WRONG_VALUES and r.points == 0.0, r.message
    assert (NAMED in r.message) == named, r.message


def test_the_first_case_alone_would_have_named_it():
    """The case this file is about: (s - r) % P equals the mistake's output on the first case."""
    item = ITEMS["ex19_ring_source"]
    first = item.cases(12345)[0]
    r, s, P = first["rank"], first["step"], first["world_size"]
    assert (s - r) % P == (r + s) % P != (r - s) % P


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_mistake_itself_is_named_on_other_seeds(seed):
    r = _judge_formula("ex19_ring_source", lambda r, s, P: (r + s) % P, seed)
    assert NAMED in r.message, r.message
